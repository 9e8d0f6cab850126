"""harness/ledger/git_plumbing.py: what is committed is exactly the bytes measured, whatever
.gitattributes, .gitignore, filters or hooks the working tree holds, and a failed commit is loud."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.ledger import git_plumbing  # noqa: E402

# A comment the UTF-7 working-tree encoding turns into a live line of code ("+AAo-" is a newline).
SOURCE = b'"""keeper"""\n# harmless +AAo-import os; os.system("evil")\nx = 1\n'


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository whose working tree the agent has had its way with: an encoding and a filter for
    optimize.py, records/ and *.py ignored, a pre-commit hook that fails every commit."""
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q")
    git(r, "config", "user.name", "t")
    git(r, "config", "user.email", "t@t")
    (r / "optimize.py").write_bytes(b"x = 0\n")
    git(r, "add", "optimize.py")
    git(r, "commit", "-qm", "init")
    (r / ".gitattributes").write_text("optimize.py working-tree-encoding=UTF-7 filter=evil\n*.json text eol=crlf\n")
    (r / ".gitignore").write_text("records/\n*.py\n")
    git(r, "config", "filter.evil.clean", "sed s/x/y/")
    hook = r / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\nexit 1\n")
    hook.chmod(0o755)
    return r


def test_the_committed_blobs_are_the_measured_bytes(repo: Path):
    (repo / "optimize.py").write_bytes(SOURCE)
    record = b'{"exp": "e001"}\n'
    old = git_plumbing.head(repo)
    new = git_plumbing.commit(repo, {"optimize.py": SOURCE, "records/e001.json": record}, "e001: keep")
    assert new == git_plumbing.head(repo) and git(repo, "rev-parse", "HEAD~1").strip() == old
    assert git_plumbing.show(repo, "HEAD", "optimize.py") == SOURCE  # not re-encoded, not filtered
    assert git_plumbing.show(repo, "HEAD", "records/e001.json") == record  # committed though ignored, no CRLF
    assert git(repo, "ls-files", "--stage", "optimize.py").split()[1] == git_plumbing.blob_id(SOURCE)  # index agrees
    assert git_plumbing.commit(repo, {"optimize.py": SOURCE}, "again") is None  # nothing new: no empty commit
    assert git_plumbing.last_commit_of(repo, ["optimize.py"]) == new


def test_a_first_commit_in_an_empty_repository(tmp_path: Path):
    r = tmp_path / "fresh"
    r.mkdir()
    git(r, "init", "-q")
    new = git_plumbing.commit(r, {"a/b.txt": b"b\n"}, "first")
    assert new and git_plumbing.show(r, new, "a/b.txt") == b"b\n"


def test_head_moved_meanwhile_is_a_loud_failure(repo: Path, monkeypatch: pytest.MonkeyPatch):
    """update-ref HEAD NEW OLD refuses when HEAD moved after it was read: CommitFailed, not a commit
    that drops the other's."""
    real = git_plumbing.git

    def racing(work, *args, **kw):
        if args[:1] == ("update-ref",):
            real(work, "commit-tree", "-m", "x", "HEAD^{tree}")  # a stray object: harmless
            (repo / "other.txt").write_text("other\n")
            subprocess.run(["git", "-C", str(repo), "add", "-f", "other.txt"], check=True)
            subprocess.run(["git", "-C", str(repo), "-c", "core.hooksPath=/dev/null", "commit", "-qm", "someone else"],
                           check=True)
        return real(work, *args, **kw)

    monkeypatch.setattr(git_plumbing, "git", racing)
    with pytest.raises(git_plumbing.CommitFailed, match="HEAD moved"):
        git_plumbing.commit(repo, {"optimize.py": SOURCE}, "e002: keep")
    assert git(repo, "log", "-1", "--format=%s").strip() == "someone else"


def test_git_storing_other_bytes_is_a_loud_failure(repo: Path, monkeypatch: pytest.MonkeyPatch):
    """If git ever stored other bytes than those given (a filter slipping in), the commit fails loudly."""
    real = git_plumbing.git

    def filtering(work, *args, data=None, **kw):
        if args[:1] == ("hash-object",):
            data = data.replace(b"x", b"y")
        return real(work, *args, data=data, **kw)

    monkeypatch.setattr(git_plumbing, "git", filtering)
    with pytest.raises(git_plumbing.CommitFailed, match="not as the bytes measured"):
        git_plumbing.commit(repo, {"optimize.py": SOURCE}, "e002: keep")


@pytest.mark.parametrize("placeholder", ["file", "folder"])
def test_a_sandbox_placeholder_is_no_repository(repo: Path, placeholder: str):
    """While a sandboxed Bash call runs, Claude Code leaves an empty file or folder at each denied
    path that is missing, targets/<name>/.git among them: the checkout is still the one above it."""
    target = repo / "targets" / "toy"
    target.mkdir(parents=True)
    if placeholder == "file":
        (target / ".git").write_bytes(b"")
    else:
        (target / ".git").mkdir()
    assert git_plumbing.top(target) == repo
    worktree = repo / "linked"  # a worktree's .git file names its git folder: that is a repository
    worktree.mkdir()
    (worktree / ".git").write_text(f"gitdir: {repo / '.git'}\n")
    assert git_plumbing.top(worktree / "sub") == worktree
