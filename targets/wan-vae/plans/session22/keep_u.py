"""optimize.py, but a decoder built for a latent of at most half the full preset's pixels (a split
rank's slab) keeps every Winograd U (6.4 GB for the sixteen 1024-channel convs) instead of making the
widest ones at each call (issue 44; session 22, not measured). A profiled 2-GPU call on 2x H200 spent
33 ms a rank in _weight_transform, the same as one GPU (34 ms): every rank makes all of U. A rank's
peak was 10.8 GB against full-2gpu's 24 GB. Predicted: 2 GPUs 0.912 -> 0.875-0.895 s, 4 GPUs -30 ms a
call; one GPU unchanged (its U still made per call: it would not fit the full preset's 20 GB).
Runs optimize.py's own source in this module's namespace, then changes how build_decoder sizes U."""
from pathlib import Path as _Path

_src = _Path(__file__).resolve().parents[2] / "optimize.py"  # targets/wan-vae/optimize.py
exec(compile(_src.read_text(), str(_src), "exec"))
_build = build_decoder  # noqa: F821
FULL_PIXELS = 44 * 80  # the full preset's latent frame


def build_decoder(vae, example_latent, low_memory=False):
    global WINOGRAD_KEPT_U_BYTES
    h, w = example_latent.shape[-2:]
    kept = WINOGRAD_KEPT_U_BYTES  # noqa: F821
    if not low_memory and 2 * h * w <= FULL_PIXELS:
        WINOGRAD_KEPT_U_BYTES = 1 << 40  # a slab: room for every U
    try:
        decoder, info = _build(vae, example_latent, low_memory)
    finally:
        WINOGRAD_KEPT_U_BYTES = kept
    return decoder, {**info, "winograd_u": "all kept" if 2 * h * w <= FULL_PIXELS and not low_memory else "widest made each call"}
