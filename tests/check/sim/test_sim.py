"""The CPU simulator: its hardware models, and every shipped config simulated to the right answer.

Every shipped config of both targets runs three shapes (none a multiple of
the tile; rings and TMEM stages wrap; persistent CTAs loop over several
tiles) under three Hypothesis-drawn interleavings each, against the fp32 reference:
the representative configs (tests/helpers/representative.py) in the main tier, the
others in the slow tier.  Heavier sweeps (random shapes, SM counts and more
interleavings) are marked ``slow`` (``--runslow``).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ptxgen.config import load_config, shipped_configs
from ptxgen.descriptors import umma_idesc_f16, umma_smem_desc, wgmma_smem_desc
from ptxgen.errors import ShapeError, SimError
from ptxgen.ir import ops as O
from ptxgen.ir.expr import Const, Sreg, Var, eq
from ptxgen.plan import make_plan
from ptxgen.check.sim import bf16_bits_to_f32, default_shapes, f32_to_bf16_bits, round_bf16, simulate, sweep
from ptxgen.check.swizzle import box_index, kmajor_sw128_index, swizzle128
from ptxgen.check.mma import Operand, umma_operand, umma_shape, wgmma_fragment, wgmma_operand
from ptxgen.check.sim.run import ROW_MULTIPLE
from ptxgen.check.sim.sync import Mbarrier
from ptxgen.check.walker import IRFault, Program, WarpWalker
from tests.helpers.representative import shipped_params
from tests.helpers.sim_support import kernel_for

pytestmark = pytest.mark.sim

CONFIGS = shipped_configs()
SEEDS = st.integers(0, 2**32 - 1)
SLOW_INTERLEAVINGS = 8  # per shape and shipped config in the slow tier (test_more_interleavings)
SLOW_RANDOM_SHAPES = 12  # drawn shapes and SM counts per shipped config in the slow tier
BASE = 0x400


# ------------------------------------------------------------------ numerics


def test_bf16_round_to_nearest_even() -> None:
    one = 1.0
    half_ulp = 2.0**-8  # bf16 keeps 8 significant bits: ulp(1) = 2^-7
    got = round_bf16(np.array([one + half_ulp, one + 3 * half_ulp, -(one + half_ulp), 3.4e38, np.inf], np.float32))
    assert got.tolist() == [1.0, 1.0 + 2.0**-6, -1.0, np.inf, np.inf]  # bf16 max is 3.3895e38
    assert np.isnan(round_bf16(np.array([np.nan], np.float32)))[0]


@given(st.floats(-2.0**100, 2.0**100, width=32))
def test_bf16_round_is_nearest_even(x: float) -> None:
    u = int(np.array(x, np.float32).view(np.uint32))
    down, up = u >> 16, (u >> 16) + 1  # the bf16 values bracketing x (truncated, and one ulp away from zero)
    cands = {b: float(bf16_bits_to_f32(np.uint16(b))) for b in (down, up)}
    got = int(f32_to_bf16_bits(np.float32(x)))
    assert got in cands
    other = up if got == down else down
    assert abs(x - cands[got]) <= abs(x - cands[other])
    if abs(x - cands[got]) == abs(x - cands[other]):
        assert got % 2 == 0  # ties to even


# ------------------------------------------------------------------ layouts and descriptors


def test_swizzle128_xors_row_into_chunk() -> None:
    # 16-byte chunk c of 128-byte row r (within a 1024-byte atom) lands at chunk c ^ (r % 8).
    for r in range(8):
        for c in range(8):
            assert swizzle128(np.array([r * 128 + c * 16]))[0] == r * 128 + (c ^ r) * 16


def test_tma_box_and_mma_operand_layouts_agree() -> None:
    """Element (r, k) written by a 128B-swizzled TMA box is what the K-major descriptor reads at k-step k // 16."""
    rows, dst = 128, 0x2000
    values = np.arange(rows * 64, dtype=np.uint16).reshape(rows, 64)
    smem = np.zeros(0x6000, np.uint8)
    smem[box_index(BASE + dst, rows, 128, True, BASE)] = values.view(np.uint8).ravel()
    for step in range(4):
        idx = kmajor_sw128_index(BASE + dst + 32 * step, rows, 1024, BASE)
        got = smem[idx].astype(np.uint16) | (smem[idx + 1].astype(np.uint16) << 8)
        assert np.array_equal(got, values[:, 16 * step:16 * step + 16])


def test_descriptor_decoding() -> None:
    assert umma_operand(umma_smem_desc(0x8400, 0, 1024), "t", "A") == Operand(0x8400, 1024)
    assert wgmma_operand(wgmma_smem_desc(0x8400, 16, 1024), "t", "B") == Operand(0x8400, 1024)
    assert umma_shape(umma_idesc_f16(256, 128), "t") == (256, 128)
    with pytest.raises(SimError, match=r"^bad descriptor: t, operand A: .* 128B swizzle"):
        umma_operand(umma_smem_desc(0x8400, 0, 1024, swizzle="64B"), "t", "A")


def test_wgmma_fragment_layout() -> None:
    rows, cols = wgmma_fragment(256)
    for lane, i in ((0, 0), (5, 3), (31, 127), (18, 70)):
        assert rows[lane, i] == lane // 4 + 8 * ((i // 2) & 1)
        assert cols[lane, i] == 8 * (i // 4) + 2 * (lane % 4) + (i & 1)
    assert len(set(zip(rows.ravel() + 0, cols.ravel()))) == 16 * 256  # each of the warp's 16 x 256 cells once


# ------------------------------------------------------------------ mbarrier


def test_mbarrier_parity_and_tx() -> None:
    bar = Mbarrier("full[0]")
    bar.init(2, None)
    assert bar.passed(1) and not bar.passed(0)  # fresh: parity 1 passes at once
    assert not bar.arrive(1, 100, "a")
    assert not bar.complete_tx(60, 0, "tma")
    assert not bar.arrive(1, 0, "b")  # arrivals done, 40 B outstanding
    assert bar.complete_tx(40, 0, "tma")
    assert bar.passed(0) and not bar.passed(1) and bar.at_boundary()


def test_mbarrier_faults() -> None:
    bar = Mbarrier("empty[0]")
    bar.init(1, None)
    with pytest.raises(SimError, match=r"^over-arrival: 32 arrival\(s\) \(warp\) on empty\[0\], but phase 0 has only 1"):
        bar.arrive(32, 0, "warp")
    bar.arrive(1, 0, "one")
    with pytest.raises(SimError, match=r"^transaction-byte mismatch: tma delivers 16 B to empty\[0\] for phase 0"):
        bar.complete_tx(16, 0, "tma")


# ------------------------------------------------------------------ the interpreter


def _walk(body: tuple, warp: int = 0) -> list:
    plan = make_plan(load_config("level3"))
    wk = WarpWalker(Program(plan.kernel_resources(body)), ctaid=0, nctaid=2, cluster_size=2, warp=warp,
                    smem_base=BASE, params={"m": 1, "n": 1, "k": 8})
    return list(wk.run())


def test_walker_rejects_non_uniform_control() -> None:
    with pytest.raises(IRFault, match=r"If condition %lane == 0 is not uniform"):
        _walk((O.If(eq(Sreg("lane"), 0), (O.CtaSync(),)),))


def test_walker_elect_scopes_variables() -> None:
    with pytest.raises(IRFault, match=r"variable 'x' was bound inside Elect \(lane 0 only\) and is read by the whole warp"):
        _walk((O.Elect((O.Let("x", Const(1)),)), O.If(Var("x"), ())))
    events = _walk((O.Elect((O.MbarrierArrive(O.Bar("empty", Const(0))),)), O.MbarrierArrive(O.Bar("empty", Const(0)))))
    assert [e.lanes for e in events] == [1, 32]


def test_warp_collective_op_inside_elect_is_a_fault() -> None:
    with pytest.raises(IRFault, match=r"NamedBarrier id=1 threads=128 is a \.sync\.aligned warp-collective op"):
        _walk((O.Elect((O.NamedBarrier(Const(1), 128),)),))


# ------------------------------------------------------------------ shipped configs


@pytest.mark.parametrize("config", shipped_params())
@pytest.mark.parametrize("shape_index", [0, 1, 2])
@settings(max_examples=3)  # interleavings per shape; test_more_interleavings (slow) runs SLOW_INTERLEAVINGS
@given(schedule=SEEDS)
def test_shipped_config_simulates_correctly(config: str, shape_index: int, schedule: int) -> None:
    kernel = kernel_for(config)
    shape = default_shapes(kernel)[shape_index]
    r = simulate(kernel, *shape, seed=schedule % 1000, schedule_seed=schedule)
    assert r.rel_fro < 5e-3 and r.max_rel_err < 1e-2


@pytest.mark.parametrize("config", ["level9", "h100_128x256", "level1"])
def test_interleavings_differ_but_results_do_not(config: str) -> None:
    kernel = kernel_for(config)
    shape = default_shapes(kernel)[2]
    runs = [simulate(kernel, *shape, seed=7, schedule_seed=s) for s in range(4)]
    assert len({r.fingerprint for r in runs}) == 4
    for r in runs[1:]:
        assert np.array_equal(r.d_bits, runs[0].d_bits)  # fixed accumulation order: bitwise equal


@pytest.mark.parametrize("config", ["level9", "level4", "h100_256x128"])
def test_exact_integer_product(config: str) -> None:
    """Inputs in {-1, 0, 1} make every product exact in bf16: D must equal A @ B.T bit for bit."""
    kernel = kernel_for(config)
    m, n, _ = default_shapes(kernel)[2]
    k = 136
    rng = np.random.default_rng(1)
    a, b = rng.integers(-1, 2, (m, k)).astype(np.float32), rng.integers(-1, 2, (n, k)).astype(np.float32)
    r = simulate(kernel, m, n, k, a=a, b=b, schedule_seed=3)
    assert np.array_equal(r.d, a @ b.T)


def test_sweep_summary_line() -> None:
    kernel = kernel_for("level2")
    s = sweep(kernel, shapes=default_shapes(kernel)[:2], interleavings=3)
    assert s.runs == 6 and not s.faults and s.distinct == 6
    assert s.summary().startswith("simulated 2 shapes x 3 interleavings: 0 faults, max rel error ")


def test_shape_rules() -> None:
    with pytest.raises(ShapeError, match=r"k a multiple of 8"):
        simulate(kernel_for("level1"), 64, 64, 60)


def test_non_uniform_kernel_is_a_sim_fault() -> None:
    plan = make_plan(load_config("level1"))
    kernel = plan.kernel_resources((O.If(eq(Sreg("lane"), 3), (O.CtaSync(),)),))
    with pytest.raises(SimError, match=r"^If condition %lane == 3 is not uniform across the warp.s lanes "
                                       r"\(values \[0, 1\]\) \(all warps \(CTA \d+"):
        simulate(kernel, 64, 64, 64)


# ------------------------------------------------------------------ slow sweeps


@pytest.mark.slow
@pytest.mark.parametrize("config", CONFIGS)
@settings(max_examples=SLOW_RANDOM_SHAPES)
@given(data=st.data())
def test_random_shapes_and_grids(config: str, data) -> None:
    """Shapes within the kernel's rules: NVFP4 and MXFP8 take M and N in whole 128-row scale atoms, K in its k_multiple."""
    kernel = kernel_for(config)
    grid = kernel.launch.grid
    rows = ROW_MULTIPLE if load_config(config).operands in ("nvfp4", "mxfp8") else 1  # whole 128-row scale atoms
    kstep = kernel.launch.k_multiple
    m = rows * data.draw(st.integers(1, 3 * grid.tile_rows // rows), label="m")
    n = rows * data.draw(st.integers(1, 3 * grid.tile_cols // rows), label="n")
    k = kstep * data.draw(st.integers(1, (kernel.stages + 2) * kernel.block_k // kstep), label="k/step")
    num_sms = data.draw(st.sampled_from([2, 4, 6, 8]), label="num_sms")
    simulate(kernel, m, n, k, seed=data.draw(SEEDS, label="seed") % 1000, num_sms=num_sms,
             schedule_seed=data.draw(SEEDS, label="schedule"))


@pytest.mark.slow
@pytest.mark.parametrize("config", CONFIGS)
def test_more_interleavings(config: str) -> None:
    s = sweep(kernel_for(config), interleavings=SLOW_INTERLEAVINGS)
    assert not s.faults, s.faults[0]
    assert s.distinct == s.runs
