"""The MXFP8 kernels' emitted PTX against their IR (the differential, which covers every shipped config:
test_planted_emitter.py's unpatched sweep, test_ptx_vs_ir.py's drawn cases): the MMA thread's trace holds the scale
copies and four ``.kind::mxf8f6f4`` MMAs per k-block, each with its own idesc (scale-factor IDs 0-3); a PTX text whose
k-step idesc names another ID differs from the IR."""

from __future__ import annotations

import re

import pytest

from ptxgen.build import build
from ptxgen.check.ptx import interp as ptxinterp
from ptxgen.check.ptx.diff import Launch, ir_effects, ptx_effects, role_ranges
from ptxgen.descriptors import UMMA_IDESC_MXF8F6F4

MX = ("fp8_sm100_128x128", "fp8_sm100_256x128")


def _mma_thread_effects(kernel, text: str):
    g = kernel.launch.grid
    m, n, k = g.tile_rows * 2, g.tile_cols * 2, kernel.block_k * (kernel.stages + 2)
    lo = next(lo for name, lo, _ in role_ranges(kernel) if "mma" in name)
    launch = Launch(m, n, k, g.grid_x(m, n, kernel.cluster_size), 0, lo * 32)
    return ptx_effects(ptxinterp.parse(text), kernel, launch), ir_effects(kernel, launch)


@pytest.mark.parametrize("name", MX)
def test_mma_trace_holds_copies_and_mxf8f6f4_mmas(name):
    res = build(name)
    ptx, ir = _mma_thread_effects(res.kernel, res.ptx)
    assert ptx == ir
    mmas = [e for e in ptx if e[0] == "tcgen05.mma.block_scale"]
    assert mmas and len(mmas) % 4 == 0  # four per k-block
    assert {e[1:4] for e in mmas} == {(res.kernel.cta_group, "mxf8f6f4", "block32")}
    ids = [UMMA_IDESC_MXF8F6F4.decode(e[7])["a_sf_id"] for e in mmas]
    assert ids[:8] == [0, 1, 2, 3] * 2
    assert sum(e[0] == "tcgen05.cp" for e in ptx) == 2 * len(mmas) // 4


@pytest.mark.parametrize("name", MX)
def test_planted_wrong_scale_factor_id_in_the_ptx_differs(name):
    """The k-step-2 idesc constant carries ID 0 instead of 2: the PTX's MMA effects no longer equal the IR's."""
    res = build(name)
    want = res.plan.mma.step_idesc[2]
    bad, count = re.subn(rf"(mov\.u32 %idesc_2, ){want:#x};", lambda m: f"{m.group(1)}{want & ~(3 << 29 | 3 << 4):#x};",
                         res.ptx)
    assert count == 1
    ptx, ir = _mma_thread_effects(res.kernel, bad)
    assert ptx != ir
