"""The FP8 pair's per-tile variants (docs/grouped.md, "The FP8 per-tile cost"): two CD staging buffers per consumer
warpgroup under the separated shared-memory layout (``bench/configs/grouped_contiguous_fp8_h100_128x256_c2_e2``),
the next unit's table words read one unit ahead (``schedule.table_lookahead``, ``..._c2_la``) and both
(``..._c2_e2la``).

The simulator runs each on the pair tables of tests/check/test_grouped_pair.py (same-expert and straddling pairs,
padding, an odd m-block count, an empty expert; K = 272) to the recipe's reference with every padding row untouched;
the verifier and the PTX-vs-IR differential accept them.  Planted bugs: the lookahead one unit too far (wrong
result) and without its clamp to the last unit (a remainder by an empty swizzle group).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ptxgen.build import build, load_config
from ptxgen.builders import grouped as grouped_builder
from ptxgen.builders.kernel import build_kernel
from ptxgen.check.numerics import POISON
from ptxgen.check.ptx import interp as ptxinterp
from ptxgen.check.ptx.diff import sweep_threads
from ptxgen.check.sim.run import simulate_grouped
from ptxgen.check.verify import verify
from ptxgen.errors import ConfigError, SimError
from ptxgen.ir import Var
from ptxgen.plan import make_plan

pytestmark = pytest.mark.sim

CONFIGS = Path(__file__).resolve().parents[2] / "bench" / "configs"
E2, LA, E2LA = (str(CONFIGS / f"grouped_contiguous_fp8_h100_128x256_c2_{v}.yaml") for v in ("e2", "la", "e2la"))
#: the pair tables of test_grouped_pair.py: 9 m-blocks of 128 rows, straddling pairs, an empty group
ROWS = [300, 0, 129, 1, 260]


def small(path: str):
    return load_config(path).replace(**{"schedule.group": 2})


def run(kernel):
    res = simulate_grouped(kernel, n=200, k=272, group_rows=ROWS, seed=3, num_sms=4)
    untouched = np.isnan(res.ref).all(axis=1)
    assert res.rel_fro < 1e-2 and res.max_rel_err < 2e-2 and untouched.sum() == 9 * 128 - sum(ROWS)
    assert (res.d_bits[untouched] == POISON).all()


@pytest.mark.parametrize("path", [E2, LA, E2LA], ids=["e2", "la", "e2la"])
def test_simulator_runs_the_variants_to_the_recipe_reference(path):
    run(build_kernel(make_plan(small(path))))


def test_single_cta_lookahead_runs_to_the_reference():
    """The single-CTA unit's one word read ahead (the ``_tma`` tile with ``table_lookahead``)."""
    cfg = load_config(str(CONFIGS / "grouped_contiguous_fp8_h100_128x128_tma.yaml")).replace(
        **{"schedule.table_lookahead": True, "schedule.group": 2})
    run(build_kernel(make_plan(cfg)))


@pytest.mark.parametrize("path", [E2, E2LA], ids=["e2", "e2la"])
def test_verifier_and_ptx_differential_accept_the_variants(path):
    res = build(load_config(path))
    verify(res.kernel)
    assert sweep_threads(res.kernel, ptxinterp.parse(res.ptx)) is None


def test_separated_layout_buys_the_second_cd_buffer():
    """Separated, a stage's scale_b slot is 128 B (interleaved: 512 B, rounding the stage to 1024-byte atoms): 4
    operand stages and 2 x 2 CD buffers of 8 KiB fit (232016 B <= 232448 B); interleaved they do not."""
    plan = make_plan(load_config(E2))
    assert plan.loads.operand("scale_b").region.stride == 128 and plan.smem.cd.count == 4
    assert plan.smem.bytes == 232016
    with pytest.raises(ConfigError, match="shared memory"):
        make_plan(load_config(E2).replace(**{"smem.layout": "interleaved"}))


@pytest.mark.parametrize("change", [{"schedule.expert_window": 4}, {"schedule.grouped": "masked"}])
def test_lookahead_needs_the_plain_contiguous_walk(change):
    with pytest.raises(ConfigError, match="schedule.table_lookahead=True: needs schedule.grouped=contiguous"):
        load_config(LA).replace(**change)


# ------------------------------------------------------------------ planted bugs


def test_planted_lookahead_one_unit_too_far(monkeypatch):
    """Each unit reads the words of the unit after the CTA's next one: units take another pair's groups."""
    original = grouped_builder.GroupedTileScheduler.lookahead
    monkeypatch.setattr(grouped_builder.GroupedTileScheduler, "lookahead",
                        lambda self, tile: original(self, tile + Var("num_clusters")))
    with pytest.raises(SimError):
        run(build_kernel(make_plan(small(LA))))


def test_planted_lookahead_without_its_clamp(monkeypatch):
    """The unit after the CTA's last one read unclamped: it lies past the walk, in a swizzle group of no m-blocks
    (``gm`` = 0: the remainder by it has no value; PTX ISA "rem": undefined, a wild table index on the GPU)."""
    original, clamp = grouped_builder.GroupedTileScheduler.lookahead, grouped_builder.emin

    def planted(self, tile):
        calls = []

        def unit_unclamped(a, b):  # lookahead's first emin is the unit's clamp; the pair's row clamp stays
            calls.append(a)
            return a if len(calls) == 1 else clamp(a, b)
        monkeypatch.setattr(grouped_builder, "emin", unit_unclamped)
        try:
            return original(self, tile)
        finally:
            monkeypatch.setattr(grouped_builder, "emin", clamp)
    monkeypatch.setattr(grouped_builder.GroupedTileScheduler, "lookahead", planted)
    with pytest.raises(ZeroDivisionError):
        run(build_kernel(make_plan(small(LA))))
