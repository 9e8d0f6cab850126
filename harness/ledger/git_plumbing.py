"""The harness's one way to call git: plain `git` through subprocess, and commits made of exact bytes.

A keeper commit and a record commit are built with git's plumbing from the bytes the harness
measured or wrote, never from the working tree: `hash-object -w --no-filters --stdin` makes each
blob (no .gitattributes conversion, encoding or filter), a temporary index read from HEAD
(GIT_INDEX_FILE, in the git folder, which the agent cannot write) takes them with `update-index
--cacheinfo`, then `write-tree`, `commit-tree -p HEAD` and `update-ref HEAD NEW OLD`, which refuses
when HEAD moved meanwhile. .gitignore plays no part (nothing is `git add`ed) and no hook runs
(core.hooksPath=/dev/null; plumbing runs none anyway). Afterwards every committed blob is checked
against the id of the bytes computed here, in Python: a mismatch, or any failure, is CommitFailed,
which the caller reports (one line, exit 1): a commit never fails silently.

Standard library only: the hooks load it too (agent/hooks/stop_gate.py, by file location).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import subprocess
from pathlib import Path

SAFE = ["-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false"]
IDENTITY = ["-c", "user.name=auto-optim", "-c", "user.email=auto-optim@localhost"]
TIMEOUT_S = 60


class GitError(Exception):
    """git failed: str() is one line."""


class CommitFailed(GitError):
    """A commit the harness had to make did not happen as it should (see the module docstring)."""


def top(start: Path) -> Path | None:
    """The working tree above `start` that holds a repository's .git (a folder with HEAD, or a
    worktree's file that starts `gitdir:`), else None. Any other .git is passed over: while a
    sandboxed Bash call runs, Claude Code's sandbox leaves an empty placeholder (file or folder) at
    each denied path that does not exist, targets/<name>/.git among them (git itself refuses such a
    .git: "invalid gitfile format")."""
    here = Path(os.path.abspath(start))
    for d in (here, *here.parents):
        if is_repository(d / ".git"):
            return d
    return None


def is_repository(dot_git: Path) -> bool:
    """`dot_git` is what git itself takes for one: a folder holding HEAD, or a file that starts `gitdir:`."""
    if os.path.isdir(dot_git):
        return os.path.isfile(dot_git / "HEAD")
    if not os.path.isfile(dot_git):
        return False
    try:
        with open(dot_git, "rb") as f:
            return f.read(7) == b"gitdir:"
    except OSError:
        return False


def git(work: Path, *args: str, data: bytes | None = None, index: str | None = None, check: bool = True,
        extra: list[str] | None = None) -> str:
    """`git ARGS` on the repository whose working tree is `work`; its stdout, stripped of the last newline."""
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")}
    if index is not None:
        env["GIT_INDEX_FILE"] = index
    cmd = ["git", *SAFE, *(extra or []), "--git-dir", str(work / ".git"), "--work-tree", str(work), *args]
    try:
        p = subprocess.run(cmd, input=data, capture_output=True, env=env, cwd=work, timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise GitError(f"git {args[0]}: {e}") from None
    if check and p.returncode != 0:
        why = (p.stderr.decode(errors="replace").strip().splitlines() or [f"exit {p.returncode}"])[-1]
        raise GitError(f"git {' '.join(args[:2])}: {why}")
    out = p.stdout.decode(errors="surrogateescape")
    return out[:-1] if out.endswith("\n") else out


def head(work: Path) -> str | None:
    """HEAD's commit id, None before the first commit."""
    out = git(work, "rev-parse", "--verify", "-q", "HEAD^{commit}", check=False)
    return out or None


def show(work: Path, commit: str, rel: str) -> bytes | None:
    """The bytes of `rel` in `commit` as stored (cat-file: no filter, no conversion), None if absent."""
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")}
    cmd = ["git", *SAFE, "--git-dir", str(work / ".git"), "cat-file", "blob", f"{commit}:{rel}"]
    try:
        p = subprocess.run(cmd, capture_output=True, env=env, cwd=work, timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout if p.returncode == 0 else None


def blob_id(data: bytes, object_format: str = "sha1") -> str:
    """The id git gives a blob of these bytes, computed here (so git's own answer can be checked)."""
    return hashlib.new(object_format, b"blob %d\0" % len(data) + data).hexdigest()


def tree_entries(work: Path, commit: str | None, rels: list[str]) -> dict[str, tuple[str, str]]:
    """path -> (mode, blob id) in `commit` for the files at or under `rels`."""
    if commit is None or not rels:
        return {}
    out = git(work, "ls-tree", "-r", "-z", "--full-tree", commit, "--", *rels)
    entries = {}
    for item in filter(None, out.split("\0")):
        meta, path = item.split("\t", 1)
        mode, kind, oid = meta.split()
        if kind == "blob":
            entries[path] = (mode, oid)
    return entries


def last_commit_of(work: Path, rels: list[str]) -> str | None:
    """The last commit that changed any of `rels` (None before the first commit)."""
    if head(work) is None:
        return None
    return git(work, "log", "-1", "--format=%H", "--", *rels) or head(work)


def identity(work: Path) -> list[str]:
    """A committer for a repository with none configured (a fresh machine, a CI runner)."""
    if os.environ.get("GIT_COMMITTER_EMAIL") or git(work, "config", "user.email", check=False):
        return []
    return IDENTITY


def commit(work: Path, files: dict[str, bytes], message: str) -> str | None:
    """Commit exactly `files` (path from `work`, posix -> bytes) on top of HEAD; the new commit's id,
    or None when HEAD already holds every one of them as given. CommitFailed on any failure."""
    try:
        return _commit(work, files, message)
    except CommitFailed:
        raise
    except GitError as e:
        raise CommitFailed(str(e)) from None


def _commit(work: Path, files: dict[str, bytes], message: str) -> str | None:
    old = head(work)
    fmt = git(work, "rev-parse", "--show-object-format") or "sha1"
    want = {rel: blob_id(data, fmt) for rel, data in files.items()}
    have = tree_entries(work, old, sorted(files))
    changed = {rel: oid for rel, oid in want.items() if have.get(rel, ("", ""))[1] != oid}
    if old is not None and not changed:
        return None
    gitdir = Path(git(work, "rev-parse", "--absolute-git-dir"))
    index = str(gitdir / f"auto-optim-index.{os.getpid()}.{secrets.token_hex(4)}")
    entries = []
    try:
        git(work, "read-tree", *(["HEAD"] if old else ["--empty"]), index=index)
        for rel, oid in changed.items():
            made = git(work, "hash-object", "-w", "--no-filters", "--stdin", data=files[rel])
            if made != oid:
                raise CommitFailed(f"git stored {rel} as {made}, not as the bytes measured ({oid})")
            mode = have.get(rel, ("100644", ""))[0]
            entries.append(f"{mode},{oid},{rel}")
            git(work, "update-index", "--add", "--cacheinfo", entries[-1], index=index)
        tree = git(work, "write-tree", index=index)
    finally:
        for leftover in (index, index + ".lock"):
            try:
                os.unlink(leftover)
            except FileNotFoundError:
                pass
    new = git(work, "commit-tree", "--no-gpg-sign", tree, *(["-p", old] if old else []), "-m", message,
              extra=identity(work))
    moved = git(work, "update-ref", "-m", f"auto-optim: {message.splitlines()[0][:200]}", "HEAD", new,
                old or "0" * len(new), check=False)
    if head(work) != new:
        raise CommitFailed(f"HEAD moved while the harness committed ({moved or 'update-ref refused'}); "
                           "nothing was committed")
    for rel, oid in want.items():  # what the commit holds is what was measured, byte for byte
        got = git(work, "rev-parse", "--verify", "-q", f"{new}:{rel}", check=False)
        if got != oid:
            raise CommitFailed(f"commit {new[:10]} holds {rel} as {got or 'nothing'}, not the measured bytes ({oid})")
    # The person's index agrees with the commit for these paths (git status shows them committed).
    for entry in entries:
        git(work, "update-index", "--add", "--cacheinfo", entry, check=False)
    return new
