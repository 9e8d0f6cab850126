"""Records the harness measured, told apart from records anybody wrote: an HMAC over each record file.

`auto-optim measure --record-out` signs the record file it writes; `auto-optim apply` records only
a file whose signature this key verifies. The store (store.py) signs every records/<exp>.json it
writes, and in a git checkout a record that its last commit does not hold as it is must verify (results.py
check_complete): one the harness did not write is refused. The key is 32 random bytes made once per person, kept
outside the repository, where the agent's Bash sandbox cannot read it (.claude/settings.json
`sandbox.filesystem.denyRead`, and a `Read(...)` deny rule for Claude's file tools), and which the
candidate's worker is not given either.

Where it lives: key_dir(), ~/.config/auto-optim unless AUTO_OPTIM_KEY_DIR names another folder (a
GPU machine without .git is given a copy of the person's folder there; tests use a temporary one).
Standard library only.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from pathlib import Path
from typing import Any

KEY_DIR_ENV = "AUTO_OPTIM_KEY_DIR"
KEY_FILE = "record-key"
KEY_BYTES = 32


def key_dir() -> Path:
    """The one folder that holds the signing key (and nothing the agent may read)."""
    env = os.environ.get(KEY_DIR_ENV)
    return Path(env).expanduser().resolve() if env else Path.home() / ".config" / "auto-optim"


def key_dirs() -> list[Path]:
    """Every folder that may hold a person's key: the one in use, and the default one beside it
    (a key made there before AUTO_OPTIM_KEY_DIR pointed elsewhere is still a key). The worker is
    shown none of them."""
    default = Path.home() / ".config" / "auto-optim"
    return list(dict.fromkeys([key_dir(), default]))


def key_path() -> Path:
    return key_dir() / KEY_FILE


def _load_key(create: bool) -> bytes | None:
    path = key_path()
    try:
        key = path.read_bytes()
    except FileNotFoundError:
        if not create:
            return None
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:  # O_EXCL: two tools making the key at once keep the first one's
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(os.urandom(KEY_BYTES))
        except FileExistsError:
            pass
        key = path.read_bytes()
    return key if len(key) >= KEY_BYTES else None


def canonical(record: Any) -> bytes:
    """The bytes signed: the record as JSON would carry it (default=str, as written), keys sorted."""
    plain = json.loads(json.dumps(record, default=str))
    return json.dumps(plain, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def sign(record: Any) -> str:
    """The record's signature (hex); makes the key on first use."""
    key = _load_key(create=True)
    if key is None:
        raise OSError(f"the signing key {key_path()} is damaged (shorter than {KEY_BYTES} bytes)")
    return hmac.new(key, canonical(record), hashlib.sha256).hexdigest()


def verify(record: Any, signature: Any) -> bool:
    """True only for a signature this machine's key made over exactly this record."""
    key = _load_key(create=False)
    if key is None or not isinstance(signature, str):
        return False
    return hmac.compare_digest(hmac.new(key, canonical(record), hashlib.sha256).hexdigest(), signature)
