"""make_latent.py / make_reference.py: the synthetic-clip path end to end (through the VAE's
adapter, model/clip.py), and bad inputs (one line on stderr, exit != 0, nothing overwritten)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from harness import hashing
from harness import _common as C
from harness.target import assets

from harness.target import make_latent, make_reference
from model.clip import render_synthetic_clip
from conftest import tool

REPO = Path(__file__).resolve().parent.parent
VAE = REPO / "targets" / "wan-vae"  # the worked example's target folder


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty workspace (no assets) with AUTO_OPTIM_GOALS pointing at it."""
    shutil.copy2(VAE / "goals.json", tmp_path / "goals.json")
    (tmp_path / "model").symlink_to(VAE / "model", target_is_directory=True)
    (tmp_path / "assets").mkdir()
    monkeypatch.setenv(C.GOALS_ENV, str(tmp_path / "goals.json"))
    return tmp_path


def cli(script: str, ws: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, C.GOALS_ENV: str(ws / "goals.json")}
    return subprocess.run([*tool(f"harness.target.{script}"), "--preset", "tiny",
                           "--device", "cpu", *args], env=env, capture_output=True, text=True, timeout=300)


def test_synthetic_clip_end_to_end(scratch: Path, vae: torch.nn.Module) -> None:
    facts = make_latent.run("tiny", mode="synthetic-clip", device="cpu", model=vae)
    asset = torch.load(assets.input_path("tiny"), weights_only=True)
    assert list(asset["input"].shape) == [1, 48, 3, 2, 2] and asset["input"].dtype == torch.float32
    assert facts["source"] == "synthetic-clip" and len(facts["clip_sha256"]) == 64
    assert asset["meta"]["sha256"] == hashing.sha256_tensor(asset["input"])


def test_clip_too_few_frames_and_too_small(scratch: Path) -> None:
    short = scratch / "short.mp4"
    render_synthetic_clip(short, frames=5, height=32, width=32)
    r = cli("make_latent", scratch, "--clip", str(short))
    assert r.returncode == 2 and "needs 9" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    small = scratch / "small.mp4"
    render_synthetic_clip(small, frames=9, height=16, width=48)
    with pytest.raises(make_latent.InputError, match="at least 32x32"):
        make_latent.run("tiny", mode="clip", clip=str(small), device="cpu")
    assert not assets.input_path("tiny").exists()


def test_missing_and_unreadable_clip(scratch: Path) -> None:
    with pytest.raises(make_latent.InputError, match="not found"):
        make_latent.run("tiny", mode="clip", clip=str(scratch / "nope.mp4"), device="cpu")
    junk = scratch / "junk.mp4"
    junk.write_bytes(b"not a video")
    with pytest.raises(make_latent.InputError, match="cannot open"):
        make_latent.run("tiny", mode="clip", clip=str(junk), device="cpu")


def test_an_unreachable_clip_url_says_so_in_plain_words() -> None:
    """The target's own clip is a URL: offline, PyAV raises an OSError whose text is an errno and the
    URL again ("[Errno 5] Input/output error: 'https://...'"); the refusal says what it means."""
    from harness.errors import Refused
    from model.clip import read_clip

    with pytest.raises(Refused) as e:
        read_clip("http://127.0.0.1:9/clip.mov", 9, 32, 32, timeout_s=5)  # port 9: nothing listens
    said = str(e.value)
    assert said.startswith("cannot download clip http://127.0.0.1:9/clip.mov: offline, or its server did not answer")
    assert "[Errno" not in said and said.count("127.0.0.1") == 1 and "\n" not in said, said


def test_refuses_overwrite_and_unknown_preset(scratch: Path) -> None:
    make_latent.run("tiny", mode="seeded", device="cpu")
    before = assets.input_path("tiny").read_bytes()
    assert make_latent.main(["--preset", "tiny", "--seeded"]) == 2
    assert make_latent.main(["--preset", "nope", "--seeded"]) == 2
    assert assets.input_path("tiny").read_bytes() == before


@pytest.mark.parametrize("bad", ["wrong_shape", "wrong_dtype", "not_a_dict", "garbage", "missing"])
def test_make_reference_bad_input(scratch: Path, bad: str, capsys: pytest.CaptureFixture) -> None:
    path = assets.input_path("tiny")
    x = torch.zeros(1, 48, 3, 2, 2)
    if bad == "wrong_shape":
        torch.save({"input": torch.zeros(1, 48, 3, 2, 3), "meta": {}}, path)
    elif bad == "wrong_dtype":
        torch.save({"input": x.double(), "meta": {}}, path)
    elif bad == "not_a_dict":
        torch.save(x, path)
    elif bad == "garbage":
        path.write_bytes(b"garbage")
    ref = assets.reference_path("tiny")
    ref.write_bytes(b"old reference")
    assert make_reference.main(["--preset", "tiny", "--device", "cpu", "--force"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("make_reference:"), err
    assert ref.read_bytes() == b"old reference"


def test_make_reference_refuses_overwrite_cli(scratch: Path) -> None:
    assets.reference_path("tiny").write_bytes(b"old")
    assets.pool_dir("tiny").mkdir()  # both there: the refusal is the overwrite's (not the missing input's)
    r = cli("make_reference", scratch)
    assert r.returncode == 2 and "--force" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert assets.reference_path("tiny").read_bytes() == b"old"
