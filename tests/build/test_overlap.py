"""``epilogue.overlap`` (sm_90a): a tile's packed accumulator is stored while the next tile's first k-block runs.

The consumer packs a finished tile into bf16 words (``Pack16``), issues the next tile's first k-block of wgmma, and
only then stores the packed words of the previous tile (origin ``m_prev``/``n_prev``, ring position ``tc - 1``); the
CTA's last tile is stored after the tile loop.  Checked here: the config rules, the IR's order, the simulator on
shapes where CTAs walk several tiles (TMA stores and, for N not a multiple of 8, the packed direct stores), and
planted bugs the verifier or the simulator must catch.  The PTX-vs-IR differential covers the variants in
tests/check/ptx/test_ptx_vs_ir.py (``OVERLAP``), the planted emitter bugs in tests/check/ptx/test_planted_emitter.py.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from ptxgen.builders import roles
from ptxgen.builders.kernel import build_kernel
from ptxgen.config import load_config
from ptxgen.errors import ConfigError, SimError, VerifyError
from ptxgen.ir import ops as O
from ptxgen.ir.expr import Var, ne
from ptxgen.plan import make_plan
from ptxgen.check.sim import default_shapes, simulate
from ptxgen.ir.rewrite import rewrite
from ptxgen.check.verify import verify
from tests.helpers.sim_support import before_wgmma_wait

GEMM, DUAL = "h100_128x256", "dual_h100_128x128_c2"
ON = {"epilogue.overlap": True}


def overlapped(name: str, **changes):
    cfg = load_config(name).replace(**ON, **changes, name=f"{name}_ov")
    make_plan(cfg)  # the register budget is the plan's
    return cfg


def kernel(name: str = GEMM):
    return build_kernel(make_plan(overlapped(name)))


def several_tiles(k) -> tuple[int, int, int]:
    """The default shape on which each CTA (4 simulated SMs) walks 3 tiles of 2 different m-blocks."""
    return default_shapes(k)[2]


# ------------------------------------------------------------------ config


@pytest.mark.parametrize("name, changes, message", [
    ("h100_128x128_pp", {}, "epilogue.overlap=True: pingpong already overlaps one warpgroup's epilogue with the other's "
                            "mainloop; needs mma.consumers=cooperative"),
    ("h100_128x192", {"schedule.split_k": 2}, "epilogue.overlap=True: split-K's fixup reads the accumulator after the "
                                              "mainloop; needs schedule.split_k=1"),
    ("h100_128x128", {"schedule.persistent": False}, "epilogue.overlap=True: the stores overlap the CTA's next tile; "
                                                      "needs schedule.persistent=true"),
    ("level9", {}, "epilogue.overlap=True: sm_90a register accumulators only: sm_100a overlaps through "
                   "accumulator.stages and a dedicated epilogue"),
    ("h100_192x176", {"tile.block_n": 192, "epilogue.store_block_n": 64, "epilogue.swizzle": "128"},
     "epilogue.overlap=True: 96 accumulator + 48 packed registers + 16 for addresses and loop state per thread > the "
     "152 each of 3 consumer warpgroups gets (setmaxnreg)"),
])
def test_refusals_name_the_field(name, changes, message):
    with pytest.raises(ConfigError) as err:
        overlapped(name, **changes)
    assert message in str(err.value)


def test_plan_reads_the_knob():
    assert make_plan(overlapped(GEMM)).epilogue.overlap
    assert not make_plan(load_config(GEMM)).epilogue.overlap


# ------------------------------------------------------------------ the IR's order


def _consumer_tile_body(k) -> list:
    loop = next(op for op in O.walk(k.body) if isinstance(op, O.For) and op.var == "t"
                and any(isinstance(x, O.Pack16) for x in op.body))
    return list(loop.body)


def test_first_kblock_is_issued_before_the_previous_tile_is_stored():
    body = _consumer_tile_body(kernel())
    kinds = [type(op).__name__ for op in body]
    first_wgmma = kinds.index("Wgmma")
    deferred = next(i for i, op in enumerate(body) if isinstance(op, O.If) and op.cond == ne(Var("tc"), 0))
    k_loop = next(i for i, op in enumerate(body) if isinstance(op, O.For) and op.var == "kb")
    assert first_wgmma < kinds.index("WgmmaCommit") < deferred < k_loop
    stores = [op for op in O.walk(body[deferred].then) if isinstance(op, (O.StShared16, O.StMatrix))]
    assert stores and all(op.packed and op.src == "pk0" for op in stores)
    # the tile ends: wait for every wgmma, release, pack, remember the origin
    tail = kinds[k_loop + 1:]
    assert tail[0] == "WgmmaWait" and tail.index("Pack16") < tail.index("Let")
    assert [op.var for op in body[k_loop + 1:] if isinstance(op, O.Let)] == ["m_prev", "n_prev"]


def test_the_last_tile_is_stored_after_the_loop():
    consumer = next(r for op in O.walk(kernel().body) if isinstance(op, O.WarpSwitch) for r in op.roles
                    if r.name == "consumer")
    loop_at = next(i for i, op in enumerate(consumer.body) if isinstance(op, O.For))
    after = consumer.body[loop_at + 1:]
    assert isinstance(after[0], O.Let) and after[0].var == "tiles_done"
    assert isinstance(after[1], O.If) and any(isinstance(op, O.TmaStore) for op in O.walk(after[1].then))


# ------------------------------------------------------------------ simulation


@pytest.mark.sim
@pytest.mark.parametrize("name", [GEMM, DUAL] + [pytest.param(n, marks=pytest.mark.slow)  # more tile shapes: slow tier
                                  for n in ("h100_256x128", "h100_128x144", "h100_192x176")])
def test_overlapped_kernels_verify_and_simulate(name):
    """Several tiles per CTA (the deferred stores run), and an N that is not a multiple of 8 (packed direct stores)."""
    k = kernel(name)
    verify(k)
    for shape in (several_tiles(k), (300, 262, 200)):
        simulate(k, *shape, policy="latest")
        simulate(k, *shape, seed=1)


# ------------------------------------------------------------------ planted bugs


def _pack_before_wgmma_wait():
    """The pack reads the accumulator before ``wgmma.wait_group 0``: the last k-block's wgmma still writes it."""
    return rewrite(kernel(), before_wgmma_wait(O.Pack16))


def _deferred_store_reads_accumulator(mp):
    """The deferred store reads the f32 accumulator instead of the packed words: the next tile's wgmma writes it."""
    mp.setattr(roles, "PREVIOUS_TILE", replace(roles.PREVIOUS_TILE, array="acc", packed=False))
    return kernel()


def _deferred_store_at_current_origin(mp):
    """The previous tile stored at the current tile's rows (``m_row`` instead of ``m_prev``)."""
    mp.setattr(roles, "PREVIOUS_TILE", replace(roles.PREVIOUS_TILE, m_row=Var("m_row")))
    return kernel()


def _last_tile_never_stored():
    """The store after the tile loop dropped: each CTA's last tile never reaches D."""
    k = kernel()
    out = rewrite(k, lambda op: () if isinstance(op, O.If) and op.cond == ne(Var("tiles_done"), 0) else None)
    assert out != k
    return out


WGMMA_RACE = r"read while a wgmma writing it is not covered by a wgmma.wait_group"
PLANTS = [
    (lambda mp: _pack_before_wgmma_wait(), WGMMA_RACE, WGMMA_RACE),
    (_deferred_store_reads_accumulator, WGMMA_RACE, WGMMA_RACE),
    (_deferred_store_at_current_origin, None, r"^wrong result: .* m=520 n=504 k=144"),
    (lambda mp: _last_tile_never_stored(), None, r"^wrong result: .* m=520 n=504 k=144 .*relative Frobenius error nan"),
]


@pytest.mark.sim
@pytest.mark.parametrize("make, verify_msg, sim_msg", PLANTS,
                         ids=["pack_before_wait", "store_reads_acc", "store_at_current_origin", "last_tile_dropped"])
def test_planted_overlap_bug_is_caught(monkeypatch, make, verify_msg, sim_msg):
    k = make(monkeypatch)
    if verify_msg is None:
        verify(k)  # a data bug, not a protocol bug: the simulator's result check is what catches it
    else:
        with pytest.raises(VerifyError, match=verify_msg):
            verify(k)
    for s in (0, 1):
        with pytest.raises(SimError) as exc:
            simulate(k, *several_tiles(k), seed=s)
        assert re.search(sim_msg, str(exc.value)), str(exc.value)
