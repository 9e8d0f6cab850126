"""The SkyPilot flow (scripts/sky/): the task file read by SkyPilot's own loader (skipped without
skypilot), and launch.sh driven against stand-ins for `sky` and `rsync` (no cloud needed)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TASK = REPO / "scripts" / "sky" / "experiment.yaml"
LAUNCH = REPO / "scripts" / "sky" / "launch.sh"


def test_task_file_loads_with_skypilots_own_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    sky = pytest.importorskip("sky")
    monkeypatch.chdir(REPO)  # workdir "." is the checkout, as launch.sh runs it
    task = sky.Task.from_yaml(str(TASK))
    assert [r.accelerators for r in task.resources] == [{"H100": 1}]
    assert task.envs["CANDIDATE"] == "optimize.py" and "pip install -q -r requirements.txt" in task.setup
    assert "harness.cli.run_experiment --measure-only --record-out" in task.run and "-e ." in task.setup
    modules = re.findall(r"-m (harness[\w.]+)", task.setup + task.run)
    assert modules == ["harness.cli.prepare", "harness.cli.run_experiment"], modules
    for module in modules:  # what it runs exists ...
        assert (REPO / (module.replace(".", "/") + ".py")).is_file(), module
    source = "".join((REPO / (m.replace(".", "/") + ".py")).read_text() for m in modules)
    for flag in set(re.findall(r"--[a-z][a-z-]+", task.run)):  # ... and takes these flags
        assert f'"{flag}"' in source, flag


def test_launch_runs_the_task_and_brings_the_record_back(tmp_path: Path) -> None:
    """launch.sh against stand-ins: sky launch gets the task and the candidate, rsync fetches the
    record the task wrote, and the cluster is taken down."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    log = tmp_path / "calls.log"
    (bin_ / "sky").write_text(f'#!/bin/sh\necho "sky $*" >> {log}\n')
    (bin_ / "rsync").write_text(f'#!/bin/sh\necho "rsync $*" >> {log}\nfor last; do :; done\necho "{{}}" > "$last"\n')
    for f in bin_.iterdir():
        f.chmod(0o755)
    repo = tmp_path / "repo"
    (repo / "scripts" / "sky").mkdir(parents=True)
    (repo / "candidates").mkdir()
    for f in (TASK, LAUNCH):
        shutil.copy2(f, repo / "scripts" / "sky" / f.name)
    (repo / "candidates" / "Fast_bf16.py").write_text("# a candidate\n")
    home = tmp_path / "home"  # the person's signing key, which the task mounts on the cluster
    (home / ".config" / "auto-optim").mkdir(parents=True)
    (home / ".config" / "auto-optim" / "record-key").write_bytes(os.urandom(32))
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "HOME": str(home)}
    p = subprocess.run(["bash", "scripts/sky/launch.sh", "candidates/Fast_bf16.py", "bf16 weights"], cwd=repo, env=env,
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    calls = log.read_text().splitlines()
    cluster = calls[0].split(" -c ")[1].split()[0]
    assert re.fullmatch(r"ao-fast-bf16-\d+", cluster), cluster
    assert calls[0].startswith("sky launch -y") and calls[0].endswith("scripts/sky/experiment.yaml")
    assert "--env CANDIDATE=candidates/Fast_bf16.py --env DESC=bf16 weights" in calls[0]
    rec = f"runs/sky/{cluster}.json"
    assert calls[1] == f"rsync -az {cluster}:sky_workdir/{rec} {rec}" and (repo / rec).is_file()
    assert calls[2] == f"sky down -y {cluster}" and f"auto-optim apply {rec}" in p.stdout
    p = subprocess.run(["bash", "scripts/sky/launch.sh", "candidates/missing.py", "x"], cwd=repo, env=env,
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "no candidate file" in p.stderr
    p = subprocess.run(["bash", "scripts/sky/launch.sh", "candidates/Fast_bf16.py", "x"], cwd=repo,
                       env={**env, "HOME": str(tmp_path)}, capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "no record-signing key" in p.stderr
