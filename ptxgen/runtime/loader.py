"""Config -> loaded kernel, with a disk cache keyed by what the kernel depends on (no rebuild on a hit).

Key of a kernel image (:func:`image_key`)::

    IMAGE_FORMAT              bumped when the stored payload's layout changes
    config content            a name or path: the YAML file's text; a Config object: json of
                              ptxgen.config.to_dict(cfg), sorted keys (the name included)
    ptxgen version            ptxgen.__version__
    source fingerprint        path, size and mtime of the ptxgen and emitters sources (.py, .j2,
                              .yaml), so a development edit of a builder or emitter is a miss,
                              not a stale hit
    driver version            cuDriverGetVersion (the driver's JIT compiles the PTX)
    compute capability        of the device

The payload (:func:`pack_image` / :func:`unpack_image`) holds the launch spec
(JSON), the PTX and the cubin the driver's JIT produced, so a hit loads the
cubin and launches without running plan/IR/emitter, and — for a config given
by name or path — without importing the config schema at all (pydantic, plan:
about 100 ms of a first call; docs/performance.md, "First call").  A miss takes
the image compiled ahead of time and shipped in the package when everything it
depends on matches (:mod:`ptxgen.runtime.prebuilt`; keyed by content, since the
source fingerprint above changes with every install), else validates and builds
the config (``ptxgen.build.build``) and compiles the PTX (``PTXGEN_JIT``,
:mod:`ptxgen.runtime.module`); either is stored; the store is atomic and
locked (:mod:`ptxgen.runtime.cache`).  A payload that does not unpack is
rebuilt like a corrupt entry.

Knobs (:mod:`ptxgen.knobs`) are read here, once per kernel load:
``PTXGEN_NO_CACHE``, ``PTXGEN_OVERRIDE_PTX`` (checked by
:func:`ptxgen.runtime.override.check_override`), ``PTXGEN_DUMP`` (:func:`ptxgen.runtime.override.dump`); the
module that applies the last two is imported only when one of them is set.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import struct
from typing import Any, NamedTuple

from ptxgen import knobs
from ptxgen.errors import ConfigError
from ptxgen.launch import LaunchSpec

log = logging.getLogger(__name__)

IMAGE_FORMAT = "ptxgen-kernel-image-v1"
_IMAGE_MAGIC = b"PTXGIMG1"
_LENGTHS = struct.Struct("<8sQQQ")


class KernelImage(NamedTuple):
    """A kernel ready to load: launch spec, PTX text and the cubin compiled from it (for one device).

    ``origin`` (not stored in the image's bytes): ``"built"`` in this process, ``"cache"`` read from the disk cache,
    ``"prebuilt"`` shipped in the package (:mod:`ptxgen.runtime.prebuilt`).
    """

    spec: LaunchSpec
    ptx: str
    cubin: bytes
    origin: str = "built"


def pack_image(image: KernelImage) -> bytes:
    """Bytes of an image: magic, three u64 lengths, spec JSON, PTX, cubin."""
    spec = image.spec.to_json().encode()
    ptx = image.ptx.encode()
    return _LENGTHS.pack(_IMAGE_MAGIC, len(spec), len(ptx), len(image.cubin)) + spec + ptx + image.cubin


def unpack_image(blob: bytes) -> KernelImage | None:
    """Inverse of :func:`pack_image`; None for anything that is not a well-formed image."""
    if len(blob) < _LENGTHS.size:
        return None
    magic, n_spec, n_ptx, n_cubin = _LENGTHS.unpack_from(blob)
    if magic != _IMAGE_MAGIC or _LENGTHS.size + n_spec + n_ptx + n_cubin != len(blob):
        return None
    o = _LENGTHS.size
    try:
        spec = LaunchSpec.from_json(blob[o:o + n_spec].decode())
        ptx = blob[o + n_spec:o + n_spec + n_ptx].decode()
    except (ValueError, KeyError, TypeError):
        return None
    return KernelImage(spec, ptx, bytes(blob[o + n_spec + n_ptx:]), origin="cache")


SOURCE_SUFFIXES = (".py", ".j2", ".yaml")


@functools.cache
def _source_stats() -> tuple[tuple[str, str, int, int], ...]:
    """``(relative path, absolute path, size, mtime_ns)`` of every ptxgen and emitters source file (``.py``,
    ``.j2``, ``.yaml``), sorted by relative path (``/``-separated, from the folder above each package);
    ``__pycache__`` and ``ptxgen/prebuilt`` (the images compiled from these sources) left out.  Listed once per
    process in one ``os.scandir`` pass (one ``stat`` per file, strings only: pathlib took ~20 ms on the H100 host);
    the emitters are located, not imported (importing them compiles templates)."""
    import importlib.util

    roots = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]  # the ptxgen package (no import circle)
    spec = importlib.util.find_spec("emitters")
    if spec is not None and spec.origin:
        roots.append(os.path.dirname(spec.origin))
    entries = []
    for root in roots:
        base = len(os.path.dirname(root)) + 1
        folders = [root]
        while folders:
            with os.scandir(folders.pop()) as listing:
                for entry in listing:
                    if entry.is_dir():  # a link to a folder is not followed, as os.walk does not
                        if not entry.is_symlink() and entry.name != "__pycache__" and \
                                entry.path[base:] != "ptxgen/prebuilt":
                            folders.append(entry.path)
                    elif entry.name.endswith(SOURCE_SUFFIXES):
                        st = entry.stat()
                        entries.append((entry.path[base:].replace(os.sep, "/"), entry.path, st.st_size, st.st_mtime_ns))
    return tuple(sorted(entries))


def source_files() -> tuple[tuple[str, str], ...]:
    """``(relative path, absolute path)`` of every ptxgen and emitters source file (:func:`_source_stats`)."""
    return tuple((rel, path) for rel, path, _, _ in _source_stats())


@functools.cache
def source_fingerprint() -> str:
    """sha256 (hex, 16 chars) over path, size and mtime of every source file (:func:`_source_stats`).

    Computed once per process from ``stat`` alone (no file is read): any edit of a builder, emitter, template or
    shipped config changes it, so the disk cache misses instead of serving a kernel built from older sources.
    A reinstall or a copy changes it too (mtimes), so it keys only the user's own cache, never shipped data.
    """
    text = "".join(f"{rel}\0{size}\0{mtime_ns}\n" for rel, _, size, mtime_ns in _source_stats())
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@functools.cache
def source_content_hash() -> str:
    """sha256 (hex) over path and bytes of every source file (:func:`source_files`), once per process.

    Unlike :func:`source_fingerprint` it reads the files, so equal sources give equal hashes whatever their
    mtimes (an install, a copy, a fresh clone): the key of the images shipped in the package
    (:mod:`ptxgen.runtime.prebuilt`).  About 1.6 MB read: a few ms.
    """
    digest = hashlib.sha256()
    for rel, path in source_files():
        with open(path, "rb") as f:
            data = f.read()
        digest.update(f"{rel}\0{len(data)}\n".encode())
        digest.update(data)
    return digest.hexdigest()


def config_content(config: Any) -> str:
    """Canonical text of a config for the cache key: equal configs give equal text.

    A name or path (``str`` / ``os.PathLike``) gives ``yaml:`` + the file's stem (the config's name when the
    YAML has no ``name``) + its text, read without parsing or validating it (a cache hit then needs no
    schema); a :class:`~ptxgen.config.Config` gives ``config:`` + its JSON (sorted keys).  A file that cannot
    be located or read falls through to ``load_config``, which raises the user-facing :class:`ConfigError`.
    """
    if isinstance(config, (str, os.PathLike)):
        from ptxgen.shipped import resolve_config_path

        try:
            path = resolve_config_path(config)
            return f"yaml:{path.stem}\n" + path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            pass
    from ptxgen.config import load_config, to_dict

    return "config:" + json.dumps(to_dict(load_config(config)), sort_keys=True, separators=(",", ":"))


def image_key(config: Any, driver_version: int, capability: tuple[int, int]) -> tuple[str, ...]:
    """The cache key parts of a config's kernel image (see module docstring); ``config`` as :func:`build_image`."""
    from ptxgen.version import __version__

    return (IMAGE_FORMAT, config_content(config), f"ptxgen={__version__}", f"src={source_fingerprint()}",
            f"driver={driver_version}", f"sm={capability[0]}{capability[1]}")


def build_image(config: Any, jit: Any, watchdog_ns: int = 0, accept: Any = None) -> KernelImage:
    """Build a config (plan, IR, PTX) and compile its PTX with ``jit(ptx) -> cubin``.

    Args:
        config: a ``Config``, or a shipped name or YAML path (validated here).
        jit: ``ptx -> cubin``.
        watchdog_ns: a positive ``PTXGEN_WATCHDOG`` budget builds the hang-watchdog variant.
        accept: called with the launch spec before the JIT; raises to refuse the kernel (e.g. wrong arch).

    Raises:
        ConfigError: the config is bad (or ``accept`` refuses it).
    """
    from ptxgen.build import build

    built = build(config, watchdog_ns=watchdog_ns)
    if accept is not None:
        accept(built.launch)
    return KernelImage(built.launch, built.ptx, jit(built.ptx))


def cached_image(config: Any, key: tuple[str, ...], jit: Any, *, use_cache: bool | None = None,
                 watchdog_ns: int = 0, accept: Any = None, shipped: Any = None, rebuild: bool = False) -> KernelImage:
    """The image of ``config`` from the disk cache; on a miss or a bad entry the shipped one, else built with ``jit``.

    Args:
        config: a ``Config``, or a shipped name or YAML path (validated only when built).
        key: :func:`image_key` of it.
        jit: ``ptx -> cubin`` (the driver's JIT on a GPU; any function in tests).
        use_cache: as :func:`ptxgen.runtime.cache.get_or_build`.
        watchdog_ns: as :func:`build_image` (``key`` must name it).
        accept: as :func:`build_image`; also called with the launch spec of a stored or shipped image.
        shipped: ``() -> KernelImage | None``: the image compiled ahead of time for exactly this key, tried on a
            miss before building (:func:`ptxgen.runtime.prebuilt.finder`); it is then stored like a built one.
        rebuild: build (neither cache nor ``shipped``) and overwrite the entry: the driver refused the cubin found.
    """
    from ptxgen.runtime import cache

    image: list[KernelImage] = []

    def make() -> bytes:
        found = shipped() if shipped is not None else None
        if found is not None and accept is not None:
            accept(found.spec)
        image.append(found if found is not None else build_image(config, jit, watchdog_ns, accept))
        return pack_image(image[0])

    if rebuild:
        return _rewrite(config, key, build_image(config, jit, watchdog_ns, accept), use_cache)
    blob = cache.get_or_build(key, make, use_cache=use_cache)
    if image:
        return image[0]
    unpacked = unpack_image(blob)
    if unpacked is not None:
        if accept is not None:
            accept(unpacked.spec)
        return unpacked
    log.warning("ptxgen cache: kernel image of %s does not unpack; rebuilding", config)
    return _rewrite(config, key, build_image(config, jit, watchdog_ns, accept), use_cache)


def _rewrite(config: Any, key: tuple[str, ...], image: KernelImage, use_cache: bool | None) -> KernelImage:
    """Store ``image`` over the cache entry of ``key`` (unless the cache is off); a failed write is logged."""
    from ptxgen.runtime import cache

    if use_cache is False or (use_cache is None and not cache.enabled()):
        return image
    try:
        cache.write_entry(cache.entry_path(cache.cache_key(key)), pack_image(image))
    except OSError as exc:
        log.warning("ptxgen cache: could not rewrite the image of %s: %s", config, exc)
    return image


# --------------------------------------------------------------------------- the process-level loader


def load_image(config: Any, driver_version: int, capability: tuple[int, int], jit: Any,
               settings: knobs.Knobs | None = None, accept: Any = None, *, prebuilt: Any = None,
               rebuild: bool = False) -> KernelImage:
    """The image to load for ``config``: from the cache (or shipped, or built), then the override applied, then dumped.

    Args:
        config: a ``Config``, or a shipped name or YAML path (a cache hit reads only its text).
        driver_version, capability: of the device (part of the cache key).
        jit: ``ptx -> cubin``.
        settings: knob values (default: read now).
        accept: called with the launch spec before any JIT and on a hit (e.g. the arch check).
        prebuilt: ``(config content, capability, driver version, compiler) -> KernelImage | None``, the images
            compiled ahead of time (:func:`ptxgen.runtime.prebuilt.find`); ``compiler`` is ``"auto"`` or a ptxas
            :func:`~ptxgen.assemble.toolchain_version`.  Asked on a cache miss only, and never with
            ``PTXGEN_NO_CACHE``, ``PTXGEN_WATCHDOG`` or a ``PTXGEN_JIT`` other than ``auto`` and ``ptxas``.
        rebuild: build and overwrite the cache entry (the driver refused the cubin this call returned before).

    Raises:
        ConfigError: bad override; whatever building the config raises.
        CudaError: the JIT rejected the PTX.
    """
    settings = knobs.read() if settings is None else settings
    use_cache = not settings.no_cache
    key = image_key(config, driver_version, capability)
    compiler = None
    if settings.watchdog_ns:
        key += (f"watchdog={settings.watchdog_ns}",)
    if settings.jit == "auto":  # whichever compiler auto found at the miss: a hit looks for no tool
        key += ("jit=auto",)
        compiler = "auto"
    elif settings.jit != "driver":  # a named toolchain: its name and version
        from ptxgen.assemble import toolchain_version

        key += (f"jit={toolchain_version(settings.jit)}",)
        compiler = toolchain_version(settings.jit) if settings.jit == "ptxas" else None
    shipped = None
    if prebuilt is not None and use_cache and not settings.watchdog_ns and compiler is not None:
        content = key[1]  # config_content(config), see image_key

        def shipped() -> KernelImage | None:
            return prebuilt(content, capability, driver_version, compiler)

    image = cached_image(config, key, jit, use_cache=use_cache, watchdog_ns=settings.watchdog_ns, accept=accept,
                         shipped=shipped, rebuild=rebuild)
    if settings.override_ptx is None and settings.dump_dir is None:
        return image
    from ptxgen.runtime.override import dump, override_for

    found = override_for(image.spec, settings.override_ptx)
    if found is not None:
        ptx, path = found
        log.warning("%s: kernel %s loaded from %s", knobs.OVERRIDE_PTX, image.spec.name, path)
        from ptxgen.runtime import cache

        key = ("ptxgen-override-cubin-v1", ptx, f"driver={driver_version}", f"sm={capability[0]}{capability[1]}")
        image = KernelImage(image.spec, ptx, cache.get_or_build(key, lambda: jit(ptx), use_cache=use_cache))
    if settings.dump_dir is not None:
        dump(image, settings.dump_dir)
    return image
