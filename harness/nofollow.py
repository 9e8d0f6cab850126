"""Files the agent can replace (optimize.py, candidates/*, PROGRESS.md, request.json), read and
written without following a link anywhere on their path.

The harness runs outside the agent's sandbox, so a link the agent made (optimize.py -> the signing
key, candidates/ -> another folder, PROGRESS.md -> harness/x.py) would make it read or write what
the agent cannot. Every call here starts from a descriptor of the folder the harness names (the
project root, opened as given: a person may keep the checkout behind a link) and opens each folder
below it with O_NOFOLLOW | O_DIRECTORY and the file with O_NOFOLLOW, then checks the open file
(fstat): a regular file, one link, at most `cap` bytes. Anything else is refused with one line
(NotPlain). Writes go to a new file made beside it (O_CREAT | O_EXCL | O_NOFOLLOW) and renamed over
the name: a rename replaces a link, it never writes through one.

Standard library only: the hooks load it too (agent/hooks/stop_gate.py, by file location).
"""

from __future__ import annotations

import errno
import hashlib
import os
import secrets
import stat
from pathlib import Path, PurePosixPath

CANDIDATE_CAP = 16 << 20   # a candidate's source (optimize.py is 60 KB)
JOURNAL_CAP = 64 << 20     # PROGRESS.md (110 KB after 117 experiments)
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class NotPlain(OSError):
    """A path the harness will not read or write: a link on its way, not a regular file, more than
    one hard link, too large. str() is the one line to print."""

    def __init__(self, rel: str, why: str) -> None:
        super().__init__(errno.EPERM, f"{rel}: {why}; the harness reads and writes only plain files there "
                                      "(no links), outside the agent's sandbox")
        self.rel = rel

    def __str__(self) -> str:
        return self.strerror


def _parts(rel: str | PurePosixPath) -> list[str]:
    parts = PurePosixPath(rel).parts
    if not parts or PurePosixPath(rel).is_absolute() or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"{rel!r}: a path below the folder, without . or ..")
    return list(parts)


def _folder(root: Path, folders: list[str], rel: str, make: bool = False) -> int:
    """A descriptor of root/folders..., each folder opened without following a link (made when asked)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in folders:
            if make:
                try:
                    os.mkdir(name, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
            try:
                sub = os.open(name, DIR_FLAGS, dir_fd=fd)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise NotPlain(rel, f"{name} on its way is a link or not a folder") from None
                raise
            os.close(fd)
            fd = sub
    except BaseException:
        os.close(fd)
        raise
    return fd


def kind(root: Path, rel: str) -> str:
    """What is at root/rel, without following a link: "missing", "file", "dir", "link" or "other"
    (NotPlain when a folder on its way is a link)."""
    *folders, name = _parts(rel)
    try:
        fd = _folder(root, folders, rel)
    except FileNotFoundError:
        return "missing"
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return "missing"
    finally:
        os.close(fd)
    if stat.S_ISLNK(st.st_mode):
        return "link"
    return "file" if stat.S_ISREG(st.st_mode) else "dir" if stat.S_ISDIR(st.st_mode) else "other"


def read_bytes(root: Path, rel: str, cap: int = CANDIDATE_CAP) -> bytes:
    """The bytes of root/rel (see the module docstring); FileNotFoundError when it is not there."""
    *folders, name = _parts(rel)
    dfd = _folder(root, folders, rel)
    try:
        try:  # O_NONBLOCK: a FIFO put there must not hang the harness before fstat refuses it
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise NotPlain(rel, "it is a link") from None
            raise
    finally:
        os.close(dfd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotPlain(rel, "it is not a regular file")
        if st.st_nlink != 1:
            raise NotPlain(rel, f"it has {st.st_nlink} hard links")
        if st.st_size > cap:
            raise NotPlain(rel, f"it holds {st.st_size} bytes, more than {cap}")
        chunks, left = [], cap + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > cap:
            raise NotPlain(rel, f"it grew past {cap} bytes while read")
        return data
    finally:
        os.close(fd)


def read_text(root: Path, rel: str, cap: int = CANDIDATE_CAP) -> str:
    return read_bytes(root, rel, cap).decode()


def sha256(root: Path, rel: str, cap: int = CANDIDATE_CAP) -> str:
    return hashlib.sha256(read_bytes(root, rel, cap)).hexdigest()


def write_bytes(root: Path, rel: str, data: bytes | str, make_folders: bool = False) -> None:
    """Replace root/rel with `data` in one rename (a crash leaves the old file or the new one).
    A link at the name is refused; one swapped in meanwhile is replaced, never written through."""
    *folders, name = _parts(rel)
    raw = data.encode() if isinstance(data, str) else data
    dfd = _folder(root, folders, rel, make=make_folders)
    try:
        mode = 0o644
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode):
                raise NotPlain(rel, "it is a link" if stat.S_ISLNK(st.st_mode) else "it is not a regular file")
            mode = stat.S_IMODE(st.st_mode)
        except FileNotFoundError:
            pass
        tmp = f".{name}.{os.getpid()}.{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(raw)
                os.fchmod(f.fileno(), mode)
            os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except FileNotFoundError:
                pass
            raise
    finally:
        os.close(dfd)


def listdir(root: Path, rel: str) -> list[str]:
    """The names in the folder root/rel ("." for root itself; NotPlain when it, or a folder on its way,
    is a link); [] when it is not there."""
    parts = [] if rel in ("", ".") else _parts(rel)
    try:
        fd = _folder(root, parts, rel)
    except FileNotFoundError:
        return []
    try:
        return sorted(os.listdir(fd))
    finally:
        os.close(fd)


def unlink(root: Path, rel: str) -> None:
    """Remove the name root/rel (a link is removed, never followed); nothing if it is not there."""
    *folders, name = _parts(rel)
    fd = _folder(root, folders, rel)
    try:
        os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        pass
    finally:
        os.close(fd)


def relative(root: Path, path: Path | str) -> str | None:
    """`path` as a path below `root` when it lies there (by its name: abspath, no link resolved),
    else None: a file the person named elsewhere."""
    p, r = Path(os.path.abspath(path)), Path(os.path.abspath(root))
    return p.relative_to(r).as_posix() if p != r and p.is_relative_to(r) else None
