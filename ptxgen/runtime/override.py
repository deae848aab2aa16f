"""``PTXGEN_OVERRIDE_PTX`` and ``PTXGEN_DUMP``: hand-edited PTX loaded in place of the generated one, checked
against the launch spec, and every loaded kernel written to a directory.

Imported by :func:`ptxgen.runtime.loader.load_image` only when one of the two knobs is set: a kernel load without
them (a warm first call) compiles none of these regular expressions (docs/performance.md, "First call").
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ptxgen import knobs
from ptxgen.errors import ConfigError
from ptxgen.hw import SMEM_LIMIT_BYTES
from ptxgen.launch import LaunchSpec

if TYPE_CHECKING:  # the loader imports this module (layers flow one way: loader -> override)
    from ptxgen.runtime.loader import KernelImage

log = logging.getLogger(__name__)

_ENTRY_RE = re.compile(r"\.entry\s+([A-Za-z_$%][\w$]*)\s*\((.*?)\)", re.DOTALL)
_PARAM_RE = re.compile(r"\.param\s+(?:\.align\s+\d+\s+)?\.(\w+)\s+([A-Za-z_$%][\w$]*)\s*(?:\[(\d+)\])?")
_TARGET_RE = re.compile(r"^\s*\.target\s+([\w,\s]+?)\s*$", re.MULTILINE)
_DIRECTIVE_RE = {d: re.compile(rf"\.{d}\s+(\d+)\s*(?:,\s*(\d+))?\s*(?:,\s*(\d+))?") for d in
                 ("reqntid", "maxntid", "reqnctapercluster")}
_STATIC_SHARED_RE = re.compile(r"^\s*\.shared\s+(?:\.align\s+\d+\s+)?\.(?:b8|u8|s8)\s+\w+\s*\[(\d+)\]", re.MULTILINE)
_LINE_COMMENT_RE = re.compile(r"//[^\n]*")


@dataclass(frozen=True)
class PtxHeader:
    """Launch metadata read from a PTX module's text (first ``.entry`` only)."""

    target: str
    entry: str
    params: tuple[tuple[str, str], ...]
    reqntid: tuple[int, int, int] | None
    maxntid: tuple[int, int, int] | None
    cluster: tuple[int, int, int] | None
    static_smem_bytes: int


def _dims(match: re.Match | None) -> tuple[int, int, int] | None:
    if match is None:
        return None
    return tuple(int(g) if g else 1 for g in match.groups())  # type: ignore[return-value]


def parse_ptx_header(ptx: str) -> PtxHeader:
    """Read the launch metadata of the first kernel of a PTX module.

    Parameters: ``.param .align 128 .b8 NAME[128]`` is ``(NAME, "tensor_map")``;
    ``.param .u64 NAME`` is ``(NAME, "u64")`` (likewise ``u32``, ``b64``...).

    Raises:
        ConfigError: no ``.entry`` in the text.
    """
    text = _LINE_COMMENT_RE.sub("", ptx)
    entry = _ENTRY_RE.search(text)
    if entry is None:
        raise ConfigError("PTX has no .entry: not a kernel module")
    params = []
    for p in _PARAM_RE.finditer(entry.group(2)):
        kind, name, count = p.groups()
        params.append((name, "tensor_map") if kind == "b8" and count == "128" else (name, kind if not count
                                                                                    else f"{kind}[{count}]"))
    body = text[entry.end():]
    head = body.split("{", 1)[0]
    target = _TARGET_RE.search(text)
    return PtxHeader(
        target=target.group(1) if target else "",
        entry=entry.group(1),
        params=tuple(params),
        reqntid=_dims(_DIRECTIVE_RE["reqntid"].search(head)),
        maxntid=_dims(_DIRECTIVE_RE["maxntid"].search(head)),
        cluster=_dims(_DIRECTIVE_RE["reqnctapercluster"].search(head)),
        static_smem_bytes=sum(int(n) for n in _STATIC_SHARED_RE.findall(text)),
    )


def check_override(ptx: str, spec: LaunchSpec, source: str) -> None:
    """Refuse an override PTX whose launch metadata disagrees with ``spec``.

    Checked: ``.target`` == ``spec.arch``; ``.entry`` name == ``spec.kernel``; the parameter
    list == ``spec.params``; ``.reqntid`` present and == ``spec.block``; ``.reqnctapercluster``
    == ``spec.cluster`` (absent allowed only for a 1-CTA cluster); static ``.shared`` bytes +
    ``spec.dynamic_smem_bytes`` <= :data:`SMEM_LIMIT_BYTES`.

    Raises:
        ConfigError: one line per mismatch, naming the knob, the file and the launch spec's value.
    """
    h = parse_ptx_header(ptx)
    problems = []
    if h.target != spec.arch:
        problems.append(f".target {h.target or '(none)'} != config arch {spec.arch}")
    if h.entry != spec.kernel:
        problems.append(f".entry {h.entry} != launch spec kernel {spec.kernel}")
    want_params = tuple(tuple(p) for p in spec.params)
    if h.params != want_params:
        problems.append(f"params {list(h.params)} != launch spec params {list(want_params)}")
    if h.reqntid != tuple(spec.block):
        problems.append(f".reqntid {h.reqntid or '(none)'} != launch block {tuple(spec.block)}")
    cluster = h.cluster or (1, 1, 1)
    if cluster != tuple(spec.cluster):
        problems.append(f".reqnctapercluster {h.cluster or '(none)'} != launch cluster {tuple(spec.cluster)}")
    total = h.static_smem_bytes + spec.dynamic_smem_bytes
    if total > SMEM_LIMIT_BYTES:
        problems.append(f"static .shared {h.static_smem_bytes} B + dynamic {spec.dynamic_smem_bytes} B = {total} B "
                        f"> {SMEM_LIMIT_BYTES} B per CTA")
    if problems:
        raise ConfigError(f"{knobs.OVERRIDE_PTX}={source}: launch metadata does not match config "
                          f"{spec.name!r}: " + "; ".join(problems))


def override_for(spec: LaunchSpec, override: Path | None) -> tuple[str, Path] | None:
    """``(ptx, path)`` of the override that applies to ``spec``, checked; None when none applies.

    A file applies to every kernel; a directory applies ``<dir>/<spec.name>.ptx`` when it exists.

    Raises:
        ConfigError: the override path does not exist or cannot be read, or its metadata mismatches.
    """
    if override is None:
        return None
    if override.is_dir():
        path = override / f"{spec.name}.ptx"
        if not path.is_file():
            return None
    elif override.is_file():
        path = override
    else:
        raise ConfigError(f"{knobs.OVERRIDE_PTX}={override}: no such file or directory")
    try:
        ptx = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{knobs.OVERRIDE_PTX}={path}: cannot read: {exc}") from None
    check_override(ptx, spec, str(path))
    return ptx, path


# --------------------------------------------------------------------------- PTXGEN_DUMP


def dump(image: KernelImage, dump_dir: Path) -> list[Path]:
    """Write ``<name>.ptx``, ``.cubin``, ``.json`` and ``.sass`` (nvdisasm via ``ptxgen.assemble``) into ``dump_dir``.

    The SASS is skipped, with a warning in the log, when the disassembler is unavailable.
    Returns the paths written.
    """
    dump_dir.mkdir(parents=True, exist_ok=True)
    name = image.spec.name
    written = []
    for suffix, data in ((".ptx", image.ptx.encode()), (".cubin", image.cubin), (".json", image.spec.to_json().encode())):
        path = dump_dir / f"{name}{suffix}"
        path.write_bytes(data)
        written.append(path)
    try:
        from ptxgen.assemble import disassemble

        sass = disassemble(image.cubin)
    except Exception as exc:  # noqa: BLE001 - a debugging aid must not break the launch
        log.warning("%s: SASS not dumped (%s)", knobs.DUMP, exc)
    else:
        path = dump_dir / f"{name}.sass"
        path.write_text(sass)
        written.append(path)
    return written
