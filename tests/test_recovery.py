"""Recovery paths that work (issue 24, item 3), and an input source chosen by the target: prepare.py
checks what is there and remakes what is damaged or stale (and has the --force its messages used to
name); a damaged synthetic-weights cache names the file and the command that remakes it; prepare
on a target that is not a video (the toy) makes its seeded input without trying a clip, no
--seeded needed.
"""

from __future__ import annotations

import contextlib
import io
import shutil
from pathlib import Path

import pytest
import torch

from conftest import use
from harness import _common as C
from harness.target import assets
from harness.cli import prepare
from harness.errors import Refused


def prepare_here(ws: Path, *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with use(ws), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = prepare.main(["--device", "cpu", *args])
    return code, out.getvalue(), err.getvalue()


def sound(ws: Path) -> bool:
    with use(ws):
        goals = C.load_goals()
        return prepare.problems(goals, C.load_adapter(goals), "tiny") == {}


def test_prepare_remakes_what_is_damaged_or_stale(toy: Path, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    shutil.copytree(toy, ws, symlinks=True)
    assets = ws / "assets"
    code, out, err = prepare_here(ws)
    assert code == 0 and "all sound" in out and err == "", out + err

    (assets / "input_tiny.pt").write_bytes(b"garbage, not a torch file")  # the damaged asset
    ref = torch.load(assets / "reference_tiny.pt", weights_only=True)
    pool_file = sorted((assets / "pool_tiny").glob("*.pt"))[0]
    pool_file.write_bytes(pool_file.read_bytes()[:100])  # cut short
    code, out, err = prepare_here(ws)
    assert code == 0 and "made" in out, out + err
    assert "remaking the input" in err and "damaged" in err and "remaking the pool" in err, err
    assert sound(ws)  # a new input (a secret seed) and, since it was made from the old one, a new reference
    ref = torch.load(assets / "reference_tiny.pt", weights_only=True)

    ref["meta"]["model_sha256"] = "0" * 64  # stale: made with other model code
    torch.save(ref, assets / "reference_tiny.pt")
    assert not sound(ws)
    code, out, err = prepare_here(ws)
    assert code == 0 and "remaking the reference: model code changed" in err and sound(ws), out + err

    before = (assets / "input_tiny.pt").stat().st_mtime_ns
    code, out, err = prepare_here(ws, "--force")  # the flag the messages named, now there
    assert code == 0 and (assets / "input_tiny.pt").stat().st_mtime_ns != before and sound(ws), out + err


def test_messages_name_a_command_that_remakes(toy: Path, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    shutil.copytree(toy, ws, symlinks=True)
    (ws / "assets" / "input_tiny.pt").write_bytes(b"garbage")
    with use(ws), pytest.raises(Refused) as e:
        goals = C.load_goals()
        assets.load_input_asset(goals, C.load_adapter(goals), "tiny")
    assert "auto-optim prepare" in str(e.value) and "--force" not in str(e.value)


def test_toy_target_input_is_seeded_without_a_clip(toy: Path, tmp_path: Path) -> None:
    """The toy's output is 5-D like a video but is not one: prepare makes its seeded input, with no
    try at the Tears of Steel clip (offline that try is a note on stderr) and no --seeded."""
    ws = tmp_path / "ws"
    shutil.copytree(toy, ws, symlinks=True)
    shutil.rmtree(ws / "assets")
    code, out, err = prepare_here(ws)
    assert code == 0 and "Tears of Steel" not in err and "clip" not in err, out + err
    assert torch.load(ws / "assets" / "input_tiny.pt", weights_only=True)["meta"]["source"] == "seeded"
    from harness.target import make_latent

    with use(ws), pytest.raises(make_latent.InputError, match="not a video"):
        make_latent.run("tiny", mode="synthetic-clip", device="cpu", force=True)


def test_damaged_weights_cache_names_the_file_and_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture) -> None:
    """In a sandboxed worker the assets folder is read-only, and torch.save raises RuntimeError
    there (inline_container.cc ... Permission denied), which the old code did not catch."""
    import model

    cache = tmp_path / "synthetic-x.pt"
    cache.write_bytes(b"damaged")
    small = {"w": torch.ones(2)}
    monkeypatch.setattr(model, "synthetic_cache", lambda: cache)
    monkeypatch.setattr(model, "synthetic_state_dict", lambda vae: small)
    real_save = torch.save

    def read_only(*a, **k):
        raise RuntimeError("[enforce fail at inline_container.cc:747] . PytorchStreamWriter failed: Permission denied")

    monkeypatch.setattr(torch, "save", read_only)
    with pytest.raises(RuntimeError) as e:
        model._synthetic(None)
    assert str(cache) in str(e.value) and "auto-optim prepare" in str(e.value)
    assert len(f"RuntimeError: {e.value}") < 300  # the line the harness shows of a worker that died

    monkeypatch.setattr(torch, "save", real_save)  # where it may write (prepare.py): remade, and said so
    assert model._synthetic(None) is small
    assert "was damaged" in capsys.readouterr().err and torch.load(cache, weights_only=True)["w"].sum() == 2
    cache.unlink()
    monkeypatch.setattr(torch, "save", read_only)  # no cache and read-only: the weights, uncached
    assert model._synthetic(None) is small


def test_adapter_contract_checked_at_load(tmp_path: Path) -> None:
    """An adapter without some of the functions the harness calls is refused when it loads, with
    every missing piece named in one line (not an AttributeError deep in a run)."""
    ws = tmp_path / "ws"
    (ws / "halfmodel").mkdir(parents=True)
    (ws / "halfmodel" / "__init__.py").write_text("")
    (ws / "halfmodel" / "target.py").write_text("def load_model(device='cpu'):\n    return None\n\n"
                                                 "def weights_kind():\n    return 'synthetic'\n")
    rest = '"presets": {"tiny": {"input_shape": [1]}}, "gate": {}, "stop_rule": {}'  # what every goals file names
    (ws / "goals.json").write_text('{"adapter": "halfmodel.target", "floor": {"work": "bytes"}, ' + rest + '}')
    with use(ws), pytest.raises(Refused) as e:
        C.load_adapter(C.load_goals())
    msg = str(e.value)
    assert "\n" not in msg and "lacks 6 functions" in msg, msg
    for fn in ("weights_id(", "make_input(", "reference(", "output_shape(", "compare(", "min_bytes("):
        assert fn in msg, fn
    (ws / "goals.json").write_text('{"adapter": "nosuch.target", ' + rest + '}')
    with use(ws), pytest.raises(Refused, match="adapter module nosuch.target .* not found"):
        C.load_adapter(C.load_goals())


def test_a_full_disk_is_said_as_such(toy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 43: a full disk while prepare wrote the weights cache read "run python harness/prepare.py,
    which remakes it" (torch.save says only "unexpected pos"). A disk or permission error is now one
    line that says so, exit 2, from prepare and from run_experiment."""
    import errno
    import shutil as sh

    import model

    cache = tmp_path / "synthetic-x.pt"
    cache.write_bytes(b"damaged by the disk that filled up")
    monkeypatch.setattr(model, "synthetic_cache", lambda: cache)
    monkeypatch.setattr(model, "synthetic_state_dict", lambda vae: {"w": torch.ones(1000)})

    def full(*a, **k):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")  # ENOSPC, as torch says it

    monkeypatch.setattr(torch, "save", full)
    monkeypatch.setattr(sh, "disk_usage", lambda path: sh._ntuple_diskusage(10**9, 10**9 - 100, 100))
    with pytest.raises(OSError) as e:
        model._synthetic(None)
    assert e.value.errno == errno.ENOSPC and "No space left" in str(e.value) and "prepare.py" not in str(e.value)
    assert "GB needed" in str(e.value) and e.value.filename == str(cache)

    ws = tmp_path / "ws"
    sh.copytree(toy, ws, symlinks=True)
    def no_room(device="cpu"):
        raise OSError(errno.ENOSPC, "No space left on device", str(ws / "assets" / "weights.pt"))

    with use(ws):
        adapter = C.load_adapter(C.load_goals())
    monkeypatch.setattr(adapter, "load_model", no_room)
    code, out, err = prepare_here(ws)
    assert code == 2 and err.strip().splitlines() == [
        f"prepare: disk or permission error: No space left on device ({ws / 'assets' / 'weights.pt'}): free some space; "
        "what was made before it is kept: run it again once that is fixed"], out + err

    from harness.cli import run_experiment

    def read_only(*a, **k):
        raise PermissionError(errno.EACCES, "Permission denied", str(ws / "results.tsv"))

    monkeypatch.setattr(run_experiment, "check_complete", read_only)
    with use(ws), contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()) as err:
        code = run_experiment.main(["--desc", "x", "--device", "cpu"])
    assert code == 2 and err.getvalue().startswith("run_experiment: disk or permission error: Permission denied ("), err.getvalue()
    assert len(err.getvalue().strip().splitlines()) == 1 and "make it writable by this user" in err.getvalue()
