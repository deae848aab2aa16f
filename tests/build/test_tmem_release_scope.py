"""A CTA pair's epilogues hand the leader's MMA its TMEM back at cluster scope (sm_100a, cta_group::2)."""

import pytest

from ptxgen.build import build
from ptxgen.ir.ops import MbarrierArrive, MbarrierWait
from ptxgen.ir.rewrite import rewrite


def _tmem_empty_ops(kernel):
    seen = []
    rewrite(kernel, lambda op: seen.append(op) if isinstance(op, (MbarrierArrive, MbarrierWait))
            and op.bar.name == "tmem_empty" else None)
    return seen


@pytest.mark.parametrize("name, scope", [
    ("level6", "cta"),  # one writing CTA: the leader releases its own stage
    ("level7", "cluster"), ("level8", "cluster"), ("level9", "cluster"),
    ("dual_sm100_256x128", "cluster"), ("nvfp4_dual_256x128", "cluster"),
    ("nvfp4_dual_128x128", "cta"),  # one CTA
])
def test_tmem_empty_arrives_and_waits_use_the_pair_scope(name, scope):
    res = build(name)
    ops = _tmem_empty_ops(res.kernel)
    assert {type(op) for op in ops} == {MbarrierArrive, MbarrierWait}
    assert {op.scope for op in ops} == {scope}
    if scope == "cluster":
        assert "mbarrier.arrive.release.cluster.shared::cluster.b64" in res.ptx
        assert "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64" in res.ptx
