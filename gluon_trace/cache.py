"""The on-disk cache of compiled binaries.

Entries live under ``$GLUON_TRACE_CACHE_DIR`` (default ``~/.cache/gluon_trace``), one
file per key. A key is a hash of everything that decides the binary (the traced IR
text, target, assembler version, library version, options). Each entry carries a
header with the payload's length and SHA-256, so a truncated or corrupt file is found
and rebuilt. Writes go to a temporary file in the same folder and are renamed into
place, so concurrent processes never see a half-written entry; two processes building
the same key both write the same bytes and the last rename wins.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Callable

_MAGIC = b"GTC1"


def cache_dir() -> Path:
    env = os.environ.get("GLUON_TRACE_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "gluon_trace"


def file_stamp(path: str) -> str:
    """Name, size and mtime of a source file (what Python's bytecode cache trusts): a cheap
    part of a cache key for code that decides a binary."""
    st = os.stat(path)
    return f"{os.path.basename(path)}:{st.st_size}:{st.st_mtime_ns};"


DECOMPOSE_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "decompose.py")
SCHEDULE_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schedule.py")  # hoist_stores


def make_key(**parts) -> str:
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()


class DiskCache:
    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root is not None else cache_dir()

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.bin"

    def get(self, key: str) -> bytes | None:
        p = self._path(key)
        try:
            data = p.read_bytes()
        except OSError:
            return None
        if len(data) < 44 or data[:4] != _MAGIC:
            return None
        n = int.from_bytes(data[4:12], "little")
        digest, payload = data[12:44], data[44:]
        if len(payload) != n or hashlib.sha256(payload).digest() != digest:
            return None  # truncated or corrupt: the caller rebuilds and overwrites it
        return payload

    def put(self, key: str, payload: bytes) -> None:
        p = self._path(key)
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as f:
                f.write(_MAGIC + len(payload).to_bytes(8, "little")
                        + hashlib.sha256(payload).digest() + payload)
            os.replace(tmp, p)
        except OSError:
            pass  # a read-only or full disk costs a rebuild next time, never a failure

    def get_or_build(self, key: str, build: Callable[[], bytes]) -> tuple[bytes, bool]:
        """(payload, hit): the cached payload, or ``build()`` stored under ``key``."""
        hit = self.get(key)
        if hit is not None:
            return hit, True
        payload = build()
        self.put(key, payload)
        return payload, False


def disk_cache() -> DiskCache:
    return DiskCache()
