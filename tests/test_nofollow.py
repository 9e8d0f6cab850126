"""harness/nofollow.py: the files the agent can replace are read and written without following a
link anywhere on their path, and only as plain files (one link, a size cap)."""

from __future__ import annotations

import os
import stat
import sys
import threading
import time
from pathlib import Path

import pytest

from harness import nofollow  # noqa: E402


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "candidates").mkdir(parents=True)
    (root / "optimize.py").write_text("x = 1\n")
    (root / "candidates" / "a.py").write_text("a = 1\n")
    (tmp_path / "secret").write_bytes(b"k" * 32)
    return root


def test_plain_files_are_read_and_written(project: Path):
    assert nofollow.read_text(project, "optimize.py") == "x = 1\n"
    assert nofollow.read_bytes(project, "candidates/a.py") == b"a = 1\n"
    os.chmod(project / "optimize.py", 0o640)
    nofollow.write_bytes(project, "optimize.py", "x = 2\n")
    assert (project / "optimize.py").read_text() == "x = 2\n"
    assert stat.S_IMODE((project / "optimize.py").stat().st_mode) == 0o640  # the file's mode kept
    nofollow.write_bytes(project, "runs/requests/r.json", b"{}", make_folders=True)
    assert (project / "runs" / "requests" / "r.json").read_bytes() == b"{}"
    assert nofollow.listdir(project, "candidates") == ["a.py"] and nofollow.listdir(project, "nothing") == []
    assert [nofollow.kind(project, p) for p in ("optimize.py", "candidates", "gone.py")] == ["file", "dir", "missing"]
    assert sorted(p.name for p in project.iterdir()) == ["candidates", "optimize.py", "runs"]  # no temporary left
    with pytest.raises(FileNotFoundError):
        nofollow.read_bytes(project, "gone.py")


@pytest.mark.parametrize("link", ["optimize.py", "candidates", "PROGRESS.md", "request.json"])
def test_a_link_is_refused_in_one_line(project: Path, link: str):
    """optimize.py, the candidates/ folder, PROGRESS.md, request.json: linked to the signing key (or
    a folder holding it), nothing is read through the link and nothing written through it."""
    secret = project.parent / "secret"
    target = project / link
    if target.is_dir():
        (project.parent / "elsewhere").mkdir()
        (project.parent / "elsewhere" / "a.py").symlink_to(secret)
        os.rename(project / "candidates", project.parent / "old")
        target.symlink_to(project.parent / "elsewhere", target_is_directory=True)
        rel = "candidates/a.py"
    else:
        target.unlink(missing_ok=True)
        target.symlink_to(secret)
        rel = link
    for attempt in (lambda: nofollow.read_bytes(project, rel), lambda: nofollow.write_bytes(project, rel, b"x")):
        with pytest.raises(nofollow.NotPlain) as e:
            attempt()
        assert "link" in str(e.value) and "\n" not in str(e.value) and str(e.value).startswith(rel)
    assert secret.read_bytes() == b"k" * 32
    if link == "candidates":
        with pytest.raises(nofollow.NotPlain):
            nofollow.listdir(project, "candidates")
    else:
        assert nofollow.kind(project, rel) == "link"


def test_hard_links_fifos_and_large_files_are_refused(project: Path):
    os.link(project.parent / "secret", project / "candidates" / "hard.py")
    with pytest.raises(nofollow.NotPlain, match="2 hard links"):
        nofollow.read_bytes(project, "candidates/hard.py")
    os.mkfifo(project / "candidates" / "fifo.py")
    t0 = time.monotonic()
    with pytest.raises(nofollow.NotPlain, match="not a regular file"):
        nofollow.read_bytes(project, "candidates/fifo.py")  # refused at once: no writer is waited for
    assert time.monotonic() - t0 < 5
    (project / "big.py").write_bytes(b"#" * 101)
    with pytest.raises(nofollow.NotPlain, match="more than 100"):
        nofollow.read_bytes(project, "big.py", cap=100)
    with pytest.raises(ValueError):
        nofollow.read_bytes(project, "../secret")


def test_a_link_swapped_in_while_writing_is_replaced_not_written_through(project: Path):
    """The write goes to a new file renamed over the name: a link put there meanwhile is replaced."""
    secret = project.parent / "secret"
    real_rename = os.rename

    def swap_then_rename(src, dst, **kw):
        (project / "optimize.py").unlink()
        (project / "optimize.py").symlink_to(secret)
        real_rename(src, dst, **kw)

    os.rename = swap_then_rename
    try:
        nofollow.write_bytes(project, "optimize.py", b"y = 3\n")
    finally:
        os.rename = real_rename
    assert not (project / "optimize.py").is_symlink() and (project / "optimize.py").read_bytes() == b"y = 3\n"
    assert secret.read_bytes() == b"k" * 32


def test_a_folder_swapped_for_a_link_during_a_read_loop(project: Path):
    """A racing writer that keeps swapping candidates/ for a link: every read is the real file or a
    refusal, never the secret."""
    secret_dir = project.parent / "elsewhere"
    secret_dir.mkdir()
    (secret_dir / "a.py").write_bytes(b"k" * 32)
    stop = threading.Event()

    def swapper():
        real, link = project / "candidates", project / "candidates.link"
        link.symlink_to(secret_dir, target_is_directory=True)
        aside = project / "candidates.real"
        while not stop.is_set():
            os.rename(real, aside)
            os.rename(link, real)
            os.rename(real, link)
            os.rename(aside, real)

    t = threading.Thread(target=swapper)
    t.start()
    seen = set()
    try:
        for _ in range(2000):
            try:
                seen.add(nofollow.read_bytes(project, "candidates/a.py"))
            except (nofollow.NotPlain, FileNotFoundError):
                seen.add("refused")
    finally:
        stop.set()
        t.join()
    assert b"k" * 32 not in seen and b"a = 1\n" in seen


def test_relative_names_a_path_below_the_root_without_resolving_it(project: Path, tmp_path: Path):
    assert nofollow.relative(project, project / "candidates" / "a.py") == "candidates/a.py"
    assert nofollow.relative(project, tmp_path / "elsewhere.py") is None
    assert nofollow.relative(project, project) is None


def test_a_temporary_name_planted_as_a_link_is_never_written_through(project: Path):
    """The harness's old atomic write went through `.optimize.py.tmp<pid>`, a name the agent could plant
    as a link to any file the person may write; nofollow's temporary names are random and made with
    O_EXCL | O_NOFOLLOW."""
    victim = project.parent / "victim.py"
    victim.write_text("# the person's file\n")
    for name in (f".optimize.py.tmp{os.getpid()}", f".optimize.py.{os.getpid()}.tmp"):
        (project / name).symlink_to(victim)
    nofollow.write_bytes(project, "optimize.py", b"z = 4\n")
    assert victim.read_text() == "# the person's file\n" and (project / "optimize.py").read_bytes() == b"z = 4\n"
