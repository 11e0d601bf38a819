"""On-disk cache of compiled kernels, safe for many processes at once.

Layout: ``<root>/<key[:2]>/<key>/<file>`` plus ``<key>/manifest.json`` (written last) and a
lock file ``<root>/<key[:2]>/<key>.lock``. Every file is written to a temporary file in the
same directory and moved into place with ``os.replace``; the manifest records each file's
sha256, so a reader either sees a complete, verified entry or a miss. Writers hold an
exclusive ``flock`` on the key's lock file, readers a shared one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Callable, Iterator, Optional

__all__ = ["KernelCache", "make_key"]

_MANIFEST = "manifest.json"
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
_KEY_RE = re.compile(r"^[0-9a-f]{16,128}$")


def make_key(ir_text: str, pipeline_id: str, toolchain_versions: str, dgir_version: str,
             *extra: str) -> str:
    """sha256 over the length-prefixed fields (so no two field splits collide)."""
    h = hashlib.sha256()
    for part in (ir_text, pipeline_id, toolchain_versions, dgir_version, *extra):
        b = part.encode()
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


class KernelCache:
    def __init__(self, root: Optional[os.PathLike | str] = None):
        if root is None:
            from dgir.env import env
            root = env().cache_dir
        self.root = Path(root).expanduser()

    # -- paths / locks
    def _check_key(self, key: str) -> None:
        if not _KEY_RE.match(key):
            raise ValueError(f"cache key {key!r} is not a lowercase hex digest")

    def entry_dir(self, key: str) -> Path:
        self._check_key(key)
        return self.root / key[:2] / key

    @contextlib.contextmanager
    def lock(self, key: str, exclusive: bool = True) -> Iterator[None]:
        """Hold the key's file lock (exclusive for writers, shared for readers)."""
        self._check_key(key)
        d = self.root / key[:2]
        d.mkdir(parents=True, exist_ok=True)
        with open(d / f"{key}.lock", "a+b") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    # -- unlocked primitives
    def _read(self, key: str) -> Optional[dict[str, bytes]]:
        d = self.entry_dir(key)
        try:
            manifest = json.loads((d / _MANIFEST).read_bytes())
            out = {}
            for name, digest in manifest["files"].items():
                data = (d / name).read_bytes()
                if hashlib.sha256(data).hexdigest() != digest:
                    return None                       # corrupt / torn entry: a miss
                out[name] = data
            return out
        except (FileNotFoundError, NotADirectoryError, ValueError, KeyError, TypeError):
            return None

    def _write(self, key: str, files: dict[str, bytes]) -> None:
        for name, data in files.items():
            if not _NAME_RE.match(name) or name == _MANIFEST or name.endswith(".lock"):
                raise ValueError(f"bad cache file name {name!r}")
            if not isinstance(data, (bytes, bytearray, memoryview)):
                raise TypeError(f"cache file {name!r} must be bytes, got {type(data).__name__}")
        d = self.entry_dir(key)
        d.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            (d / _MANIFEST).unlink()                  # invalidate while files change
        for name, data in files.items():
            _atomic_write(d / name, bytes(data))
        manifest = {"key": key,
                    "files": {n: hashlib.sha256(bytes(v)).hexdigest() for n, v in files.items()}}
        _atomic_write(d / _MANIFEST, json.dumps(manifest, indent=1, sort_keys=True).encode())

    # -- public API
    def get(self, key: str) -> Optional[dict[str, bytes]]:
        """The entry's files, or None on a miss (absent, incomplete or corrupt)."""
        if not self.entry_dir(key).exists():
            return None
        with self.lock(key, exclusive=False):
            return self._read(key)

    def put(self, key: str, files: dict[str, bytes]) -> None:
        """Store ``files`` (name -> bytes) under ``key``, replacing any previous entry."""
        with self.lock(key, exclusive=True):
            self._write(key, files)

    def get_or_put(self, key: str, compute: Callable[[], dict[str, bytes]]
                   ) -> tuple[dict[str, bytes], bool]:
        """Return (files, hit). On a miss, ``compute()`` runs under the exclusive lock, so
        concurrent processes asking for the same key compile it once."""
        found = self.get(key)
        if found is not None:
            return found, True
        with self.lock(key, exclusive=True):
            found = self._read(key)
            if found is not None:
                return found, True
            files = compute()
            self._write(key, files)
            return {n: bytes(v) for n, v in files.items()}, False
