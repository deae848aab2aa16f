"""The six-stage bench probes of the 128x64 and 64x128 tiles (``bench/configs/h100_*_s6.yaml``; docs/performance.md,
"Six stages for short products"): each is its shipped tile with ``pipeline.stages`` 6 and nothing else changed (the
survey compares the two as the same kernel at another stage count), and builds, verifies and assembles with 0 spills.
"""

from pathlib import Path

import pytest

from ptxgen.assemble import assemble
from ptxgen.build import build
from ptxgen.config import load_config

PROBES = Path(__file__).resolve().parents[2] / "bench" / "configs"


@pytest.mark.compile
@pytest.mark.parametrize("base", ["h100_128x64", "h100_64x128"])
def test_probe_is_its_tile_with_six_stages(base):
    probe = load_config(PROBES / f"{base}_s6.yaml")
    assert probe == load_config(base).replace(name=f"{base}_s6", **{"pipeline.stages": 6})
    res = build(probe)
    asm = assemble(res.ptx, res.plan.arch)
    assert asm.spill_store_bytes == asm.spill_load_bytes == asm.stack_frame_bytes == 0
    assert res.launch.dynamic_smem_bytes < build(base).launch.dynamic_smem_bytes
