"""records/: the one place records/<exp>.json and records/sources/<sha256>.py are named, read and written (once, signed, under the records lock)."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from harness import _common
from harness.ledger import git_plumbing, signing
from harness.errors import Refused
from harness.ledger.record import Record
from harness.ledger.rows import exp_number

SIGNATURE = "signature"


class Store:
    """The records of one target: `Store(folder)` for records/ (Store.here(): the target's)."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)

    @classmethod
    def here(cls) -> "Store":
        return cls(_common.root() / "records")

    def path(self, exp: str) -> Path:
        if exp_number(exp) < 0:
            raise Refused(f"no experiment {exp!r}: an experiment is named eNNN (e005)")
        return self.folder / f"{exp}.json"

    def source_path(self, sha256: str) -> Path:
        return self.folder / "sources" / f"{sha256}.py"

    def exps(self) -> list[str]:
        """The experiments records/ holds, in order."""
        files = self.folder.glob("e*.json") if self.folder.is_dir() else []
        return sorted((f.stem for f in files if exp_number(f.stem) >= 0), key=exp_number)

    def files(self) -> list[Path]:
        """Every record and stored source: what a record commit takes (the reverts' since the last one too)."""
        sources = sorted((self.folder / "sources").glob("*.py")) if (self.folder / "sources").is_dir() else []
        return [self.path(exp) for exp in self.exps()] + sources

    def has(self, exp: str) -> bool:
        return self.path(exp).is_file()

    def raw(self, exp: str) -> dict[str, Any]:
        """records/<exp>.json as JSON, signature included; Refused names what is wrong."""
        path = self.path(exp)
        try:
            data = json.loads(path.read_text())
        except OSError as e:
            raise Refused(f"records/{path.name} cannot be read ({e.strerror}); `auto-optim records restore` "
                             "puts back what git holds") from None
        except ValueError:
            raise Refused(f"records/{path.name} is not valid JSON; `auto-optim records restore` puts back what "
                             "git holds") from None
        if not isinstance(data, dict):
            raise Refused(f"records/{path.name} is not a record")
        return data

    def read(self, exp: str) -> Record:
        """The record, every field checked (record.check_stored); Refused else."""
        data = self.raw(exp)
        data.pop(SIGNATURE, None)
        if data.get("exp") != exp:
            raise Refused(f"records/{exp}.json holds experiment {data.get('exp')!r}, not {exp}")
        try:
            return Record.from_json(data)
        except (Refused, TypeError) as e:
            raise Refused(f"records/{exp}.json: {e}") from None

    def records(self) -> list[Record]:
        return [self.read(exp) for exp in self.exps()]

    def signed(self, exp: str) -> bool:
        """Whether this machine's key (harness/ledger/signing.py) signed exactly this record."""
        data = self.raw(exp)
        signature = data.pop(SIGNATURE, None)
        return signing.verify(data, signature)

    def write(self, rec: Record, source: str | None = None) -> Path:
        """Write the record once (never over a file: Refused), signed with this machine's key; its
        source, when given, is stored once by hash and the record names it (source_sha256)."""
        if source is not None:
            rec.source_sha256 = self.put_source(source)
        fields = rec.to_json()
        Record.from_json(fields)  # what is written reads back
        body = json.loads(json.dumps(fields, default=str))
        text = json.dumps({**body, SIGNATURE: signing.sign(body)}, indent=1)
        path = self.path(rec.exp)
        _common.atomic_write(path, text, exclusive=True)
        return path

    def put_source(self, source: str) -> str:
        """Store a candidate's source once (records/sources/<sha256>.py); its sha256."""
        data = source.encode()
        sha = hashlib.sha256(data).hexdigest()
        path = self.source_path(sha)
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != sha:
            _common.atomic_write(path, data)
        return sha

    def source(self, exp: str) -> str | None:
        """The candidate source an experiment measured; None when its record names none (a baseline's is
        harness/baselines/, a record restore wrote from its row)."""
        sha = self.read(exp).source_sha256
        if sha is None:
            return None
        try:
            data = self.source_path(sha).read_bytes()
        except OSError as e:
            raise Refused(f"records/sources/{sha}.py cannot be read ({e.strerror}); `auto-optim records restore` "
                             "puts back what git holds") from None
        if hashlib.sha256(data).hexdigest() != sha:
            raise Refused(f"records/sources/{sha}.py does not hash to its name: changed since it was recorded")
        return data.decode()

    def committed(self) -> dict[str, str] | None:
        """exp -> the blob id of records/<exp>.json in git's last commit; None without git or a commit."""
        work = git_plumbing.top(self.folder)
        if work is None or git_plumbing.head(work) is None:
            return None
        try:
            listed = git_plumbing.git(work, "ls-tree", "HEAD", "--", os.path.relpath(self.folder, work) + "/")
        except git_plumbing.GitError:
            return {}
        out = {}
        for line in listed.splitlines():
            meta, name = line.split("\t", 1)
            exp = Path(name).name[:-5] if name.endswith(".json") else ""
            if exp_number(exp) >= 0:
                out[exp] = meta.split()[2]
        return out

    def unchanged_since_commit(self, exp: str, committed: dict[str, str]) -> bool:
        """Whether records/<exp>.json is byte for byte what git's last commit holds."""
        oid = committed.get(exp)
        return oid is not None and git_plumbing.blob_id(self.path(exp).read_bytes(), "sha256" if len(oid) == 64 else "sha1") == oid

    def restore_from_git(self, exp: str) -> bool:
        """Put back a record as git's last commit holds it (committed: a person's, whatever key signed
        it), and its source when records/sources/ lacks it; False when no commit holds the record."""
        blob = self._committed_bytes(self.path(exp))
        if blob is None:
            return False
        _common.atomic_write(self.path(exp), blob, exclusive=True)
        self.restore_source(exp)
        return True

    def lost_sources(self) -> list[str]:
        """The experiments whose source records/sources/ lacks though git's last commit holds it."""
        gone = [(r.exp, self.source_path(r.source_sha256)) for r in self.records()
                if r.source_sha256 and not self.source_path(r.source_sha256).is_file()]
        return [exp for exp, path in gone if self._committed_bytes(path) is not None]

    def restore_source(self, exp: str) -> None:
        sha = self.read(exp).source_sha256
        if sha is not None and not self.source_path(sha).is_file():
            blob = self._committed_bytes(self.source_path(sha))
            if blob is not None:
                _common.atomic_write(self.source_path(sha), blob)

    def _committed_bytes(self, path: Path) -> bytes | None:
        work = git_plumbing.top(self.folder)
        return None if work is None else git_plumbing.show(work, "HEAD", os.path.relpath(path, work))


def lock_file(path: Path, wait: bool) -> Any:
    """An exclusive lock on `path`, held while the returned file is open (the OS frees it if the
    process dies). wait=False: the holder's note (a str) at once when another process holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    f = open(path, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "another process"
        f.close()
        return holder
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()}, since {utc_now()}")
    f.flush()
    return f


@contextlib.contextmanager
def records_lock() -> Iterator[None]:
    """One writer of records/, results.tsv, leaderboard.md and PROGRESS.md at a time; the others wait."""
    f = lock_file(_common.root() / "runs" / "records.lock", wait=True)
    try:
        yield
    finally:
        f.close()


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
