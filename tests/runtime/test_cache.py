"""The on-disk kernel cache: directory, keys, entry format, corruption, atomic writes, PTXGEN_NO_CACHE and the
build lock across processes."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from ptxgen.errors import CudaError
from ptxgen.runtime import cache


# --------------------------------------------------------------------------- cache


class Counter:
    """A build_fn that counts its calls."""

    def __init__(self, payload=b"cubin-bytes"):
        self.calls = 0
        self.payload = payload

    def __call__(self):
        self.calls += 1
        return self.payload


def entry_files(root: Path) -> list[Path]:
    """Every file under the cache root except the build locks (``<entry>.lock``, kept by design)."""
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix != ".lock")


def test_cache_dir_env_var_honoured(cache_root):
    assert cache.cache_dir() == cache_root
    cache.get_or_build(["k"], Counter())
    files = entry_files(cache_root)
    assert len(files) == 1 and files[0].suffix == ".bin"


def test_cache_dir_default(monkeypatch, tmp_path):
    """Without PTXGEN_CACHE_DIR: the platform convention (XDG on Linux)."""
    monkeypatch.delenv(cache.ENV_VAR, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    pytest.importorskip("platformdirs")
    import platformdirs

    assert cache.cache_dir() == Path(platformdirs.user_cache_dir("ptxgen", appauthor=False))
    if os.name == "posix" and os.uname().sysname == "Linux":
        assert cache.cache_dir() == tmp_path / ".cache" / "ptxgen"
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
        assert cache.cache_dir() == tmp_path / "xdg" / "ptxgen"


def test_cache_miss_then_hit(cache_root):
    build = Counter()
    assert cache.get_or_build(["ptx", "sm_90a", "driver=13000"], build) == b"cubin-bytes"
    assert cache.get_or_build(["ptx", "sm_90a", "driver=13000"], build) == b"cubin-bytes"
    assert build.calls == 1


def test_cache_key_parts_are_separated(cache_root):
    assert cache.cache_key(["ab", "c"]) != cache.cache_key(["a", "bc"])
    assert cache.cache_key(["x"]) == cache.cache_key([b"x"])
    build = Counter()
    cache.get_or_build(["ptx", "sm_90a", "driver=13000"], build)
    cache.get_or_build(["ptx", "sm_90a", "driver=12080"], build)
    assert build.calls == 2


def test_cache_key_rejects_other_types():
    with pytest.raises(TypeError, match="str or bytes"):
        cache.cache_key([1])


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda blob: blob[:-3], id="truncated-payload"),
        pytest.param(lambda blob: blob[:20], id="truncated-header"),
        pytest.param(lambda blob: blob[:-1] + bytes([blob[-1] ^ 1]), id="flipped-bit"),
        pytest.param(lambda blob: b"", id="empty"),
        pytest.param(lambda blob: b"not a cache entry at all" * 4, id="foreign"),
    ],
)
def test_corrupt_entry_is_rebuilt(cache_root, damage):
    build = Counter()
    cache.get_or_build(["k"], build)
    (path,) = entry_files(cache_root)
    path.write_bytes(damage(path.read_bytes()))
    assert cache.get_or_build(["k"], build) == b"cubin-bytes"
    assert build.calls == 2
    assert cache.read_entry(path) == b"cubin-bytes"  # repaired on disk
    assert cache.get_or_build(["k"], build) == b"cubin-bytes"
    assert build.calls == 2


def test_entry_header_format():
    blob = cache.encode_entry(b"abc")
    magic, length = struct.unpack_from("<8sQ", blob)
    assert magic == b"PTXGENC1" and length == 3 and len(blob) == 48 + 3
    assert cache.decode_entry(blob) == b"abc"


def test_atomic_write_leaves_no_temp_files(cache_root):
    for i in range(5):
        cache.get_or_build([f"k{i}"], Counter(payload=os.urandom(1000)))
    files = entry_files(cache_root)
    assert len(files) == 5
    assert all(p.suffix == ".bin" and not p.name.startswith(".") for p in files)


def test_failed_write_cleans_up_and_still_returns(cache_root, monkeypatch):
    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cache.os, "replace", broken_replace)
    build = Counter()
    with pytest.warns(RuntimeWarning, match="could not write"):
        assert cache.get_or_build(["k"], build) == b"cubin-bytes"
    assert entry_files(cache_root) == []  # the temp file was removed


def test_build_fn_must_return_bytes(cache_root):
    with pytest.raises(TypeError, match="must return bytes"):
        cache.get_or_build(["k"], lambda: "text")


def test_build_fn_errors_propagate_and_store_nothing(cache_root):
    def failing():
        raise CudaError("cuLinkAddData failed: CUDA_ERROR_INVALID_PTX", call="cuLinkAddData",
                        code="CUDA_ERROR_INVALID_PTX")

    with pytest.raises(CudaError):
        cache.get_or_build(["k"], failing)
    assert entry_files(cache_root) == []


# --------------------------------------------------------------------------- cache: no-cache, locking


def test_no_cache_knob_bypasses_disk(cache_root, monkeypatch):
    monkeypatch.setenv("PTXGEN_NO_CACHE", "1")
    build = Counter()
    assert cache.get_or_build(["k"], build) == b"cubin-bytes"
    assert cache.get_or_build(["k"], build) == b"cubin-bytes"
    assert build.calls == 2 and not cache_root.exists()


def _slow_build_in_process(args):
    """Child of the concurrency test: get_or_build with a build that takes a while and logs itself."""
    root, log = args
    import os as _os
    import time as _time

    _os.environ["PTXGEN_CACHE_DIR"] = root
    from ptxgen.runtime import cache as _cache

    def build():
        with open(log, "a") as f:
            f.write(f"{_os.getpid()}\n")
        _time.sleep(0.5)
        return b"payload-" + b"x" * 100_000

    return _cache.get_or_build(["shared-key"], build)


def test_concurrent_processes_build_once(tmp_path):
    """Four processes miss together: exactly one builds (filelock), all get the same intact payload."""
    pytest.importorskip("filelock")
    import multiprocessing

    root, log = str(tmp_path / "kcache"), str(tmp_path / "builds.log")
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        results = pool.map(_slow_build_in_process, [(root, log)] * 4)
    assert all(r == b"payload-" + b"x" * 100_000 for r in results)
    assert len(Path(log).read_text().split()) == 1
    assert [p.suffix for p in entry_files(Path(root))] == [".bin"]


def test_lock_unavailable_still_builds(cache_root, monkeypatch):
    """A lock that cannot be taken (read-only directory, timeout) degrades to an unlocked build."""
    filelock = pytest.importorskip("filelock")

    def refuse(self, *a, **kw):
        raise filelock.Timeout(str(self.lock_file))

    monkeypatch.setattr(filelock.FileLock, "acquire", refuse)
    build = Counter()
    assert cache.get_or_build(["k"], build) == b"cubin-bytes" and build.calls == 1
    assert cache.get_or_build(["k"], build) == b"cubin-bytes" and build.calls == 1
