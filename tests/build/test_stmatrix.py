"""``epilogue.stmatrix`` (sm_90a): the CD staging written by ``stmatrix.sync.aligned.m8n8.x4`` instead of ``st.shared.b32``.

One ``StMatrix`` stores values 8q..8q+7 of a warp's wgmma fragment: four 8x8 matrices (rows 0-7 and 8-15 of the
warp's 16 rows, columns 16q..16q+7 and 16q+8..16q+15); lane l supplies the address of row l % 8 of matrix l // 8.
Checked here: the config rules, the IR (a quarter of the staging stores), the simulator's reading of the
instruction (results on several tiles, odd N, with the SwiGLU epilogue and the overlapped epilogue), bank
conflicts of the lane addresses, and planted bugs.  The PTX-vs-IR differential covers the variants
(tests/check/ptx/test_ptx_vs_ir.py, ``STMATRIX``); a planted emitter bug is in tests/check/ptx/test_planted_emitter.py.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from tests.build.test_epilogue_banks import matrix_wavefronts

from ptxgen.builders.kernel import build_kernel
from ptxgen.config import load_config
from ptxgen.errors import ConfigError, SimError
from ptxgen.ir import ops as O
from ptxgen.ir.expr import Bin, Const, Sreg
from ptxgen.plan import make_plan
from ptxgen.check.sim import default_shapes, simulate
from ptxgen.ir.rewrite import rewrite
from ptxgen.check.verify import verify

ON = {"epilogue.stmatrix": True}


def with_stmatrix(name: str, **changes):
    return load_config(name).replace(**ON, **changes, name=f"{name}_sm")


def kernel(name: str = "h100_128x256", **changes):
    return build_kernel(make_plan(with_stmatrix(name, **changes)))


def staging_stores(k, kind):
    return [op for op in O.walk(k.body) if isinstance(op, kind)]


@pytest.mark.parametrize("name, changes, message", [
    ("h100_128x128", {}, "epilogue.stmatrix=True: stages D in shared memory: needs epilogue.store=tma"),
    ("h100_128x144", {}, "epilogue.stmatrix=True: one stmatrix.x4 covers 16 columns of a warp's 16 rows; "
                         "epilogue.store_block_n=72 must be a multiple of 16"),
    ("level9", {}, "epilogue.stmatrix=True: sm_90a register fragments only: the sm_100a epilogue reads TMEM"),
])
def test_refusals_name_the_field(name, changes, message):
    with pytest.raises(ConfigError) as err:
        with_stmatrix(name, **changes)
    assert message in str(err.value)


def test_a_quarter_of_the_staging_stores():
    plain = build_kernel(make_plan(load_config("h100_128x256").replace(**{"epilogue.stmatrix": False})))
    k = kernel()
    assert len(staging_stores(k, O.StShared16)) == 0
    assert 4 * len(staging_stores(k, O.StMatrix)) == len(staging_stores(plain, O.StShared16)) == 64
    assert all(op.idx == tuple(range(op.idx[0], op.idx[0] + 8)) and op.idx[0] % 8 == 0
               for op in staging_stores(k, O.StMatrix))


@pytest.mark.sim
# the plain 128x256 and 256x128 tiles in the slow tier: the pair and the overlapped 128x256 stage through stmatrix too
@pytest.mark.parametrize("name, changes", [pytest.param("h100_128x256", {}, marks=pytest.mark.slow),
                                           pytest.param("h100_256x128", {}, marks=pytest.mark.slow),
                                           ("dual_h100_128x128_c2", {}), ("h100_128x256", {"epilogue.overlap": True})],
                         ids=["128x256", "256x128", "dual_c2", "128x256_overlap"])
def test_stmatrix_kernels_verify_and_simulate(name, changes):
    """Several tiles per CTA, and an N that is not a multiple of 8 (those tiles store directly, not through smem)."""
    k = kernel(name, **changes)
    verify(k)
    for shape in (default_shapes(k)[2], (300, 262, 200)):
        simulate(k, *shape, policy="latest")
        simulate(k, *shape, seed=1)


@pytest.mark.parametrize("name", ["h100_128x256", "h100_256x128", "dual_h100_128x128_c2"])
def test_swizzled_staging_is_conflict_free(name):
    assert max(matrix_wavefronts(op) for op in staging_stores(kernel(name), O.StMatrix)) == 1


def test_unswizzled_128_byte_rows_conflict_8_way():
    """The check can fail: 64-column rows without the swizzle put a matrix's 8 rows on the same 4 banks."""
    k = kernel("h100_128x256", **{"epilogue.swizzle": "none"})
    assert max(matrix_wavefronts(op) for op in staging_stores(k, O.StMatrix)) == 8


def _rows_from_the_wrong_lane_bits():
    """Lane l addresses row l // 4 (the fragment's row) instead of row l % 8 of its matrix."""
    good = Bin("mod", Sreg("lane"), Const(8))

    def swap(e):
        if e == good:
            return Bin("div", Sreg("lane"), Const(4))
        if isinstance(e, Bin):
            return Bin(e.op, swap(e.a), swap(e.b))
        return e
    k = kernel()
    out = rewrite(k, lambda op: replace(op, addr=swap(op.addr)) if isinstance(op, O.StMatrix) else None)
    assert out != k
    return out


def _matrices_of_the_wrong_columns():
    """The second pair of matrices (columns 16q+8..) stored at the first pair's columns."""
    k = kernel()
    out = rewrite(k, lambda op: replace(op, addr=Bin("sub", op.addr, Bin("mul", Bin("div", Sreg("lane"), Const(16)),
                                                                          Const(16))))
                  if isinstance(op, O.StMatrix) else None)
    assert out != k
    return out


@pytest.mark.sim
@pytest.mark.parametrize("make", [_rows_from_the_wrong_lane_bits, _matrices_of_the_wrong_columns])
def test_planted_stmatrix_bug_is_caught(make):
    k = make()
    for s in (0, 1):
        with pytest.raises(SimError, match=r"^(wrong result|read before write)"):
            simulate(k, *default_shapes(k)[2], seed=s)
