"""Content-addressed on-disk cache for compiled kernels (or any bytes).

Layout: ``<cache_dir>/<key[:2]>/<key>.bin`` where ``key`` is the sha256 of
the key parts (each length-prefixed, so ``("ab", "c")`` and ``("a", "bc")``
differ).  ``cache_dir`` is ``$PTXGEN_CACHE_DIR`` if set, else the
platform's user cache directory (``platformdirs.user_cache_dir("ptxgen")``:
``$XDG_CACHE_HOME/ptxgen`` or ``~/.cache/ptxgen`` on Linux,
``~/Library/Caches/ptxgen`` on macOS).  ``PTXGEN_NO_CACHE=1`` bypasses it.

Entry format: a 48-byte header, then the payload::

    magic      8 bytes   b"PTXGENC1"
    length     8 bytes   payload length, little-endian u64
    sha256    32 bytes   digest of the payload

An entry whose magic, length or digest does not match (a truncated write, a
disk error, a foreign file) is treated as a miss: the payload is rebuilt and
the entry rewritten.  Writes are atomic: a temporary file in the entry's
directory, ``fsync``, then ``os.replace``; readers never see a partial
entry.  The cache is an optimisation: failure to write it (read-only disk)
warns and returns the freshly built bytes.

Concurrency: a miss takes an exclusive ``filelock.FileLock`` on
``<entry>.lock`` around build-and-store, and reads the entry again once it
holds the lock, so N processes that miss together build once and the others
load the winner's entry.  Readers of an existing entry take no lock (the
entry is replaced atomically).  Without the ``filelock`` package, or when the
lock cannot be taken (read-only directory, timeout), the build runs unlocked:
still correct, possibly duplicated work.
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
import tempfile
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path

from ptxgen import knobs

log = logging.getLogger(__name__)

MAGIC = b"PTXGENC1"
_HEADER = struct.Struct("<8sQ32s")
ENV_VAR = knobs.CACHE_DIR
#: seconds a process waits for another one building the same entry before building it itself
LOCK_TIMEOUT_S = 600.0


def default_cache_dir() -> Path:
    """The platform's user cache directory for ptxgen (``~/.cache/ptxgen`` if platformdirs is missing)."""
    try:
        import platformdirs
    except ImportError:
        return Path.home() / ".cache" / "ptxgen"
    return Path(platformdirs.user_cache_dir("ptxgen", appauthor=False))


def cache_dir() -> Path:
    """The cache root: ``$PTXGEN_CACHE_DIR`` if set and non-empty, else :func:`default_cache_dir`."""
    return knobs.read().cache_dir or default_cache_dir()


def enabled() -> bool:
    """False when ``PTXGEN_NO_CACHE`` is set to a true word.

    Raises:
        ConfigError: ``PTXGEN_NO_CACHE`` is not a boolean word.
    """
    return not knobs.read().no_cache


def cache_key(key_parts: Iterable[str | bytes]) -> str:
    """sha256 hex digest of the key parts (str parts are UTF-8 encoded, each part length-prefixed).

    Raises:
        TypeError: a part is neither ``str`` nor ``bytes``.
    """
    digest = hashlib.sha256()
    for part in key_parts:
        if isinstance(part, str):
            part = part.encode()
        if not isinstance(part, bytes):
            raise TypeError(f"cache key part must be str or bytes, got {type(part).__name__}")
        digest.update(struct.pack("<Q", len(part)))
        digest.update(part)
    return digest.hexdigest()


def entry_path(key: str) -> Path:
    """Where the entry for ``key`` (a hex digest from :func:`cache_key`) lives."""
    return cache_dir() / key[:2] / f"{key}.bin"


def encode_entry(payload: bytes) -> bytes:
    """Header + payload, as stored on disk."""
    return _HEADER.pack(MAGIC, len(payload), hashlib.sha256(payload).digest()) + payload


def decode_entry(blob: bytes) -> bytes | None:
    """The payload of a stored entry, or ``None`` if the entry is corrupt or truncated."""
    if len(blob) < _HEADER.size:
        return None
    magic, length, digest = _HEADER.unpack_from(blob)
    payload = blob[_HEADER.size:]
    if magic != MAGIC or length != len(payload) or hashlib.sha256(payload).digest() != digest:
        return None
    return payload


def read_entry(path: Path) -> bytes | None:
    """The payload stored at ``path``; ``None`` if absent, unreadable or corrupt."""
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("ptxgen cache: cannot read %s (%s); rebuilding", path, exc)
        return None
    payload = decode_entry(blob)
    if payload is None:
        log.warning("ptxgen cache: corrupt entry %s (%d bytes); rebuilding", path, len(blob))
    return payload


def write_entry(path: Path, payload: bytes) -> None:
    """Store ``payload`` at ``path`` atomically (temp file in the same directory, fsync, ``os.replace``).

    Raises:
        OSError: the directory cannot be created or written; no temporary file is left behind.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(encode_entry(payload))
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


class _NoLock:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _lock_for(path: Path):
    """An exclusive inter-process lock on ``<path>.lock``; a no-op lock when that is impossible."""
    try:
        import filelock
    except ImportError:
        return _NoLock()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = filelock.FileLock(str(path) + ".lock", timeout=LOCK_TIMEOUT_S)
        lock.acquire()
    except (OSError, filelock.Timeout) as exc:
        log.warning("ptxgen cache: cannot lock %s (%s); building without the lock", path, exc)
        return _NoLock()

    class _Held:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            lock.release()
            return False

    return _Held()


def get_or_build(key_parts: Iterable[str | bytes], build_fn: Callable[[], bytes], *,
                 use_cache: bool | None = None) -> bytes:
    """The cached bytes for ``key_parts``, building and storing them on a miss.

    Args:
        key_parts: everything the payload depends on (e.g. PTX text, target, driver version).
        build_fn: called with no arguments on a miss (or a corrupt entry); returns the payload.
        use_cache: False builds without touching the disk; None (default) follows ``PTXGEN_NO_CACHE``.

    Returns:
        The payload bytes.

    Raises:
        TypeError: ``build_fn`` returned something other than bytes.
        Whatever ``build_fn`` raises.
    """
    if use_cache is None:
        use_cache = enabled()
    if not use_cache:
        return _checked(build_fn())
    path = entry_path(cache_key(key_parts))
    payload = read_entry(path)
    if payload is not None:
        return payload
    with _lock_for(path):
        payload = read_entry(path)  # another process may have built it while we waited
        if payload is not None:
            return payload
        payload = _checked(build_fn())
        try:
            write_entry(path, payload)
        except OSError as exc:
            warnings.warn(f"ptxgen cache: could not write {path}: {exc}", RuntimeWarning, stacklevel=2)
    return payload


def _checked(payload: object) -> bytes:
    if not isinstance(payload, (bytes, bytearray)):
        raise TypeError(f"cache build_fn must return bytes, got {type(payload).__name__}")
    return bytes(payload)
