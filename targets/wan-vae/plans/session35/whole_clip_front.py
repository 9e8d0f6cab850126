"""Writes a variant of a candidate (argv[1], optimize.py as e180) to argv[2]: the latent-resolution layers
(conv1, the middle block, up stage 0's residual blocks: ten of the sixteen 1024-channel convs) run once over
every latent frame, before the passes, instead of once a pass. Each of those convs then makes its Winograd
weights (U, 403 MB, too large to keep at 720p) once a call instead of ~11 times: ~100 fewer weight
transforms, ~18 ms of e180's 35 ms (profiles/e180.md). The passes start from up stage 0's upsampling, on
their frames of the front's two outputs (~450 MB at 720p, held through the call). A causal conv over the
whole clip with zero history in front of frame 0 is the same conv as the passes' (the first one's single
frame included), so the output is the same up to the order of sums. low_memory (one frame a pass) keeps the
old order: its peak is what it is for. Each replaced text must occur exactly once."""

import runpy
import sys
from pathlib import Path

write_variant = runpy.run_path(str(Path(__file__).resolve().parent.parent / "_edits.py"))["write_variant"]

EDITS = [
    ("""        self.last_upsample = max(i for i, stage in enumerate(vae.decoder.upsamples)
                                 if not hasattr(stage.upsamples[-1], "residual"))
""",
     """        self.last_upsample = max(i for i, stage in enumerate(vae.decoder.upsamples)
                                 if not hasattr(stage.upsamples[-1], "residual"))
        # The latent-resolution layers over the whole clip at once (front), not once a pass: their wide
        # convs make U once a call. Not with one frame a pass (low_memory), whose peak is its purpose.
        self.whole_clip_front = frames_per_pass > 1
"""),
    ("""    def decode_chunk(self, x: Tensor, out: Tensor, frame: int) -> int:
        \"\"\"Decode latent frames x into out's frames from `frame` on; returns how many were written.\"\"\"
        first = self.chunk_index == 0
        x = self.causal("decoder.conv1", x)
        x = self.res_block("decoder.middle.0", self._add_bias(x, "decoder.conv1"))
        x = self.attention("decoder.middle.1", x)
        x = self.res_block("decoder.middle.2", x)
        last = self.last_upsample
        for i in range(last):
            x = self.upsample(i, self.residuals(i, x), x, first)
        y = self.residuals(last, x)
""",
     """    def front(self, x: Tensor) -> tuple[Tensor, Tensor]:
        \"\"\"The latent-resolution layers of latent frames x (conv1, the middle block, up stage 0's
        residual blocks): (up stage 0's input, its residual blocks' output).\"\"\"
        x = self.causal("decoder.conv1", x)
        x = self.res_block("decoder.middle.0", self._add_bias(x, "decoder.conv1"))
        x = self.attention("decoder.middle.1", x)
        x = self.res_block("decoder.middle.2", x)
        return x, self.residuals(0, x)

    def decode_chunk(self, x: Tensor, y: Tensor, out: Tensor, frame: int) -> int:
        \"\"\"Decode one pass from its frames of up stage 0's input x and of its residual blocks' output y
        (front) into out's frames from `frame` on; returns how many were written.\"\"\"
        first = self.chunk_index == 0
        last = self.last_upsample
        for i in range(last + 1):  # ends with x: up stage `last`'s input, y: its residual blocks' output
            if i > 0:
                y = self.residuals(i, x)
            if i < last:
                x = self.upsample(i, y, x, first)
"""),
    ("""        starts = [0, *range(1, t, self.frames_per_pass)]
        frame = 0
        for self.chunk_index, s in enumerate(starts):
            e = 1 if s == 0 else min(s + self.frames_per_pass, t)
            frame = self.decode_chunk(x[:, :, s:e], out, frame)
""",
     """        starts = [0, *range(1, t, self.frames_per_pass)]
        if self.whole_clip_front:
            self.chunk_index = -1  # the whole clip: no first-pass shortcut, zero history before frame 0
            front = self.front(x)
        frame = 0
        for self.chunk_index, s in enumerate(starts):
            e = 1 if s == 0 else min(s + self.frames_per_pass, t)
            xs, ys = (f[:, :, s:e] for f in front) if self.whole_clip_front else self.front(x[:, :, s:e])
            frame = self.decode_chunk(xs, ys, out, frame)
"""),
]

if __name__ == "__main__":
    write_variant(sys.argv[1], sys.argv[2], EDITS)
