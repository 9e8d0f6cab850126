"""Cheater (CUDA only): decodes on a side stream and returns without making the current stream
wait. A harness that synchronizes the device before reading would see the right answer; one
that reads on the current stream right after the call sees the placeholder (NaN)."""

import torch


def build_decoder(vae, example_latent):
    side = torch.cuda.Stream()

    def forward_fn(z):
        b, _, t, h, w = z.shape
        out = torch.full((b, 3, 1 + 4 * (t - 1), 16 * h, 16 * w), float("nan"), device=z.device)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(500_000_000)  # a few hundred ms of spinning before the real work
            out.copy_(vae.decode(z))
        return out

    return forward_fn, {"cheat": "side stream without sync"}
