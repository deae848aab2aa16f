"""CTAs sharing an SM fit their TMEM columns in 512 whatever per-CTA reserve the driver takes (sm_100a)."""

import pytest

from ptxgen.build import build
from ptxgen.hw import SM_MAX_THREADS, SM_SMEM_BYTES, TMEM_COLUMNS
from ptxgen.shipped import shipped_configs

SM100 = [c for c in shipped_configs() if build(c).plan.arch == "sm_100a"]


@pytest.mark.parametrize("name", SM100)
def test_tmem_fits_even_without_the_drivers_reserve(name):
    plan = build(name).plan
    most = min(SM_SMEM_BYTES // plan.smem.bytes, SM_MAX_THREADS // plan.roles.threads)  # reserve 0: the worst case
    assert most * plan.tmem.cols <= TMEM_COLUMNS, (most, plan.tmem.cols)
    assert plan.smem.ctas_per_sm >= 1
