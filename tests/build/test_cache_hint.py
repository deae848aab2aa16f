"""L2 eviction hints on the TMA loads (``tma.cache_hint_a`` / ``cache_hint_b``).

A hint is a ``createpolicy.fractional.L2::<hint>`` policy passed with ``.L2::cache_hint`` (PTX ISA "createpolicy",
"cp.async.bulk.tensor").  It never changes a result, so the simulator ignores it; what can go wrong is the
emitted PTX (a hint on the wrong operand, dropped, or the operand order of a multicast load), and the
PTX-vs-IR differential catches that: the interpreter reports the policy each ``tma.load`` carries.
"""

import re

import pytest
from tests.check.ptx.test_ptx_vs_ir import sweep

from ptxgen.check.ptx import interp as ptxinterp
from ptxgen.build import build
from ptxgen.config import ConfigError, load_config


def _hinted(name: str, a: str, b: str):
    return load_config(name).replace(**{"tma.cache_hint_a": a, "tma.cache_hint_b": b, "name": f"{name}_hint"})


def _loads(ptx: str) -> list[str]:
    return [line.strip() for line in ptx.splitlines() if line.strip().startswith("cp.async.bulk.tensor.2d.shared")]


@pytest.mark.parametrize("name", ["h100_128x144", "h100_128x256"])  # one CTA; a CTA pair multicasting B
def test_hints_reach_the_loads_of_their_operand(name):
    ptx = build(_hinted(name, "evict_first", "evict_last")).ptx
    assert set(re.findall(r"createpolicy\.fractional\.L2::(evict_\w+)\.b64", ptx)) == {"evict_first", "evict_last"}
    loads = _loads(ptx)
    assert loads and all(".L2::cache_hint" in ld for ld in loads)
    for ld in loads:
        want = "evict_first" if "%tmap_a" in ld else "evict_last"
        reg = ld.rstrip(";").split(", ")[-1]
        assert re.search(rf"createpolicy\.fractional\.L2::{want}\.b64 {re.escape(reg)}, 1\.0;", ptx), ld
    if name == "h100_128x256":  # multicast: the CTA mask comes before the policy
        assert any(re.search(r"\.multicast::cluster\.L2::cache_hint .*, %xh\d+, %xd\d+;$", ld) for ld in loads)


def test_no_hint_emits_no_policy():
    ptx = build("h100_128x256").ptx
    assert "createpolicy" not in ptx and ".L2::cache_hint" not in ptx


def test_hinted_ptx_matches_the_ir_and_a_swapped_hint_does_not():
    res = build(_hinted("h100_128x256", "evict_first", "evict_last"))
    assert sweep(res.kernel, ptxinterp.parse(res.ptx)) is None
    swapped = (res.ptx.replace("L2::evict_first", "L2::swap").replace("L2::evict_last", "L2::evict_first")
               .replace("L2::swap", "L2::evict_last"))
    msg = sweep(res.kernel, ptxinterp.parse(swapped))
    assert msg is not None and "'tma.load', 'a'" in msg and "evict_last" in msg and "evict_first" in msg


def test_dropped_hint_is_caught():
    res = build(_hinted("h100_128x144", "none", "evict_last"))
    dropped = re.sub(r"\.L2::cache_hint (\[.*\]), %xd\d+;", r" \1;", res.ptx)
    assert dropped != res.ptx
    msg = sweep(res.kernel, ptxinterp.parse(dropped))
    assert msg is not None and "'none'" in msg and "evict_last" in msg


def test_bad_hint_is_refused():
    with pytest.raises(ConfigError, match="cache_hint_b"):
        _hinted("h100_128x144", "none", "evict_sometimes")


def test_interpreter_refuses_a_policy_form_it_does_not_model():
    """Only ``createpolicy.fractional.L2::<hint>.b64 d, 1.0`` (what the emitter writes) is interpreted."""
    with pytest.raises(ptxinterp.PtxInterpError, match="createpolicy form not interpreted"):
        ptxinterp.parse(".visible .entry t() {\n createpolicy.fractional.L2::evict_last.b64 %rd1, 0.5;\n}")


def test_interpreter_refuses_a_load_whose_operands_do_not_match_its_form():
    load = ("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
            ".L2::cache_hint [%r1], [%tmap_a, {%r2, %r3}], [%r4], %rs1;")  # the policy operand is missing
    with pytest.raises(ptxinterp.PtxInterpError, match="operands do not match the form"):
        ptxinterp.parse(f".visible .entry t() {{\n {load}\n}}")
