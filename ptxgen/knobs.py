"""Environment knobs: every ``PTXGEN_*`` variable ptxgen reads, in one place.

=========================  =================================================================
variable                   meaning
=========================  =================================================================
``PTXGEN_CACHE_DIR``       Kernel cache directory.  Default: the platform's user cache
                           directory (``platformdirs.user_cache_dir("ptxgen")``, e.g.
                           ``~/.cache/ptxgen`` on Linux).  The tuned-config table written by
                           ``ptxgen tune`` lives there too (``tuned/``).
``PTXGEN_NO_CACHE``        ``1``/``true``/``yes``/``on``: never read or write the on-disk
                           kernel cache, nor take the images shipped in the package
                           (every process builds and JIT-compiles its kernels).
                           ``0``/``false``/``no``/``off``/empty: use it (default).
``PTXGEN_DUMP``            A directory: every kernel the runtime loads is written there as
                           ``<name>.ptx``, ``<name>.cubin`` (what was loaded), ``<name>.sass``
                           (``nvdisasm`` of that cubin) and ``<name>.json`` (launch spec).
``PTXGEN_OVERRIDE_PTX``    A PTX file, or a directory holding ``<name>.ptx`` files: load this
                           hand-edited PTX in place of the config's generated one (a file
                           replaces every kernel loaded; a directory only the names it has).
                           Refused with :class:`~ptxgen.errors.ConfigError` when its launch
                           metadata (``.target``, ``.entry`` name, parameter list,
                           ``.reqntid``, ``.reqnctapercluster``, shared memory) disagrees with
                           the config's launch spec.  A ``PTXGEN_DUMP`` of the same kernel is
                           a valid starting point.
``PTXGEN_WATCHDOG``        Hang watchdog (debugging, off by default): a budget per mbarrier wait,
                           in ns of ``%globaltimer`` (``200000000``, or with a unit: ``200ms``,
                           ``50us``, ``1s``; ``1``/``on``/``true``/``yes``: 1 s).  Kernels loaded
                           with it are built with bounded wait loops (one more ``.u64``
                           parameter); a wait that makes no progress within the budget
                           abandons the launch and ``gemm`` raises
                           :class:`~ptxgen.errors.DeadlockError` naming the barrier, its index,
                           parity, role, CTA, warp, tile and k-block.  Each call then
                           synchronizes (slow).  ``0``/``off``/empty: off (default; the
                           shipped PTX is unchanged).
``PTXGEN_JIT``             Which compiler turns the PTX into the cubin the runtime loads:
                           ``auto`` (default): ``ptxas`` when cuda.pathfinder finds it, else
                           ``driver``; ``ptxas``: the NVIDIA wheel's ptxas, a whole-program
                           compile (the one whose spill report the build checks);
                           ``driver``: the driver's JIT (``cuLinkAddData``); ``nvjitlink``.
                           The driver's JIT and nvJitLink compile relocatable code, which
                           caps every warp at ``.maxnreg`` however far ``setmaxnreg`` raises
                           it: consumers that need more registers spill.
``PTXGEN_PDL``             Programmatic dependent launch of the kernels built with
                           ``schedule.pdl`` (every shipped one): ``1``/``on``, unset or
                           empty (the default): launch them with the programmatic stream
                           serialization attribute, so a kernel launches as the previous
                           kernel's CTAs exit and its setup overlaps that kernel's
                           completion (each waits with ``griddepcontrol.wait`` before
                           touching global memory: results never change); ``0``/``off``:
                           plain stream order (the wait then returns at once).
=========================  =================================================================

When they are read: at kernel-load time (the first call that needs a given
kernel in a process) and when the cache directory is resolved, never in the
per-call launch path.  Changing a variable after a kernel was loaded affects
only kernels loaded later.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from ptxgen.errors import ConfigError

CACHE_DIR = "PTXGEN_CACHE_DIR"
NO_CACHE = "PTXGEN_NO_CACHE"
DUMP = "PTXGEN_DUMP"
OVERRIDE_PTX = "PTXGEN_OVERRIDE_PTX"
WATCHDOG = "PTXGEN_WATCHDOG"
JIT = "PTXGEN_JIT"
PDL = "PTXGEN_PDL"
JITS = ("auto", "ptxas", "driver", "nvjitlink")

#: every knob and its one-line meaning (the README's "Environment knobs" table mirrors this; a test checks it)
KNOBS: dict[str, str] = {
    CACHE_DIR: "kernel cache directory (default: platformdirs.user_cache_dir('ptxgen'), e.g. ~/.cache/ptxgen)",
    NO_CACHE: "1/true/yes/on: never read or write the on-disk kernel cache, nor take the shipped images",
    DUMP: "directory: write <name>.ptx, .cubin, .sass and .json of every kernel loaded",
    OVERRIDE_PTX: "PTX file or directory of <name>.ptx: load it in place of the generated PTX "
                  "(refused when its launch metadata differs)",
    WATCHDOG: "ns per mbarrier wait (or 200ms, 50us, 1s; on = 1s): bounded waits, a hang raises DeadlockError",
    JIT: "auto (default: ptxas if found, else driver), ptxas, driver or nvjitlink: the compiler of the PTX the "
         "runtime loads",
    PDL: "1/on/unset (default): launch kernels built with schedule.pdl with programmatic dependent launch; 0/off: "
         "in plain stream order",
}

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})


class Knobs(NamedTuple):
    """The knobs' values at one moment.

    Attributes:
        cache_dir: ``PTXGEN_CACHE_DIR`` (``~`` expanded), or None for the platform default.
        no_cache: ``PTXGEN_NO_CACHE`` is true.
        dump_dir: ``PTXGEN_DUMP``, or None.
        override_ptx: ``PTXGEN_OVERRIDE_PTX``, or None.
        watchdog_ns: ``PTXGEN_WATCHDOG`` budget in ns, 0 when off.
        jit: ``PTXGEN_JIT``: ``auto``, ``ptxas``, ``driver`` or ``nvjitlink``.
        pdl: ``PTXGEN_PDL`` (unset or empty: true).
    """

    cache_dir: Path | None = None
    no_cache: bool = False
    dump_dir: Path | None = None
    override_ptx: Path | None = None
    watchdog_ns: int = 0
    jit: str = "auto"
    pdl: bool = True


def _jit(name: str, value: str) -> str:
    """``PTXGEN_JIT``'s value (empty: ``auto``)."""
    v = value.strip().lower() or "auto"
    if v not in JITS:
        raise ConfigError(f"{name}={value!r}: must be one of {', '.join(JITS)}")
    return v


def _flag(name: str, value: str, default: bool = False) -> bool:
    """A boolean knob's value; unset or empty: ``default``."""
    v = value.strip().lower()
    if not v:
        return default
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise ConfigError(f"{name}={value!r}: must be one of 1, true, yes, on (enable) or 0, false, no, off (disable)")


_UNITS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
DEFAULT_WATCHDOG_NS = 1_000_000_000  # ``PTXGEN_WATCHDOG=on``: 1 s per wait


def _budget(name: str, value: str) -> int:
    """``PTXGEN_WATCHDOG``'s value in ns (0: off)."""
    v = value.strip().lower().replace("_", "")
    if v in _FALSE:
        return 0
    if v in _TRUE:
        return DEFAULT_WATCHDOG_NS
    num, unit = v, "ns"
    for u in ("ns", "us", "ms", "s"):
        if v.endswith(u):
            num, unit = v[: -len(u)].strip(), u
            break
    if num.isdigit() and len(num) <= 20 and 0 < int(num) * _UNITS[unit] < 2 ** 63:
        return int(num) * _UNITS[unit]
    raise ConfigError(f"{name}={value!r}: must be a positive wait budget in ns (e.g. 200000000) or with a unit "
                      "(200ms, 50us, 1s), on (1 s), or 0/off")


def _path(value: str | None) -> Path | None:
    return Path(value).expanduser() if value else None


def read(environ: Mapping[str, str] | None = None) -> Knobs:
    """Parse the knobs from ``environ`` (default ``os.environ``).

    Raises:
        ConfigError: ``PTXGEN_NO_CACHE`` is not a recognised boolean word, ``PTXGEN_WATCHDOG`` not a budget, or
            ``PTXGEN_JIT`` not a compiler, or ``PTXGEN_PDL`` not a boolean word.
    """
    env = os.environ if environ is None else environ
    return Knobs(
        cache_dir=_path(env.get(CACHE_DIR)),
        no_cache=_flag(NO_CACHE, env.get(NO_CACHE, "")),
        dump_dir=_path(env.get(DUMP)),
        override_ptx=_path(env.get(OVERRIDE_PTX)),
        watchdog_ns=_budget(WATCHDOG, env.get(WATCHDOG, "")),
        jit=_jit(JIT, env.get(JIT, "")),
        pdl=_flag(PDL, env.get(PDL, ""), default=True),
    )
