"""``bench/ab.py --rewrite nosetmaxnreg`` (docs/performance.md, "The cycles before the first TMA"): the IR rewrite drops
both roles' ``setmaxnreg`` and nothing else, and the tiles it was timed on assemble without it with no spills (every
warp keeps the launch's ``.maxnreg``), so the A/B times the same kernel with and without the register moves.
"""

import pytest

from ptxgen.assemble import assemble
from ptxgen.build import build, kernel_ptx
from tests.helpers.runtime import bench_module

pytest.importorskip("torch")  # bench/ab.py imports it


@pytest.mark.compile
@pytest.mark.parametrize("name", ["h100_128x64", "h100_64x128", "h100_128x80_c2n"])
def test_the_rewrite_drops_setmaxnreg_only(name):
    kernel = build(name).kernel
    ptx = kernel_ptx(kernel)
    rewritten = kernel_ptx(bench_module("ab").REWRITES["nosetmaxnreg"](kernel))
    dropped = [line for line in ptx.splitlines() if "setmaxnreg" in line or "SetMaxNReg" in line]
    assert len([line for line in dropped if line.strip().startswith("setmaxnreg.")]) == 2  # dec and inc
    assert "setmaxnreg" not in rewritten
    assert rewritten.splitlines() == [line for line in ptx.splitlines() if line not in dropped]
    result = assemble(rewritten, "sm_90a")
    assert result.spill_store_bytes == result.spill_load_bytes == 0
