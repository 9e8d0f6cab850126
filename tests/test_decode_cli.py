"""model/to_mp4.py: a tiny latent becomes an mp4 whose frames are the decoded video; bad input
is refused with one line and nothing is written or overwritten; --compare writes the strip.

On the VAE's architecture at narrow widths (tests/narrow_vae, the real target's gate and presets):
what is checked here is the files to_mp4.py writes, not the model's channel counts, and
optimize.py's decoder beside a full-width model would hold 5 GB."""

from __future__ import annotations

import argparse

import numpy as np
import pytest
import torch

av = pytest.importorskip("av", reason="PyAV is not installed")

from conftest import use  # noqa: E402
from harness import _common  # noqa: E402
from harness.target import assets
from model import to_mp4  # noqa: E402

# yuv444p at crf 0 is lossless in YUV, so the only error left is the 8-bit RGB <-> limited-range
# YUV round trip: RGB levels are quantized to ~219/255 steps and each matrix rounds, measured
# at <= 2 levels; 3 leaves a margin. The CLI's yuv420p also halves chroma resolution, which on
# these noisy synthetic frames (random weights: colour changes every pixel) costs tens of levels
# in R, G, B, so the CLI's own file is checked on luma, which yuv420p keeps at full resolution.
MAX_LEVELS_444 = 3
MEAN_LUMA_LEVELS_420 = 2.0


def _luma(frames: np.ndarray) -> np.ndarray:
    return frames.astype(np.float64) @ np.array([0.299, 0.587, 0.114])


@pytest.fixture(scope="module")
def decoded(narrow_workspace, narrow_vae, tmp_path_factory):
    """One decode of the tiny preset latent with --compare (model shared with the session)."""
    vae = narrow_vae
    with use(narrow_workspace):
        adapter = _common.load_adapter(_common.load_goals())
        patch = pytest.MonkeyPatch()
        patch.setattr(adapter, "load_model", lambda device="cpu": vae)
        out = tmp_path_factory.mktemp("decode") / "tiny.mp4"
        args = argparse.Namespace(latent=assets.input_path("tiny"), out=out, fps=24, crf=0,
                                  compare=True, force=False, preset_free=False, candidate=None,
                                  device="cpu")
        facts, video = to_mp4.decode(args)
        patch.undo()
    return facts, video, out


def _read_frames(path) -> np.ndarray:
    with av.open(str(path)) as container:
        return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])


def test_mp4_frames_match_the_decoded_tensor(decoded, tmp_path):
    facts, video, out = decoded
    expected = to_mp4.to_frames(video).astype(np.int16)
    got = _read_frames(out).astype(np.int16)
    assert got.shape == expected.shape == (9, 32, 32, 3)
    assert facts["frames"] == 9 and facts["decode_s"] > 0
    assert np.abs(_luma(got) - _luma(expected)).mean() <= MEAN_LUMA_LEVELS_420

    lossless = tmp_path / "lossless.mp4"
    to_mp4.write_mp4(to_mp4.to_frames(video), lossless, 24, 0, "test", pix_fmt="yuv444p")
    assert np.abs(_read_frames(lossless).astype(np.int16) - expected).max() <= MAX_LEVELS_444


def test_compare_writes_clip_and_strip(decoded):
    facts, _, out = decoded
    strip = out.with_name("tiny_strip.png")
    assert strip.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    clip = _read_frames(out.with_name("tiny_compare.mp4"))
    assert clip.shape == (9, 32, 96, 3)  # reference | candidate | difference
    assert facts["gate_passed"] is True


def _run(args: list[str], capsys) -> tuple[int, str]:
    code = to_mp4.main(args)
    return code, capsys.readouterr().err.strip()


def test_bad_inputs_fail_with_one_line(at_narrow_workspace, tmp_path, capsys):
    good = str(assets.input_path("tiny"))
    out = tmp_path / "v.mp4"
    torch.save(torch.zeros(1, 4, 3, 2, 2), tmp_path / "shape.pt")
    torch.save(torch.zeros(1, 48, 3, 2, 2, dtype=torch.int64), tmp_path / "dtype.pt")
    torch.save(torch.zeros(1, 48, 5, 3, 3), tmp_path / "odd.pt")
    cases = {
        "not found": [str(tmp_path / "missing.pt"), "--out", str(out)],
        "not [1, 48": [str(tmp_path / "shape.pt"), "--out", str(out)],
        "not floating": [str(tmp_path / "dtype.pt"), "--out", str(out)],
        "preset-free": [str(tmp_path / "odd.pt"), "--out", str(out)],
        "does not exist": [good, "--out", str(tmp_path / "nodir" / "v.mp4")],
        "not writable": [good, "--out", "/proc/v.mp4"],  # checked before any decoding, even as root
        ".mp4": [good, "--out", str(tmp_path / "v.avi")],
    }
    for needle, argv in cases.items():
        code, err = _run(argv, capsys)
        assert code == 1 and needle in err and len(err.splitlines()) == 1, (needle, err)
    assert list(tmp_path.glob("*.mp4")) == []


def test_existing_output_is_kept(at_narrow_workspace, tmp_path, capsys):
    out = tmp_path / "v.mp4"
    out.write_bytes(b"precious")
    code, err = _run([str(assets.input_path("tiny")), "--out", str(out)], capsys)
    assert code == 1 and "--force" in err
    assert out.read_bytes() == b"precious"
