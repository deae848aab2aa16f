"""``ptxgen.runtime.grouped.default_config`` (no torch needed): the tile ``grouped_gemm`` takes with ``config=None``,
pinned to the H100 measurements its constants state (docs/grouped.md, "Speed")."""

from __future__ import annotations

import pytest

from ptxgen.config import load_config
from ptxgen.runtime import grouped
from ptxgen.runtime.grouped import GroupedProblem, default_config


def problem(layout: str, fp8: bool, m: int, k: int, groups: int = 8, n: int = 4096) -> GroupedProblem:
    rows = groups * m if layout == "masked" else m
    return GroupedProblem(layout, fp8, groups, rows, m, n, k)


@pytest.mark.parametrize("layout, fp8, m, k, chosen", [
    # bf16: masked by M_max (128x256 on CTA pairs past 128), contiguous always 128x256 on CTA pairs
    ("masked", False, 128, 7168, "grouped_masked_h100_128x128"),
    ("masked", False, 256, 7168, "grouped_masked_h100_128x256_c2"),
    ("contiguous", False, 29696, 2048, "grouped_contiguous_h100_128x256_c2"),
    # contiguous FP8: the 128x256 TMA-store tile on CTA pairs at every K
    ("contiguous", True, 29696, 7168, "grouped_contiguous_fp8_h100_128x256_c2"),
    ("contiguous", True, 29696, 2048, "grouped_contiguous_fp8_h100_128x256_c2"),
    # masked FP8 by M_max (64-row tile up to 64 rows), then K (M_max > 128: 128x256 on CTA pairs at K >= 4096,
    # 256x128 at smaller K)
    ("masked", True, 64, 2048, "grouped_masked_fp8_h100_64x128"),
    ("masked", True, 64, 7168, "grouped_masked_fp8_h100_64x128"),
    ("masked", True, 1, 256, "grouped_masked_fp8_h100_64x128"),
    ("masked", True, 65, 2048, "grouped_masked_fp8_h100_128x128"),
    ("masked", True, 128, 7168, "grouped_masked_fp8_h100_128x128"),
    ("masked", False, 64, 2048, "grouped_masked_h100_128x128"),  # bf16 keeps 128x128 (not measured here)
    ("masked", True, 256, 7168, "grouped_masked_fp8_h100_128x256_c2"),
    ("masked", True, 256, 2048, "grouped_masked_fp8_h100_256x128"),
    ("masked", True, 129, 256, "grouped_masked_fp8_h100_256x128"),
])
def test_default_config_by_layout_dtype_m_max_and_k(layout, fp8, m, k, chosen):
    assert default_config(problem(layout, fp8, m, k)) == chosen


def test_every_chosen_config_is_shipped_of_its_layout_and_dtype():
    for (layout, fp8), name in grouped.DEFAULT_CONFIGS.items():
        cfg = load_config(name)
        assert (cfg.schedule.grouped, cfg.operands == "fp8") == (layout, fp8)
    for name, layout in ((grouped.MASKED_WIDE, "masked"), (grouped.MASKED_FP8_WIDE, "masked"),
                         (grouped.MASKED_FP8_TALL, "masked"), (grouped.MASKED_FP8_NARROW, "masked")):
        cfg = load_config(name)
        assert cfg.schedule.grouped == layout and (cfg.operands == "fp8") == (name != grouped.MASKED_WIDE)
