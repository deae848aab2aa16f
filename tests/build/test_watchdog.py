"""Hang watchdog (PTXGEN_WATCHDOG): opt-in bounded waits, record decode, simulator agreement.

The GPU half (a planted deadlock raising DeadlockError in < 2 s, the context usable after) is
tests/gpu/test_gpu_watchdog.py.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from ptxgen import knobs
from ptxgen.check.ptx import interp as ptxinterp
from ptxgen.assemble import assemble
from ptxgen.build import build
from ptxgen.builders.kernel import build_kernel
from ptxgen.config import load_config
from ptxgen.errors import ConfigError, DeadlockError, PtxgenError, SimError
from ptxgen.ir import ops as O
from ptxgen.ir.expr import Var
from ptxgen.ir.rewrite import rewrite
from ptxgen.ir.watchdog import (DRAIN_NS, FIELDS, GUARDED, LIVE, PARAM, RECORD_WORDS, SETTLE_NS, UNBOUND, WORD, decode,
                                instrument)
from ptxgen.plan import make_plan
from ptxgen.runtime.watchdog import raise_if_expired
from ptxgen.check.sim import simulate

from tests.check.ptx.test_ptx_vs_ir import sweep
from tests.helpers import ROOT

BUDGET = 200_000_000


def planted_full(config: str = "h100_128x128"):
    """The kernel of ``config`` with the ``full`` barrier's init count one too high (it never completes)."""
    p = make_plan(load_config(config))
    p = replace(p, ab=replace(p.ab, full=replace(p.ab.full, init=tuple(i + 1 for i in p.ab.full.init))))
    return build_kernel(p)


def test_default_build_is_unchanged():
    plain = build("h100_128x128")
    assert plain.kernel.watchdog_ns == 0 and plain.kernel.wait_sites == ()
    assert "globaltimer" not in plain.ptx and "watchdog" not in plain.ptx
    assert PARAM not in plain.launch.params
    assert plain.ptx == (ROOT / "generated" / "h100_128x128.ptx").read_text()


@pytest.mark.parametrize("name", ["h100_128x128", "level9"])
def test_every_wait_is_watched_and_assembles(name):
    r = build(name, watchdog_ns=BUDGET)
    waits = [op for op in O.walk(r.kernel.body) if isinstance(op, O.MbarrierWait)]
    assert waits and all(w.watch is not None for w in waits)
    assert sorted(w.watch.site for w in waits) == list(range(len(r.kernel.wait_sites)))
    assert r.ptx.count("mbarrier.try_wait") == r.ptx.count("%globaltimer;  // watchdog") == len(waits)
    assert r.launch.params[-1] == PARAM and r.launch.extra["watchdog"]["budget_ns"] == BUDGET
    assemble(r.ptx, r.kernel.arch)  # raises AssembleError on a bad PTX
    assert sweep(r.kernel, ptxinterp.parse(r.ptx)) is None  # PTX effects == IR effects with the variant


def test_tile_and_kblock_bound_where_they_are():
    k = instrument(build("h100_128x128").kernel, BUDGET)
    by_role = {(k.wait_sites[w.watch.site]): w.watch for w in O.walk(k.body) if isinstance(w, O.MbarrierWait)}
    full = by_role[("full", "consumer_wait")]
    assert full.tile is not None and full.kblock is not None
    with pytest.raises(ValueError, match="already instrumented"):
        instrument(k, BUDGET)
    with pytest.raises(ValueError, match="positive"):
        instrument(build("h100_128x128").kernel, 0)


def test_simulator_and_watchdog_name_the_same_barrier():
    """Planted deadlock: full init one too high.  The simulator names full[..] (consumer_wait); the watched PTX of the
    same kernel assembles for sm_90a and its wait table holds that site, which decodes to the same name."""
    kernel = planted_full()
    with pytest.raises(SimError, match=r"deadlock") as info:
        simulate(kernel, 128, 128, 64, num_sms=1)
    m = re.search(r"MbarrierWait \((\w+)\) for the phase of parity (\d) of (\w+)\[(\d+)\]", str(info.value))
    assert m, str(info.value)
    role, parity, bar, index = m.group(1), int(m.group(2)), m.group(3), int(m.group(4))
    assert (bar, role) == ("full", "consumer_wait")

    from emitters import emit

    watched = instrument(kernel, BUDGET)
    assemble(emit(watched), "sm_90a")
    site = watched.wait_sites.index((bar, role))
    words = [0] * RECORD_WORDS
    for f, v in {"abort": 1, "claim": 1, "site": site, "warp": 4, "index": index, "parity": parity,
                 "tile": 0, "kblock": 0, "elapsed_lo": BUDGET}.items():
        words[WORD[f]] = v
    with pytest.raises(DeadlockError, match=rf"consumer_wait on full\[{index}\] waiting for parity {parity}") as err:
        raise_if_expired(words, watched.launch.extra["watchdog"], watched.launch.name)
    assert isinstance(err.value, PtxgenError) and err.value.record.barrier == bar
    assert "context is still usable" in str(err.value)


def test_decode():
    table = {"sites": [["empty", "producer_acquire"], ["full", "consumer_wait"]], "budget_ns": 5}
    assert decode([0] * RECORD_WORDS, table) is None
    raise_if_expired([0] * RECORD_WORDS, table, "k")  # no record: no error
    w = [0] * RECORD_WORDS
    w[WORD["claim"]], w[WORD["site"]], w[WORD["tile"]], w[WORD["kblock"]] = 1, 0, UNBOUND, 3
    w[WORD["elapsed_hi"]] = 1
    r = decode(w, table)
    assert (r.barrier, r.role, r.tile, r.kblock, r.elapsed_ns) == ("empty", "producer_acquire", None, 3, 1 << 32)
    assert "k-block 3" in r.describe() and "tile" not in r.describe()
    w[WORD["site"]] = 7
    with pytest.raises(ValueError, match="site 7"):
        decode(w, table)
    assert len(FIELDS) <= RECORD_WORDS


@pytest.mark.parametrize("value,ns", [("", 0), ("0", 0), ("off", 0), ("on", knobs.DEFAULT_WATCHDOG_NS),
                                      ("200000000", 200_000_000), ("200ms", 200_000_000), ("50us", 50_000),
                                      ("1s", 1_000_000_000), ("1_000", 1000)])
def test_knob(value, ns):
    assert knobs.read({knobs.WATCHDOG: value}).watchdog_ns == ns


@pytest.mark.parametrize("value", ["-5", "abc", "1.5s", "9" * 30, "10 parsecs"])
def test_knob_rejects(value):
    with pytest.raises(ConfigError, match="PTXGEN_WATCHDOG"):
        knobs.read({knobs.WATCHDOG: value})


def test_watched_kernel_still_verifies_and_simulates():
    """The rewrite only annotates waits: the static verifier and the simulator accept the watched kernel as before."""
    from ptxgen.check.verify import verify

    k = build("h100_128x128", watchdog_ns=BUDGET).kernel
    verify(k)
    simulate(k, 128, 128, 64, num_sms=1)


# ------------------------------------------------------------------ the abandon path (stop producing, drain before exit)

_GUARD_SETP = re.compile(rf"setp\.ne\.u32 (%p\d+), %{LIVE}, 0;")
_PRODUCING = re.compile(r"^\s*(mbarrier\.arrive|cp\.async\.bulk\.tensor\.\S*shared::cluster\.global|tcgen05\.commit)")


def unguarded(ptx: str) -> list[str]:
    """The lines of ``ptx`` that arrive on an mbarrier or start a TMA load outside an ``If wd_live`` block."""
    out, open_until, pending = [], None, None
    for line in ptx.splitlines():
        text = line.strip()
        if open_until is not None and text == f"{open_until}:":
            open_until = None
            continue
        m = _GUARD_SETP.search(text)
        if m:
            pending = m.group(1)
            continue
        if pending and text.startswith(f"@!{pending} bra "):
            open_until, pending = text.split()[-1].rstrip(";"), None
            continue
        pending = None if not text.startswith("//") else pending
        if _PRODUCING.match(line) and open_until is None:
            out.append(text)
    return out


def drain_block(ptx: str) -> list[str]:
    """The lines between the drain's header comment and ``ret`` (empty when there is no drain)."""
    lines = [ln.strip() for ln in ptx.splitlines()]
    heads = [i for i, ln in enumerate(lines) if ln.startswith("// ==== watchdog drain")]
    if not heads:
        return []
    return lines[heads[-1] + 1:lines.index("ret;", heads[-1])]


@pytest.mark.parametrize("name", ["h100_128x128", "h100_128x256", "dual_h100_128x128_c2", "level9"])
def test_abandoned_threads_stop_producing(name):
    """Every arrive and TMA load of the watched PTX runs only while wd_live; each wait's abandon path clears it."""
    plain, watched = build(name), build(name, watchdog_ns=BUDGET)
    assert unguarded(plain.ptx)  # the check sees the shipped kernel's arrives and loads
    assert unguarded(watched.ptx) == []
    n_waits = len(watched.kernel.wait_sites)
    abandon_labels = re.findall(r"^\$WAIT_ABANDON_\d+:$", watched.ptx, re.MULTILINE)
    assert watched.ptx.count(f"mov.u32 %{LIVE}, 0;") == len(abandon_labels) == n_waits
    assert watched.ptx.count(f"mov.u32 %{LIVE}, 1;") == 1
    guarded = [op for op in O.walk(plain.kernel.body) if isinstance(op, GUARDED)]
    ifs = [op for op in O.walk(watched.kernel.body) if isinstance(op, O.If) and op.cond == Var(LIVE)]
    assert len(ifs) == len(guarded) and all(len(i.then) == 1 and isinstance(i.then[0], GUARDED) for i in ifs)


def test_unguarded_finds_a_planted_unguarded_load():
    """Planted: one TMA load of the watched kernel taken out of its ``If wd_live``: the check names it."""
    k = instrument(build("h100_128x128").kernel, BUDGET)
    done = []

    def unwrap(op):
        if isinstance(op, O.If) and op.cond == Var(LIVE) and isinstance(op.then[0], O.TmaLoad) and not done:
            done.append(op)
            return op.then
        return None

    from emitters import emit

    bad = unguarded(emit(rewrite(k, unwrap)))
    assert len(bad) == 1 and bad[0].startswith("cp.async.bulk.tensor") and "%tmap_a" in bad[0]


@pytest.mark.parametrize("name", ["h100_128x128", "h100_128x256"])
def test_drain_before_exit(name):
    """The watched kernel ends with the drain: an abandoned thread spins DRAIN_NS of %globaltimer, then ``ret``."""
    assert drain_block(build(name).ptx) == []
    block = drain_block(build(name, watchdog_ns=BUDGET).ptx)
    assert block[0].startswith("setp.ne.u32") and f"%{LIVE}" in block[0]
    assert any("%globaltimer" in ln for ln in block)
    assert any(ln.startswith("setp.lt.u64") and ln.endswith(f", {DRAIN_NS};") for ln in block)
    assert 0 < DRAIN_NS < BUDGET


def test_drain_check_sees_a_planted_missing_drain():
    """Planted: the drain's spin bound dropped to 0 (no drain); the spin-length check fails."""
    ptx = build("h100_128x128", watchdog_ns=BUDGET).ptx
    cut = ptx.replace(f", {DRAIN_NS};", ", 0;")
    assert not any(ln.endswith(f", {DRAIN_NS};") for ln in drain_block(cut))


def test_record_decodes_the_plan_expectation():
    table = build("h100_128x256", watchdog_ns=BUDGET).launch.extra["watchdog"]
    assert table["drain_ns"] == DRAIN_NS
    sites = [tuple(s) for s in table["sites"]]
    w = [0] * RECORD_WORDS
    for f, v in {"claim": 1, "site": sites.index(("empty", "producer_acquire")), "rank": 1, "index": 2,
                 "tile": UNBOUND, "kblock": UNBOUND}.items():
        w[WORD[f]] = v
    r = decode(w, table)
    init, tx = table["barriers"]["empty"]
    assert (r.init, r.tx_bytes) == (init[1], tx)
    assert f"the plan expects {init[1]} arrival(s) per phase" in r.describe()
    w[WORD["site"]] = sites.index(("full", "consumer_wait"))
    full_init, full_tx = table["barriers"]["full"]
    assert f"{full_init[1]} arrival(s) and {full_tx} tx bytes per phase" in decode(w, table).describe()
    table_without = {k: v for k, v in table.items() if k != "barriers"}  # a table from before the field
    assert decode(w, table_without).init is None and "plan expects" not in decode(w, table_without).describe()


@pytest.mark.parametrize("role,cause", [("consumer_wait", "its producer did not complete the phase"),
                                        ("producer_acquire", "the consumers did not release the stage"),
                                        ("math_order_wait", "check that barrier.s init count")])
def test_error_names_the_likely_cause_by_role(role, cause):
    table = {"sites": [["bar", role]], "budget_ns": 5, "barriers": {"bar": [[1], 0]}}
    w = [0] * RECORD_WORDS
    w[WORD["claim"]] = 1
    with pytest.raises(DeadlockError, match=f"Likely cause: {cause}"):
        raise_if_expired(w, table, "k")


def test_gpu_plants_hang_in_the_simulator():
    """Each IR plant of the GPU test (tests/gpu/test_gpu_watchdog.py) deadlocks the simulator at the barrier the
    GPU record may name, and its watched PTX assembles for sm_90a."""
    from emitters import emit
    from tests.gpu.test_gpu_watchdog import CASES, plant_tx

    plants = {case: (fn, names) for case, (_, fn, names) in CASES.items() if fn is not None}
    plants["tx_high"] = (lambda: plant_tx("h100_128x128", 16), CASES["tx_high"][2])  # the PTX-edit case, as IR
    for case, (fn, names) in plants.items():
        kernel = fn()
        with pytest.raises(SimError, match="deadlock") as info:
            simulate(kernel, 256, 256, 1024, num_sms=2)
        found = set(re.findall(r"MbarrierWait \((\w+)\) for the phase of parity \d of (\w+)\[", str(info.value)))
        assert {(bar, role) for role, bar in found} & names, (case, str(info.value)[:400])
        assemble(emit(instrument(kernel, BUDGET)), "sm_90a")


def oldest_wins_problems(ptx: str) -> list[str]:
    """Each claim of the record (``atom.cas`` on the claim word) must come after the settle spin (SETTLE_NS) and
    the check that this wait posted the oldest start; returns what is missing, per claim."""
    lines = [ln.strip() for ln in ptx.splitlines()]
    claim, oldest = f"[%watchdog_ptr+{4 * WORD['claim']}], 0, 1;", f"[%watchdog_ptr+{4 * WORD['oldest']}]"
    problems = []
    for i, ln in enumerate(lines):
        if not (ln.startswith("atom.global.cas.b32") and ln.endswith(claim)):
            continue
        before = lines[max(0, i - 12):i]
        if not any(b.startswith("setp.lt.u64") and b.endswith(f", {SETTLE_NS};") for b in before):
            problems.append(f"line {i + 1}: no settle spin before the claim")
        if not any(b.startswith("ld.volatile.global.u32") and b.endswith(f"{oldest};") for b in before):
            problems.append(f"line {i + 1}: the oldest start is not read before the claim")
    return problems


def test_record_is_written_by_the_oldest_expired_wait():
    """Every wait's claim follows the settle and the oldest-start check; the post is a CAS loop on ``oldest``."""
    ptx = build("h100_128x128", watchdog_ns=BUDGET).ptx
    n = len(build("h100_128x128", watchdog_ns=BUDGET).kernel.wait_sites)
    oldest = f"[%watchdog_ptr+{4 * WORD['oldest']}]"
    assert ptx.count("atom.global.cas.b32") == 2 * n
    assert sum(1 for ln in ptx.splitlines() if "atom.global.cas.b32" in ln and oldest in ln) == n
    assert oldest_wins_problems(ptx) == [] and ptx.count("// watchdog: wait site") == n
    assert 0 < SETTLE_NS < BUDGET and WORD["oldest"] < RECORD_WORDS
    planted = ptx.replace(f", {SETTLE_NS};", ", 0;")  # planted: no settle (the first poller would win)
    assert len(oldest_wins_problems(planted)) == n
