"""Content-addressed on-disk cache for compiled kernels (or any bytes).

Layout: ``<cache_dir>/<key[:2]>/<key>.bin`` where ``key`` is the sha256 of
the key parts (each length-prefixed, so ``("ab", "c")`` and ``("a", "bc")``
differ).  ``cache_dir`` is ``$PTXGEN_CACHE_DIR`` if set, else
``~/.cache/ptxgen``.

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

log = logging.getLogger(__name__)

MAGIC = b"PTXGENC1"
_HEADER = struct.Struct("<8sQ32s")
ENV_VAR = "PTXGEN_CACHE_DIR"


def cache_dir() -> Path:
    """The cache root: ``$PTXGEN_CACHE_DIR`` if set and non-empty, else ``~/.cache/ptxgen``."""
    env = os.environ.get(ENV_VAR)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "ptxgen"


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


def get_or_build(key_parts: Iterable[str | bytes], build_fn: Callable[[], bytes]) -> bytes:
    """The cached bytes for ``key_parts``, building and storing them on a miss.

    Args:
        key_parts: everything the payload depends on (e.g. PTX text, target, driver version).
        build_fn: called with no arguments on a miss (or a corrupt entry); returns the payload.

    Returns:
        The payload bytes.

    Raises:
        TypeError: ``build_fn`` returned something other than bytes.
        Whatever ``build_fn`` raises.
    """
    path = entry_path(cache_key(key_parts))
    payload = read_entry(path)
    if payload is not None:
        return payload
    payload = build_fn()
    if not isinstance(payload, (bytes, bytearray)):
        raise TypeError(f"cache build_fn must return bytes, got {type(payload).__name__}")
    payload = bytes(payload)
    try:
        write_entry(path, payload)
    except OSError as exc:
        warnings.warn(f"ptxgen cache: could not write {path}: {exc}", RuntimeWarning, stacklevel=2)
    return payload
