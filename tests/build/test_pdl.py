"""Programmatic dependent launch (``schedule.pdl``) in the emitted kernel, its SASS and its launch spec.

``griddepcontrol.wait`` (PTX ISA "griddepcontrol") follows the setup's CTA or cluster barrier and precedes the tile
scheduler's setup and every role; no ``.launch_dependents`` (the next grid launches as the CTAs exit); ptxas lowers
the wait to ``ACQBULK`` on both archs.  The verifier's rule (every global access after the thread's wait) is in
tests/check/sim/test_sim_planted.py.
"""

from __future__ import annotations

import pytest

from ptxgen.build import build, from_dict
from ptxgen.ir import ops as O
from tests.build.test_nvfp4_kernel import _with

CONFIGS = ("h100_128x128_c2", "h100_64x64_sk4", "grouped_masked_fp8_h100_128x256_c2", "level9", "fp8_sm100_256x128")


@pytest.mark.parametrize("name", CONFIGS)
def test_the_wait_follows_the_setup_barrier_and_nothing_triggers_early(name):
    res = build(name)
    body = res.kernel.body
    gdc = [i for i, op in enumerate(body) if isinstance(op, O.GridDepControl)]
    assert [body[i].action for i in gdc] == ["wait"]
    sync = max(i for i, op in enumerate(body[:gdc[0]]) if isinstance(op, (O.CtaSync, O.ClusterSync)))
    assert all(isinstance(op, (O.TcgenFence, O.TmemBase, O.Comment)) for op in body[sync + 1:gdc[0]])
    assert not any(isinstance(op, O.WarpSwitch) for op in body[sync + 1:gdc[0]])  # no role ran before the wait
    assert res.launch.pdl
    ptx = res.ptx
    assert ptx.count("griddepcontrol.wait;") == 1 and "launch_dependents" not in ptx
    assert ptx.index("griddepcontrol.wait;") < ptx.index("// ==== pipeline roles")


def test_pdl_off_emits_no_griddepcontrol_and_the_spec_says_so():
    res = build(from_dict(_with("h100_128x128", **{"schedule.pdl": False})))
    assert "griddepcontrol" not in res.ptx and not res.launch.pdl
    assert '"pdl": false' in res.launch.to_json()


@pytest.mark.compile
@pytest.mark.parametrize("name, arch", [("h100_128x128_c2", "sm_90a"), ("level9", "sm_100a")])
def test_sass_holds_acqbulk_and_no_preexit(name, arch):
    pytest.importorskip("cuda.pathfinder", reason="assembler wheels (pip install .[cuda]) are not installed")
    from ptxgen.assemble import assemble

    on = assemble(build(name).ptx, arch, sass=True)
    off = assemble(build(from_dict(_with(name, **{"schedule.pdl": False}))).ptx, arch, sass=True)
    assert on.count("ACQBULK") >= 1 and on.count("PREEXIT") == 0
    assert off.count("ACQBULK") == off.count("PREEXIT") == 0
    assert on.spill_store_bytes == on.spill_load_bytes == 0


def test_an_unknown_griddepcontrol_action_is_refused():
    with pytest.raises(ValueError, match=r"^GridDepControl action='launch': must be one of wait, launch_dependents$"):
        O.GridDepControl("launch")
