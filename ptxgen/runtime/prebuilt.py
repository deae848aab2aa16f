"""Kernel images compiled ahead of time and shipped in the package (``ptxgen/prebuilt/``), read on a cache miss.

A first call with an empty kernel cache would build its kernel (plan, IR, emit, and the imports of the config
schema and Jinja2) and compile the PTX with ptxas: about 0.65 s of a 0.9-1.0 s first call on an H100 host
(docs/performance.md, "First call").  ``ptxgen build --prebuilt`` (:mod:`ptxgen.aot`) runs both ahead of time for
the shipped sm_90a configs and writes, into ``ptxgen/prebuilt/``:

* ``<name>.img.zlib``: :func:`ptxgen.runtime.loader.pack_image` of the image (launch spec, PTX, cubin of the PyPI
  ptxas compiling the PTX as a whole program, as ``PTXGEN_JIT=auto`` does), zlib-compressed;
* ``manifest.json`` (:data:`MANIFEST_FORMAT`): what every image depends on, in content terms::

      format, image_format      this layout and :data:`ptxgen.runtime.loader.IMAGE_FORMAT`
      ptxgen                    ptxgen.__version__
      sources                   :func:`ptxgen.runtime.loader.source_content_hash`: sha256 over the bytes of
                                every ptxgen and emitters source (not their mtimes, which an install changes)
      compiler                  the ptxas that compiled the images (:func:`ptxgen.assemble.toolchain_version`)
      min_driver                the oldest driver that loads its cubins (cuDriverGetVersion: the ptxas major
                                x 1000; CUDA minor-version compatibility covers machine code)
      candidates                the chooser's rows of every shipped config (:func:`ptxgen.runtime.choose.candidates`)
      images                    per config name: arch and the compute capability it runs on, the sha256
                                of both forms of its config content
                                (:func:`ptxgen.runtime.loader.config_content` of the name and of the Config),
                                file, sha256 and size of the file

A shipped image is used (:meth:`Shelf.find`) only when all of these match the running process and device: the
manifest's format, image format, version and source hash (checked once per process; the source hash reads about
1.6 MB: a few ms); the config content's hash; the device's compute capability; the driver version;
the compiler knob (``auto``, or ``ptxas`` of the very same build).  The image file must have its recorded sha256
and unpack, and its launch spec must name the entry's config and arch.  Anything else is a miss, logged, and the
kernel is built as without shipped images: a stale or corrupt entry costs the build, never a wrong kernel.  A
driver that refuses the shipped cubin gets a built one (:func:`ptxgen.runtime.api.loaded_kernel`).  The image
found is stored in the user's cache like a built one, so the next process is a warm hit.

Nothing here imports the config schema, the builders or the emitters; :mod:`ptxgen.aot` writes, this reads.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
import zlib
from typing import Any

from ptxgen.runtime.loader import IMAGE_FORMAT, KernelImage, source_content_hash, unpack_image

log = logging.getLogger(__name__)

MANIFEST_FORMAT = "ptxgen-prebuilt-v1"
MANIFEST = "manifest.json"
IMAGE_SUFFIX = ".img.zlib"
#: the shipped folder, ``ptxgen/prebuilt`` (package data)
FOLDER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "prebuilt")
_PTXAS_RELEASE = re.compile(r"\bcuda_(\d+)\.(\d+)\b")


def content_sha256(content: str) -> str:
    """sha256 (hex) of a config content text (:func:`ptxgen.runtime.loader.config_content`)."""
    return hashlib.sha256(content.encode()).hexdigest()


def min_driver_version(compiler: str) -> int:
    """The oldest ``cuDriverGetVersion`` that loads cubins of ``compiler`` (``ptxas cuda_13.5.r13.5/... -O3``):
    its major release x 1000 (a 13.x cubin loads on every 13.x driver: CUDA minor-version compatibility).

    Raises:
        ValueError: ``compiler`` names no ``cuda_MAJOR.MINOR`` release.
    """
    found = _PTXAS_RELEASE.search(compiler)
    if found is None:
        raise ValueError(f"compiler={compiler!r}: names no cuda_MAJOR.MINOR release")
    return int(found[1]) * 1000


class Shelf:
    """The images of one prebuilt folder (:data:`FOLDER` unless a test names another).

    Args:
        folder: holds ``manifest.json`` and the image files.
        sources: the source hash to match (default :func:`~ptxgen.runtime.loader.source_content_hash`, computed
            when the manifest is first read).
    """

    def __init__(self, folder: str | os.PathLike, sources: str | None = None):
        self.folder = os.fspath(folder)
        self._sources = sources

    @functools.cached_property
    def manifest(self) -> dict | None:
        """The manifest when it is readable and fresh (format, image format, version, sources match), else None."""
        path = os.path.join(self.folder, MANIFEST)
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("ptxgen prebuilt: %s unreadable (%s); kernels are built", path, exc)
            return None
        from ptxgen.version import __version__

        want = {"format": MANIFEST_FORMAT, "image_format": IMAGE_FORMAT, "ptxgen": __version__,
                "sources": self._sources or source_content_hash()}
        doc = doc if isinstance(doc, dict) else {}
        stale = [f"{k} {doc.get(k)!r} != {v!r}" for k, v in want.items() if doc.get(k) != v]
        if stale:
            log.info("ptxgen prebuilt: %s is stale (%s): kernels are built; `ptxgen build --prebuilt` refreshes it",
                     path, "; ".join(stale))
            return None
        try:
            by_content = {c: (name, e) for name, e in doc["images"].items() for c in e["contents"]}
            min_driver, compiler = int(doc["min_driver"]), str(doc["compiler"])
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            log.warning("ptxgen prebuilt: %s malformed (%r); kernels are built", path, exc)
            return None
        return {**doc, "by_content": by_content, "min_driver": min_driver, "compiler": compiler}

    def candidates(self) -> list | None:
        """The chooser's candidate rows of a fresh manifest, else None."""
        doc = self.manifest
        rows = doc.get("candidates") if doc is not None else None
        return rows if isinstance(rows, list) else None

    def find(self, content: str, capability: tuple[int, int], driver_version: int, compiler: str) -> KernelImage | None:
        """The shipped image of a config, or None (a miss: the caller builds; see the module docstring).

        Args:
            content: :func:`~ptxgen.runtime.loader.config_content` of the config.
            capability: the device's compute capability.
            driver_version: ``cuDriverGetVersion`` (13000 = 13.0).
            compiler: ``"auto"``, or the :func:`~ptxgen.assemble.toolchain_version` of ``PTXGEN_JIT=ptxas``.
        """
        doc = self.manifest
        if doc is None:
            return None
        found = doc["by_content"].get(content_sha256(content))
        if found is None:
            return None
        name, entry = found
        mismatches = []
        if entry.get("capability") != list(capability):
            mismatches.append(f"{entry.get('arch')} runs on compute capability {entry.get('capability')}, the device "
                              f"has {list(capability)}")
        if driver_version < doc["min_driver"]:
            mismatches.append(f"driver {driver_version} < {doc['min_driver']}")
        if compiler not in ("auto", doc["compiler"]):
            mismatches.append(f"PTXGEN_JIT compiler {compiler!r} != {doc['compiler']!r}")
        if mismatches:
            log.info("ptxgen prebuilt: %s not used: %s", name, "; ".join(mismatches))
            return None
        image = self._read(name, entry)
        if image is None or image.spec.name != name or image.spec.arch != entry.get("arch"):
            log.warning("ptxgen prebuilt: image of %s in %s is corrupt; building it", name, self.folder)
            return None
        return image

    def _read(self, name: str, entry: dict) -> KernelImage | None:
        """The image file of an entry, checked against its sha256 and unpacked; None when anything is off."""
        try:
            path = os.path.join(self.folder, os.path.basename(entry["file"]))
            with open(path, "rb") as f:
                data = f.read()
            if hashlib.sha256(data).hexdigest() != entry["sha256"]:
                return None
            image = unpack_image(zlib.decompress(data))
        except (OSError, KeyError, TypeError, zlib.error):
            return None
        return None if image is None else KernelImage(image.spec, image.ptx, image.cubin, origin="prebuilt")


@functools.cache
def shelf() -> Shelf:
    """The package's shelf (:data:`FOLDER`), once per process."""
    return Shelf(FOLDER)


def find(content: str, capability: tuple[int, int], driver_version: int, compiler: str) -> KernelImage | None:
    """:meth:`Shelf.find` of the package's shelf: the ``prebuilt`` argument of
    :func:`ptxgen.runtime.loader.load_image`."""
    return shelf().find(content, capability, driver_version, compiler)


def candidate_rows() -> Any:
    """The chooser's candidate rows shipped with the images when the manifest is fresh, else None."""
    return shelf().candidates()
