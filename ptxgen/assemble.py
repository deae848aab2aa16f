"""PTX -> cubin without a GPU: resource report, wgmma-serialization check, SASS opcode histogram.

Tools come from the NVIDIA wheels only, never from a system path:

* ``ptxas`` (wheel ``nvidia-cuda-nvcc``) and ``nvdisasm`` (wheel
  ``nvidia-cuda-nvdisasm``), located with
  ``cuda.pathfinder.find_nvidia_binary_utility``;
* nvJitLink (wheel ``nvidia-nvjitlink``) through ``cuda.bindings.nvjitlink``.

Backends differ (measured with CUDA 13.5):

* ``"ptxas"`` (default) compiles the module as a whole program, as the driver
  loads it.  Its ``-v`` report gives registers, the module's own static shared
  memory (``.shared`` declarations, without the system-reserved part), stack
  frame and spill bytes.
* ``"nvjitlink"`` compiles the PTX as *relocatable* code and then links it.
  Relocatable code can use more registers than the ptxas backend reports for
  the same PTX (a tiny tcgen05 kernel: 24 vs 12), and ``shared_bytes`` is the
  linker's figure, which on sm_90a includes 1 KiB of system-reserved shared
  memory.  Compare numbers only within one backend.

Diagnostics.  ptxas prints ``ptxas <file>, line N; error   : <text>`` for PTX
errors and ``ptxas info    : (C7511) <text> ... in line N`` for wgmma
serialization.  The serialization messages are *info* lines, not warnings, in
ptxas 13.5, and their code depends on the cause: here C7511 ("insufficient
register resources", a ``mov`` into an accumulator between two chained
wgmmas) and C7519 ("compiler-inserted WG.AR in divergent path", a call to an
extern function between wgmmas, relocatable compile); public build logs show
C7515 ("non wgmma instructions defining accumulator registers").
A diagnostic counts as serialization when its code is one of
:data:`SERIALIZATION_CODES` or its text says "wgmma.mma_async instructions are
serialized"; any such diagnostic is an :class:`~ptxgen.errors.AssembleError`.
Code C7517 ("wgmma.wait_group is injected ... by compiler") is kept in
``warnings`` for callers to judge.  Spills are data, never an error.
"""

from __future__ import annotations

import functools
import re
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from ptxgen.errors import AssembleError

TARGETS = ("sm_100a", "sm_90a")
BACKENDS = ("ptxas", "nvjitlink")
OPT_FLAGS = ("-O3",)
"""Flags that change the generated code; part of :func:`toolchain_version` so a cache keyed on it stays sound."""
PTXAS_REPORT_FLAGS = ("-v", "--warn-on-spills")
SERIALIZATION_CODES = frozenset({"C7510", "C7511", "C7515"})
_SERIALIZED_TEXT = "wgmma.mma_async instructions are serialized"

_DIAGNOSTIC = re.compile(
    r"^ptxas(?: (?P<file>.+?), line (?P<line>\d+);)?\s+(?P<severity>error|fatal|warning|info)\s*: (?P<message>.*)$")
_CODE = re.compile(r"^\((?P<code>C\d+)\)\s*")
_INFO_LINE = re.compile(r"\b(?:in|around) line (\d+)")
_ENTRY = re.compile(r"Compiling entry function '(?P<name>[^']+)'")
_FRAME = re.compile(
    r"(?P<stack>\d+) bytes stack frame, (?P<stores>\d+) bytes spill stores, (?P<loads>\d+) bytes spill loads")
_PTXAS_USED = re.compile(r"ptxas info\s*: Used (?P<registers>\d+) registers(?P<rest>.*)$", re.MULTILINE)
_LINKER_USED = re.compile(r"^info\s*: used \d+ registers(?P<rest>.*)$", re.MULTILINE)
_SMEM = re.compile(r"(?P<bytes>\d+) bytes smem")
_SASS_INSTRUCTION = re.compile(
    r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P(?:T|\d+)\s+)?(?P<op>[A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)", re.MULTILINE)


@dataclass(frozen=True)
class Diagnostic:
    """One ptxas diagnostic line.

    Attributes:
        severity: ``"error"``, ``"fatal"``, ``"warning"`` or ``"info"``.
        message: the text after ``severity :``, without the ``(Cnnnn)`` code.
        line: 1-based PTX line it points at (``, line N;`` prefix or ``in/around line N``), or None.
        code: ptxas message code such as ``"C7515"``, or None.
        text: the whole log line.
    """

    severity: str
    message: str
    line: int | None
    code: str | None
    text: str

    @property
    def is_error(self) -> bool:
        """True for ``error`` and ``fatal`` lines: the PTX was rejected."""
        return self.severity in ("error", "fatal")

    @property
    def is_serialization(self) -> bool:
        """True for a wgmma pipeline serialization (a performance bug ptxgen refuses to ship)."""
        return self.code in SERIALIZATION_CODES or _SERIALIZED_TEXT in self.message

    @property
    def is_warning(self) -> bool:
        """True for what ends up in :attr:`AssembleResult.warnings`: warnings and coded infos."""
        return self.severity == "warning" or (self.severity == "info" and self.code is not None)


def parse_diagnostics(log: str) -> tuple[Diagnostic, ...]:
    """Every ``ptxas ...: `` diagnostic line of an assembler log, in order.

    Resource lines (``Used N registers``) are diagnostics of severity info
    without a code; nvJitLink's own linker lines (``info    : ...``) are not
    ptxas lines and are skipped.
    """
    found = []
    for raw in log.splitlines():
        m = _DIAGNOSTIC.match(raw.strip())
        if m is None:
            continue
        message, code = m["message"], None
        if coded := _CODE.match(message):
            message, code = message[coded.end():], coded["code"]
        found.append(Diagnostic(m["severity"], message, _pointed_line(m["line"], message), code, raw.strip()))
    return tuple(found)


def _pointed_line(prefix_line: str | None, message: str) -> int | None:
    """The PTX line a diagnostic points at: its ``, line N;`` prefix, else ``in/around line N`` in the text."""
    if prefix_line is not None:
        return int(prefix_line)
    in_text = _INFO_LINE.search(message)
    return int(in_text[1]) if in_text else None


@dataclass(frozen=True)
class Resources:
    """The resource report of the module's one entry function (bytes unless named otherwise)."""

    kernel: str
    registers: int
    shared_bytes: int
    stack_frame_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int


def parse_resources(log: str) -> Resources:
    """Resources of the one ``.entry`` in a ptxas ``-v`` (or nvJitLink ``-verbose``) log.

    Reads the block that follows ``Compiling entry function 'NAME'``: the
    ``N bytes stack frame, N bytes spill stores, N bytes spill loads`` line and
    the ``Used N registers ...[, N bytes smem]`` line; without ``bytes smem``
    there (nvJitLink) it takes the linker's ``info : used ...`` line, else 0.

    Raises:
        AssembleError: when the log does not report exactly one entry function
            or its register line is missing.
    """
    entries = list(_ENTRY.finditer(log))
    if len(entries) != 1:
        names = [m["name"] for m in entries]
        raise AssembleError(f"expected one .entry in the module, the assembler compiled {len(names)}: {names}",
                            log=log)
    entry = entries[0]
    block = log[entry.end():]
    used = _PTXAS_USED.search(block)
    if used is None:
        raise AssembleError(f"no 'Used N registers' line for entry {entry['name']!r} in the assembler log", log=log)
    frame = _FRAME.search(block)
    linker = _LINKER_USED.search(block)
    smem = _SMEM.search(used["rest"]) or (_SMEM.search(linker["rest"]) if linker else None)
    return Resources(
        kernel=entry["name"],
        registers=int(used["registers"]),
        shared_bytes=int(smem["bytes"]) if smem else 0,
        stack_frame_bytes=int(frame["stack"]) if frame else 0,
        spill_store_bytes=int(frame["stores"]) if frame else 0,
        spill_load_bytes=int(frame["loads"]) if frame else 0,
    )


def opcode_histogram(sass: str) -> dict[str, int]:
    """Count SASS instructions of ``nvdisasm -c`` output by full dotted mnemonic.

    Keys keep every modifier (``HGMMA.64x256x16.F32.BF16``, ``UTMALDG.2D``,
    ``SYNCS.PHASECHK.TRANS64.TRYWAIT``) because the modifiers carry the MMA
    shape and the TMA rank; :meth:`AssembleResult.count` sums a family.
    Guard predicates (``@P0``, ``@!UP1``, ``@!PT``) are stripped.
    """
    return dict(sorted(Counter(m["op"] for m in _SASS_INSTRUCTION.finditer(sass)).items()))


def count_opcodes(opcodes: dict[str, int], prefix: str) -> int:
    """Sum the counts of mnemonics equal to ``prefix`` or extending it by dotted components.

    ``"HGMMA"`` counts ``HGMMA.64x128x16.F32.BF16``; ``"SYNCS.ARRIVE"`` counts
    ``SYNCS.ARRIVE.TRANS64.A1T0``; ``"LDT"`` does not count ``LDTM``.
    """
    return sum(n for op, n in opcodes.items() if op == prefix or op.startswith(prefix + "."))


@dataclass(frozen=True)
class AssembleResult:
    """A cubin and what the assembler said about it.

    Attributes:
        cubin: the ELF image, ready for ``cuModuleLoadData``.
        target: ``"sm_100a"`` or ``"sm_90a"``.
        kernel: the entry function's name.
        registers: registers per thread.
        shared_bytes: static shared memory in bytes (see the module docstring
            for how the backends differ); dynamic shared memory is not in it.
        spill_store_bytes, spill_load_bytes: register spill traffic in bytes per thread.
        stack_frame_bytes: local-memory stack frame in bytes per thread.
        warnings: assembler warnings and coded info lines (e.g. C7517), verbatim.
        sass: ``nvdisasm -c`` text when asked for, else None.
        opcodes: SASS opcode histogram (:func:`opcode_histogram`); empty without SASS.
        assemble_seconds: wall time of the assembler alone (not of nvdisasm).
        toolchain: :func:`toolchain_version` of the backend used.
    """

    cubin: bytes = field(repr=False)
    target: str
    kernel: str
    registers: int
    shared_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    stack_frame_bytes: int
    warnings: tuple[str, ...]
    sass: str | None = field(repr=False)
    opcodes: dict[str, int]
    assemble_seconds: float
    toolchain: str

    def count(self, prefix: str) -> int:
        """Number of SASS instructions in the ``prefix`` family (:func:`count_opcodes`)."""
        return count_opcodes(self.opcodes, prefix)


@functools.cache
def _tool(name: str) -> str:
    """Path of an NVIDIA binary utility from the pip wheels.

    Raises:
        AssembleError: when cuda-pathfinder is missing or finds no such tool.
    """
    try:
        from cuda.pathfinder import find_nvidia_binary_utility
    except ImportError as e:
        raise AssembleError("cuda-pathfinder is not installed (pip install 'ptxgen[cuda]')") from e
    path = find_nvidia_binary_utility(name)
    if path is None:
        raise AssembleError(f"{name} not found by cuda.pathfinder: install the NVIDIA wheels "
                            "(pip install 'ptxgen[cuda]')")
    return path


@functools.cache
def toolchain_version(backend: str = "ptxas") -> str:
    """Tool, version and code-changing flags, e.g. ``ptxas cuda_13.5.r13.5/compiler.39125733_0 -O3``.

    Part of the cubin cache key.  Cached for the life of the process.

    Raises:
        ValueError: for an unknown backend.
        AssembleError: when the tool cannot be found.
    """
    if backend == "ptxas":
        out = subprocess.run([_tool("ptxas"), "--version"], capture_output=True, text=True, check=True).stdout
        version = out.strip().splitlines()[-1].removeprefix("Build ").strip()
    elif backend == "nvjitlink":
        major, minor = _nvjitlink().version()
        version = f"{major}.{minor}"
    else:
        raise ValueError(f"backend={backend!r}: must be one of {BACKENDS}")
    return " ".join((backend, version, *OPT_FLAGS))


def _nvjitlink() -> ModuleType:
    """``cuda.bindings.nvjitlink``, imported on first use (an optional dependency).

    Raises:
        AssembleError: when cuda-bindings is not installed.
    """
    try:
        from cuda.bindings import nvjitlink
    except ImportError as e:
        raise AssembleError("cuda-bindings is not installed (pip install 'ptxgen[cuda]')") from e
    return nvjitlink


def _run_ptxas(ptx: str, target: str) -> tuple[bytes | None, str]:
    """Assemble with ptxas in a temporary directory; returns (cubin or None on failure, log)."""
    with tempfile.TemporaryDirectory(prefix="ptxgen-") as tmp:
        work = Path(tmp)
        (work / "kernel.ptx").write_text(ptx)
        proc = subprocess.run(
            [_tool("ptxas"), f"-arch={target}", *OPT_FLAGS, *PTXAS_REPORT_FLAGS, "kernel.ptx", "-o", "kernel.cubin"],
            cwd=work, capture_output=True, text=True, check=False)
        log = proc.stdout + proc.stderr
        if proc.returncode != 0:
            return None, log or f"ptxas exited with status {proc.returncode}"
        return (work / "kernel.cubin").read_bytes(), log


def _read_log(size_of: Callable[[int], int], read: Callable[[int, bytearray], None], handle: int) -> str:
    """One nvJitLink log (error or info) as text."""
    buf = bytearray(size_of(handle))
    read(handle, buf)
    return buf.rstrip(b"\0").decode(errors="replace")


def _run_nvjitlink(ptx: str, target: str) -> tuple[bytes | None, str]:
    """Assemble and link with nvJitLink; returns (cubin or None on failure, error log + info log).

    PTX errors surface at ``add_data``; link errors at ``complete``.
    """
    nj = _nvjitlink()
    options = [f"-arch={target}", *OPT_FLAGS, "-verbose", "-Xptxas=--warn-on-spills"]
    handle = nj.create(len(options), options)
    try:
        data = ptx.encode()
        try:
            nj.add_data(handle, nj.InputType.PTX, data, len(data), "kernel.ptx")
            nj.complete(handle)
        except nj.nvJitLinkError as e:
            errors = _read_log(nj.get_error_log_size, nj.get_error_log, handle)
            return None, f"{errors}\n{_read_log(nj.get_info_log_size, nj.get_info_log, handle)}\n{e}"
        cubin = bytearray(nj.get_linked_cubin_size(handle))
        nj.get_linked_cubin(handle, cubin)
        return bytes(cubin), _read_log(nj.get_info_log_size, nj.get_info_log, handle)
    finally:
        nj.destroy(handle)


_BACKEND_RUNNERS = {"ptxas": _run_ptxas, "nvjitlink": _run_nvjitlink}


def _source_line(ptx: str, line: int | None) -> str | None:
    """Text of 1-based PTX line ``line``, or None when there is no such line."""
    lines = ptx.splitlines()
    return lines[line - 1] if line is not None and 1 <= line <= len(lines) else None


def _error(headline: str, cause: Diagnostic | None, related: list[Diagnostic], log: str, ptx: str) -> AssembleError:
    """An AssembleError: ``headline at line N: message``, the PTX line, then the related log lines."""
    line = cause.line if cause else None
    source = _source_line(ptx, line)
    parts = [headline + (f" at line {line}" if line else "") + (f": {cause.message}" if cause else "")]
    if source is not None:
        parts.append(f"    {line} | {source.strip()}")
    parts += [f"  {d.text}" for d in related] or [f"  {log.strip()}"]
    return AssembleError("\n".join(parts), log=log, line=line, source_line=source)


def check_log(ptx: str, log: str, *, failed: bool = False, who: str = "ptxas") -> tuple[Diagnostic, ...]:
    """Judge an assembler log: raise for errors and wgmma serialization, else return its diagnostics.

    Args:
        ptx: the PTX that was assembled (to quote the line a diagnostic points at).
        log: the assembler's full output.
        failed: the assembler exited with an error status or produced no cubin.
        who: names the assembler in the message, e.g. ``"ptxas (sm_90a)"``.

    Raises:
        AssembleError: when ``failed`` or the log holds an error/fatal line
            (message: ``<who> rejected the PTX at line N: <text>``, the PTX line,
            every error line), or a serialization diagnostic of any severity
            (``<who> serialized the wgmma pipeline (C75xx) at line N: ...``).
    """
    diagnostics = parse_diagnostics(log)
    errors = [d for d in diagnostics if d.is_error]
    if failed or errors:
        cause = next((d for d in errors if d.line is not None), errors[0] if errors else None)
        raise _error(f"{who} rejected the PTX", cause, errors, log, ptx)
    serialized = [d for d in diagnostics if d.is_serialization]
    if serialized:
        first = serialized[0]
        raise _error(f"{who} serialized the wgmma pipeline ({first.code})", first, serialized, log, ptx)
    return diagnostics


def disassemble(cubin: bytes) -> str:
    """SASS text of a cubin: ``nvdisasm -c`` (code sections only).

    Raises:
        AssembleError: when nvdisasm is missing or fails.
    """
    with tempfile.TemporaryDirectory(prefix="ptxgen-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        proc = subprocess.run([_tool("nvdisasm"), "-c", str(path)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise AssembleError(f"nvdisasm failed with status {proc.returncode}: {proc.stderr.strip()}", log=proc.stderr)
    return proc.stdout


def compile_ptx(ptx: str, target: str, backend: str = "ptxas") -> bytes:
    """The cubin of ``ptx`` for ``target`` with ``backend``, as the runtime loads it: errors raise, every other
    diagnostic (spills, wgmma serialization) is left to :func:`assemble`'s checks.

    Raises:
        AssembleError: the assembler rejected the PTX or is not installed.
    """
    cubin, log = _BACKEND_RUNNERS[backend](ptx, target)
    if cubin is None:
        check_log(ptx, log, failed=True, who=f"{backend} ({target})")
    return cubin


def assemble(ptx: str, target: str, *, sass: bool = False, backend: str = "ptxas") -> AssembleResult:
    """Assemble one PTX module holding one ``.entry`` for ``target``.

    ptxas runs as ``ptxas -arch=<target> -O3 -v --warn-on-spills``; nvJitLink
    with ``-arch=<target> -O3 -verbose -Xptxas=--warn-on-spills``.

    Args:
        ptx: the module text (``.version``/``.target``/``.address_size`` header included).
        target: ``"sm_100a"`` or ``"sm_90a"``.
        sass: also disassemble with nvdisasm and fill ``sass`` and ``opcodes``.
        backend: ``"ptxas"`` (default) or ``"nvjitlink"``.

    Raises:
        ValueError: for an unknown target or backend.
        AssembleError: when the assembler rejects the PTX (message: the
            assembler's text, the 1-based PTX line and that line's text), when
            it serializes wgmma (see :data:`SERIALIZATION_CODES`), when the
            module does not hold exactly one entry, or when a tool is missing.
    """
    if target not in TARGETS:
        raise ValueError(f"target={target!r}: must be one of {TARGETS}")
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}: must be one of {BACKENDS}")
    toolchain = toolchain_version(backend)
    started = time.perf_counter()
    cubin, log = _BACKEND_RUNNERS[backend](ptx, target)
    seconds = time.perf_counter() - started

    diagnostics = check_log(ptx, log, failed=cubin is None, who=f"{backend} ({target})")
    assert cubin is not None  # check_log raised otherwise
    resources = parse_resources(log)
    sass_text = disassemble(cubin) if sass else None
    return AssembleResult(
        cubin=cubin,
        target=target,
        kernel=resources.kernel,
        registers=resources.registers,
        shared_bytes=resources.shared_bytes,
        spill_store_bytes=resources.spill_store_bytes,
        spill_load_bytes=resources.spill_load_bytes,
        stack_frame_bytes=resources.stack_frame_bytes,
        warnings=tuple(d.text for d in diagnostics if d.is_warning),
        sass=sass_text,
        opcodes=opcode_histogram(sass_text) if sass_text is not None else {},
        assemble_seconds=seconds,
        toolchain=toolchain,
    )
