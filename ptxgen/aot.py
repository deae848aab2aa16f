"""Kernel images compiled ahead of time: what ``ptxgen build --prebuilt`` writes into ``ptxgen/prebuilt/``.

The runtime reads them (:mod:`ptxgen.runtime.prebuilt`: layout, manifest fields and the rules for using an image);
this module builds every config (plan, IR, emit), compiles its PTX as the runtime's ``PTXGEN_JIT=auto`` does (the
PyPI ptxas, a whole program: :func:`ptxgen.assemble.compile_ptx`), and writes the images and the manifest.

Run it after any change to the ptxgen or emitters sources (the manifest's source hash covers every file, so any
edit leaves the shipped images unused until they are rewritten: a first call then builds, it is never wrong).
Equal sources and ptxas give byte-equal files (no timestamps, sorted keys).
"""

from __future__ import annotations

import hashlib
import json
import os
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path

from ptxgen.errors import OutputError

#: the archs whose shipped configs get an image by default (sm_90a: the H100s ptxgen is measured on)
PREBUILT_ARCHS = ("sm_90a",)


def default_names() -> list[str]:
    """Every shipped config of :data:`PREBUILT_ARCHS`, sorted (the arch read from the YAML, no build)."""
    from ptxgen.runtime.choose import shipped_candidate
    from ptxgen.shipped import shipped_configs

    return [name for name in shipped_configs() if shipped_candidate(name).arch in PREBUILT_ARCHS]


def write_prebuilt(folder: str | os.PathLike, names: Sequence[str] | None = None,
                   compile_ptx: Callable[[str, str], bytes] | None = None, compiler: str | None = None) -> dict:
    """Build, compile and write the images of ``names`` (default :func:`default_names`) and their manifest.

    Args:
        folder: the prebuilt folder (created; image files of names not written now are removed).
        names: shipped config names.
        compile_ptx: ``(ptx, target) -> cubin``; default the PyPI ptxas (:func:`ptxgen.assemble.compile_ptx`).
        compiler: what ``compile_ptx`` is, recorded in the manifest; default
            :func:`ptxgen.assemble.toolchain_version` of ptxas (give both or neither).

    Returns:
        The manifest written.

    Raises:
        ConfigError: a name is not a valid shipped config.
        AssembleError: ptxas rejected a kernel or is not installed.
        OutputError: the folder cannot be written.
        ValueError: only one of ``compile_ptx`` and ``compiler`` given.
    """
    from ptxgen.build import build
    from ptxgen.config import load_config
    from ptxgen.runtime.choose import ARCH_OF_CAPABILITY, shipped_rows
    from ptxgen.runtime.loader import IMAGE_FORMAT, KernelImage, config_content, pack_image, source_content_hash
    from ptxgen.runtime.prebuilt import (IMAGE_SUFFIX, MANIFEST, MANIFEST_FORMAT, content_sha256,
                                         min_driver_version)
    from ptxgen.version import __version__

    if (compile_ptx is None) != (compiler is None):
        raise ValueError("compile_ptx and compiler: give both or neither")
    if compile_ptx is None:
        from ptxgen.assemble import compile_ptx as ptxas, toolchain_version

        compile_ptx, compiler = (lambda ptx, target: ptxas(ptx, target, "ptxas")), toolchain_version("ptxas")
    capability_of = {arch: list(cap) for cap, arch in ARCH_OF_CAPABILITY.items()}
    names = default_names() if names is None else list(names)
    files: dict[str, bytes] = {}
    images = {}
    for name in names:
        res = build(name)
        blob = zlib.compress(pack_image(KernelImage(res.launch, res.ptx, compile_ptx(res.ptx, res.plan.arch))), 9)
        file = f"{name}{IMAGE_SUFFIX}"
        files[file] = blob
        contents = sorted({content_sha256(config_content(name)), content_sha256(config_content(load_config(name)))})
        images[name] = {"arch": res.plan.arch, "capability": capability_of[res.plan.arch], "contents": contents,
                        "file": file, "sha256": hashlib.sha256(blob).hexdigest(), "bytes": len(blob)}
    manifest = {"format": MANIFEST_FORMAT, "image_format": IMAGE_FORMAT, "ptxgen": __version__,
                "sources": source_content_hash(), "compiler": compiler, "min_driver": min_driver_version(compiler),
                "candidates": shipped_rows(), "images": images}
    files[MANIFEST] = manifest_text(manifest).encode()
    out = Path(folder)
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / MANIFEST).unlink(missing_ok=True)
        for old in out.glob(f"*{IMAGE_SUFFIX}"):
            if old.name not in files:
                old.unlink()
        for file, data in files.items():  # the manifest last: a half-written folder has none
            tmp = out / f".{file}.tmp"
            tmp.write_bytes(data)
            os.replace(tmp, out / file)
    except OSError as exc:
        raise OutputError(f"cannot write {exc.filename or out} ({exc.strerror or exc}); pass -o DIR with a writable "
                          "directory") from None
    return manifest


def manifest_text(manifest: dict) -> str:
    """The manifest as JSON text, sorted keys, one line per candidate row and per image (small diffs)."""
    def one(value: object) -> str:
        return json.dumps(value, sort_keys=True)

    parts = []
    for key in sorted(manifest):
        value = manifest[key]
        if key == "candidates":
            body = "[\n" + ",\n".join(f"  {one(row)}" for row in value) + "\n ]"
        elif key == "images":
            body = "{\n" + ",\n".join(f"  {one(n)}: {one(e)}" for n, e in sorted(value.items())) + "\n }"
        else:
            body = one(value)
        parts.append(f" {one(key)}: {body}")
    return "{\n" + ",\n".join(parts) + "\n}\n"
