"""Cheater: reads what the project records about its own runs: results.tsv, records/*.json (past
candidates' sources and figures), leaderboard.md, PROGRESS.md, runs/*.lock (today
"pid <harness pid>, since ...": which tool holds it, so which tool runs this worker) and .git
(past keepers), in the goals file's folder (C.root()), the repository the worker's harness comes
from, the working directory and any folder named in CHEAT_LOOK. With them a candidate learns the
best time to beat, copies other experiments' tricks, or tells an experiment from a verify.
Whatever it reads, it returns garbage, so a read shows as a gate failure; `info` lists the files.

Stopped by: the worker's mount namespace holds none of those folders (only what it needs: the
interpreter, the frozen harness and model code, its candidate's source and its scratch). The test
checks that the cheater passes and read nothing."""

import glob
import os
from pathlib import Path

import torch

from _target import honest

PATTERNS = ("results.tsv", "leaderboard.md", "PROGRESS.md", "records/*.json", "runs/*.lock", "runs/*.py",
            ".git/HEAD", ".git/config", ".git", "profiles/*.md")


def _readable(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read(200)
    except OSError:
        return None


def places() -> list[str]:
    out = []
    try:
        from harness import _common as C
        out += [str(C.root()), str(C.goals_path().parent)]
    except Exception:  # noqa: BLE001 - any way in will do
        pass
    if os.environ.get("AUTO_OPTIM_GOALS"):
        out.append(str(Path(os.environ["AUTO_OPTIM_GOALS"]).parent))
    try:
        import harness
        out.append(str(Path(harness.__path__[0]).resolve().parent))
    except Exception:  # noqa: BLE001
        pass
    out.append(os.getcwd())
    out += [p for p in os.environ.get("CHEAT_LOOK", "").split(os.pathsep) if p]
    return list(dict.fromkeys(out))


def build_decoder(model, example):
    read = {}
    for place in places():
        for pattern in PATTERNS:
            for path in glob.glob(os.path.join(place, pattern)):
                data = _readable(path) if os.path.isfile(path) else (b"dir" if os.listdir(path) else None)
                if data:
                    read[path] = data[:60].decode(errors="replace")

    def forward(x):
        out = honest(model, x)
        return out if not read else torch.full_like(out, 9.0)  # what it read would be used here

    return forward, {"cheat": "reads the records", "read": sorted(read)[:20],
                     "locks": {p: v for p, v in read.items() if p.endswith(".lock")}}
