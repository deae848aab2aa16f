"""Emitters: Kernel IR -> PTX text, per arch.

``emit(kernel)`` lowers the body with the op table of the kernel's arch (the
shared mbarrier/TMA/sync families plus ``tcgen05`` on sm_100a or ``wgmma`` on
sm_90a) and fills the Jinja2 skeleton (header, ``.entry`` with its
parameters, register declarations).  Every IR op leaves a ``//`` line naming
it, so the PTX reads against the IR top to bottom.

The emitters read only the :class:`ptxgen.ir.Kernel` (its resources and ops):
never the plan or the config.  ``.version`` and ``.target`` are filled from the
kernel's target here (:data:`PTX_ISA_VERSION`).
"""

from __future__ import annotations

from functools import lru_cache

import jinja2

from ptxgen.ir import ops

from ptxgen.ir.legalize import legalize

from .common import COMMON, watchdog_drain
from .core import SREG_REGS, Lowering
from .tcgen05 import TCGEN05
from .wgmma import WGMMA

TABLES = {"sm_100a": {**COMMON, **TCGEN05}, "sm_90a": {**COMMON, **WGMMA}}
#: PTX ISA version per target: tcgen05 and the sm_100a target need ISA 8.6+, 8.8 is what the CUDA 12.9+/13
#: assemblers accept for both (PTX ISA "Release notes"); sm_90a kernels use the same version for one toolchain story.
PTX_ISA_VERSION = {"sm_100a": "8.8", "sm_90a": "8.8"}


@lru_cache(maxsize=1)
def _template() -> jinja2.Template:
    env = jinja2.Environment(loader=jinja2.PackageLoader("emitters", "templates"), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True)
    return env.get_template("kernel.ptx.j2")


def emit(kernel) -> str:
    """PTX text of ``kernel`` (a :class:`ptxgen.ir.Kernel`) for its target.

    Raises NotImplementedError when an op has no lowering on the kernel's target.
    """
    kernel = legalize(kernel)
    lw = Lowering(kernel=kernel, table=TABLES[kernel.arch], hoist_bases=hoist_bases(kernel))
    lw.body(kernel.body)
    if kernel.watchdog_ns:
        watchdog_drain(lw)
    return _template().render(
        k=kernel, ptx_version=PTX_ISA_VERSION[kernel.arch],
        tensor_maps=[n for n, kind in kernel.params if kind == "tensor_map"],
        scalars=sorted(((n, kind) for n, kind in kernel.params if kind != "tensor_map"), key=lambda p: p[1] != "u32"),
        layout=_layout_lines(kernel), decls=_decls(lw), body="\n".join(lw.hoisted_lines() + lw.lines),
    )


def hoist_bases(kernel) -> bool:
    """Whether the barrier-array and smem-region bases go into hoisted registers (``%bar_full``, ``%smem_a``).

    Constants (``%idesc``, ``%desc_hi``, ``%true``) are always hoisted.  The bases only on sm_100a kernels
    whose epilogue goes through a TMA store (level4-9), where it costs no register and saves SASS
    instructions.  Measured with ptxas (bench/ptx_stats.py; docs/performance.md, "Lean PTX"), the bases stay in
    place (``%smem_base + offset`` at each use, which ptxas rematerializes) where hoisting them hurt:
    kernels that store D straight from registers (level1-3: 52 -> 54/54/53 registers per thread, ptxas
    keeps the hoisted bases live across the per-element store epilogue) and sm_90a (h100_256x128: ptxas
    moved ~50 uniform-datapath instructions to the vector datapath).
    """
    return kernel.arch == "sm_100a" and any(isinstance(op, ops.TmaStore) for op in ops.walk(kernel.body))


def _decls(lw: Lowering) -> list[str]:
    params = lw.kernel.params
    u32 = [n for n, kind in params if kind == "u32"]
    b64 = [n for n, kind in params if kind == "u64"] + [f"tmap_{n[len('tmap_'):]}" for n, kind in params if kind == "tensor_map"]
    hoisted = lw.hoisted_names - lw.hoisted_pred
    clash = (hoisted | lw.hoisted_pred) & ({r[1:] for r in SREG_REGS.values()} | set(u32) | lw.vars)
    if clash:
        raise NotImplementedError(f"hoisted register name(s) {sorted(clash)} clash with IR variables or parameters")
    named = sorted({*(r[1:] for r in SREG_REGS.values()), *u32, *lw.vars, *hoisted})
    out = [f".reg .b32 %{name};" for name in named]
    out += [f".reg .pred %{name};" for name in sorted(lw.hoisted_pred)]
    out += [".reg .b64 " + ", ".join(f"%{n}" for n in b64) + ";"]
    if lw.n_tmp:
        out.append(f".reg .b32 %x<{lw.n_tmp + 1}>;")
    if lw.n_tmp64:
        out.append(f".reg .b64 %xd<{lw.n_tmp64 + 1}>;")
    if lw.n_tmp16:
        out.append(f".reg .b16 %xh<{lw.n_tmp16 + 1}>;")
    if lw.n_pred:
        out.append(f".reg .pred %p<{lw.n_pred + 1}>;")
    for name, (ptype, length) in sorted(lw.arrays.items()):
        out.append(f".reg {ptype} %{name}_<{length}>;")
    return out


def _layout_lines(kernel) -> list[str]:
    lines = []
    for region in sorted(kernel.regions, key=lambda r: r.offset):
        if region.count:
            lines.append(f"{region.name:<10} [{region.offset:>6}, {region.end:>6})  "
                         f"{region.count} x {region.stride} B stride")
    for spec in kernel.barriers:
        lines.append(f"{spec.name + '[]':<10} [{spec.offset:>6}, {spec.end:>6})  "
                     f"{spec.num} mbarriers, init {'/'.join(map(str, spec.init))}, tx {spec.tx_bytes} B/phase")
    lines.append(f"{'tmem slot':<10} [{kernel.tmem_slot:>6}, {kernel.tmem_slot + 4:>6})")
    return lines
