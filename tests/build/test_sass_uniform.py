"""sm_90a: the epilogue's TMA store is issued by lane 0 (``Elect(fixed=True)``), not under ``elect.sync``.

With ``elect.sync`` there, ptxas 13 stopped treating the next tile's mainloop as warp-uniform: ``WARPSYNC.ALL``
in every k-block, the stage/descriptor arithmetic per thread instead of on the uniform datapath, and about 1.6x
the ``R2UR`` moves (docs/performance.md, "TMA-store epilogue and elect"; 0.2-0.8 % of kernel time on the H100).  The SASS is checked on the CPU
(ptxas from the PyPI wheel); the same kernel rebuilt with ``elect.sync`` shows the regression, so the check can fail.
"""

from dataclasses import replace

import pytest

from emitters import emit
from ptxgen.assemble import assemble
from ptxgen.build import build
from ptxgen.ir import ops as O
from ptxgen.ir.rewrite import rewrite


def _with_elect_sync(kernel):
    return rewrite(kernel, lambda op: replace(op, fixed=False) if isinstance(op, O.Elect) and op.fixed else None)


@pytest.mark.parametrize("name", ["h100_128x256", "h100_256x128", "dual_h100_128x128_c2"])
def test_tma_store_lane_keeps_the_mainloop_uniform(name):
    res = build(name)
    assert any(isinstance(op, O.Elect) and op.fixed for op in O.walk(res.kernel.body))
    fixed = assemble(res.ptx, "sm_90a", sass=True)
    elected = assemble(emit(_with_elect_sync(res.kernel)), "sm_90a", sass=True)
    assert fixed.count("WARPSYNC") <= 1 < 5 <= elected.count("WARPSYNC")
    assert fixed.count("R2UR") * 1.3 < elected.count("R2UR")


def test_sm100_keeps_elect_sync():
    assert not any(isinstance(op, O.Elect) and op.fixed for op in O.walk(build("level9").kernel.body))
    assert "elect.sync" in build("level9").ptx
