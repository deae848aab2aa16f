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
from ptxgen.ir.watchdog import FIELDS, PARAM, RECORD_WORDS, UNBOUND, WORD, decode, instrument
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
