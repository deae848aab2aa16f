"""Emitters: Kernel IR -> PTX text, per arch.

``emit(kernel)`` lowers the body with the op table of the kernel's arch (the
shared mbarrier/TMA/sync families plus ``tcgen05`` on sm_100a or ``wgmma`` on
sm_90a) and fills the Jinja2 skeleton (header, ``.entry`` with its
parameters, register declarations).  Every IR op leaves a ``//`` line naming
it, so the PTX reads against the IR top to bottom.
"""

from __future__ import annotations

from functools import lru_cache

import jinja2

from .common import COMMON
from .core import SREG_REGS, Lowering
from .tcgen05 import TCGEN05
from .wgmma import WGMMA

TABLES = {"sm_100a": {**COMMON, **TCGEN05}, "sm_90a": {**COMMON, **WGMMA}}
PTX_VERSION = "8.8"


@lru_cache(maxsize=1)
def _template() -> jinja2.Template:
    env = jinja2.Environment(loader=jinja2.PackageLoader("emitters", "templates"), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True)
    return env.get_template("kernel.ptx.j2")


def emit(kernel) -> str:
    """PTX text of ``kernel`` (a :class:`ptxgen.ir.Kernel`) for its plan's arch."""
    from ptxgen import __version__

    plan = kernel.plan
    lw = Lowering(plan=plan, table=TABLES[plan.arch])
    lw.body(kernel.body)
    return _template().render(
        kernel=plan.kernel, name=plan.cfg.name, target=plan.arch, version=__version__, plan=plan,
        maxnreg=plan.maxnreg if plan.arch == "sm_90a" else 0,
        layout=_layout_lines(plan), decls=_decls(lw), body="\n".join(lw.lines),
    )


def _decls(lw: Lowering) -> list[str]:
    named = sorted({*(r[1:] for r in SREG_REGS.values()), "m", "n", "k", *lw.vars})
    out = [f".reg .b32 %{name};" for name in named]
    out += [".reg .b64 %d_ptr, %tmap_a, %tmap_b, %tmap_d;"]
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


def _layout_lines(plan) -> list[str]:
    lines = []
    for region in (plan.cd, plan.a, plan.b):
        if region.count:
            lines.append(f"{region.name:<10} [{region.offset:>6}, {region.offset + region.stride * region.count:>6})  "
                         f"{region.count} x {region.stride} B stride")
    for spec in plan.barrier_specs():
        lines.append(f"{spec.name + '[]':<10} [{spec.offset:>6}, {spec.offset + 8 * spec.num:>6})  "
                     f"{spec.num} mbarriers, init {'/'.join(map(str, spec.init))}, tx {spec.tx_bytes} B/phase")
    lines.append(f"{'tmem slot':<10} [{plan.tmem_slot:>6}, {plan.tmem_slot + 4:>6})")
    return lines
