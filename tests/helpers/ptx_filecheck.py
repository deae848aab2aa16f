"""A tiny FileCheck for PTX golden checks, and the golden checks themselves (used by test_emit and
test_planted_emitter).

Directives, one per line of a check script (LLVM FileCheck semantics, reduced):

* ``CHECK: pat``       the next line at or after the cursor that contains ``pat``;
* ``CHECK-NEXT: pat``  the line right after the previous match (blank lines and ``//`` comment lines,
  which every IR op leaves, are skipped);
* ``CHECK-NOT: pat``   no line between the previous match and the next match contains ``pat``.

In a pattern, text is literal except ``{{regex}}``, ``[[NAME:regex]]`` (capture) and ``[[NAME]]`` (the
text captured earlier).  A failed check raises ``CheckError`` naming the directive and the line searched from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN = re.compile(r"\{\{(?!\{)(.*?)\}\}|\[\[(\w+)(?::(.*?))?\]\]")


class CheckError(AssertionError):
    """A FileCheck directive did not match."""


def _regex(pat: str, env: dict[str, str]) -> re.Pattern:
    out, pos = [], 0
    for m in _TOKEN.finditer(pat):
        out.append(re.escape(pat[pos:m.start()]))
        if m.group(1) is not None:
            out.append(f"(?:{m.group(1)})")
        elif m.group(3) is not None:
            out.append(f"(?P<{m.group(2)}>{m.group(3)})")
        else:
            if m.group(2) not in env:
                raise CheckError(f"[[{m.group(2)}]] used before it was captured")
            out.append(re.escape(env[m.group(2)]))
        pos = m.end()
    out.append(re.escape(pat[pos:]))
    return re.compile("".join(out))


def filecheck(text: str, script: str) -> int:
    """Run check ``script`` (directive lines) over ``text``; raise CheckError on the first failure.

    Returns the index of the line after the last match."""
    lines = text.splitlines()
    env: dict[str, str] = {}
    cursor, nots = 0, []  # cursor: index of the line after the last match
    for raw in script.strip().splitlines():
        directive, _, pat = raw.strip().partition(":")
        pat = pat.strip()
        if directive == "CHECK-NOT":
            nots.append(pat)
            continue
        rx = _regex(pat, env)
        if directive == "CHECK":
            hit = next((i for i in range(cursor, len(lines)) if rx.search(lines[i])), None)
            if hit is None:
                raise CheckError(f"CHECK: {pat}: no match from line {cursor + 1}")
        elif directive == "CHECK-NEXT":
            hit = cursor
            while hit < len(lines) and (not lines[hit].strip() or lines[hit].strip().startswith("//")):
                hit += 1
            if hit >= len(lines) or not rx.search(lines[hit]):
                got = lines[hit].strip() if hit < len(lines) else "end of text"
                raise CheckError(f"CHECK-NEXT: {pat}: line {hit + 1} is {got!r}")
        else:
            raise CheckError(f"unknown directive {directive!r}")
        for n in nots:
            nrx = _regex(n, env)
            bad = next((i for i in range(cursor, hit) if nrx.search(lines[i])), None)
            if bad is not None:
                raise CheckError(f"CHECK-NOT: {n}: found at line {bad + 1}: {lines[bad].strip()!r}")
        nots = []
        env.update({k: v for k, v in rx.search(lines[hit]).groupdict().items() if v is not None})
        cursor = hit + 1
    if nots:
        for n in nots:
            nrx = _regex(n, env)
            bad = next((i for i in range(cursor, len(lines)) if nrx.search(lines[i])), None)
            if bad is not None:
                raise CheckError(f"CHECK-NOT: {n}: found at line {bad + 1}: {lines[bad].strip()!r}")
    return cursor


@dataclass(frozen=True)
class Golden:
    """A golden check: ``script`` must match the PTX of config ``config`` (``count`` times, disjointly)."""

    name: str
    config: str
    script: str
    count: int = 1


GOLDEN = [
    # seed level 2: the 2-CTA TMA load completes on the leader CTA's barrier: the barrier address, not the
    # destination, is ANDed with the peer-bit mask, right before the load
    Golden("two_sm_tma_load", "level9", r"""
        CHECK: // TmaLoad a box
        CHECK: add.u32 [[DST:%x\d+]], {{%smem_\w+}}, {{%\w+|\d+}};
        CHECK: and.b32 [[BAR:%x\d+]], {{%\w+}}, 0xfeffffff;
        CHECK-NEXT: cp.async.bulk.tensor.2d.cta_group::2.shared::cluster.global.mbarrier::complete_tx::bytes [[[DST]]], [%tmap_a, {{{%\w+}}, {{%\w+}}}], [[[BAR]]];
        CHECK: // TmaLoad b box
        CHECK: add.u32 [[DSTB:%x\d+]], {{%smem_\w+}}, {{%\w+|\d+}};
        CHECK: and.b32 [[BARB:%x\d+]], {{%\w+}}, 0xfeffffff;
        CHECK-NEXT: cp.async.bulk.tensor.2d.cta_group::2.shared::cluster.global.mbarrier::complete_tx::bytes [[[DSTB]]], [%tmap_b, {{{%\w+}}, {{%\w+}}}], [[[BARB]]];
    """),
    # the UMMA commit arrives on the same barrier of both CTAs of the pair (mask 0b11)
    Golden("multicast_commit", "level9", r"""
        CHECK: mov.b16 [[MASK:%xh\d+]], 0x3;
        CHECK-NEXT: tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 [{{%\w+}}], [[MASK]];
    """, count=2),
    # consumer_wait / producer_acquire: spin on try_wait.parity until it passes (the MMA warp's wait on the pair's
    # tmem_empty acquires at cluster scope)
    Golden("try_wait_loop", "level9", r"""
        CHECK: [[TOP:\$WAIT_\d+]]:
        CHECK-NEXT: mbarrier.try_wait.parity{{(\.acquire\.cluster)?}}.shared::cta.b64 [[P:%p\d+]], [{{%\w+}}], {{%\w+}};
        CHECK-NEXT: @![[P]] bra [[TOP]];
    """, count=4),
    # epilogue: generic-proxy smem writes fenced for the async proxy, a CTA-subset barrier, then one elected
    # lane stores the box and commits the bulk group
    Golden("epilogue_tma_store", "level9", r"""
        CHECK: fence.proxy.async.shared::cta;
        CHECK-NEXT: bar.sync 1, 128;
        CHECK: elect.sync _|[[E:%p\d+]], 0xffffffff;
        CHECK-NEXT: @![[E]] bra [[SKIP:\$NOT_ELECTED_\d+]];
        CHECK-NOT: bar.sync
        CHECK: cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%tmap_d, {{{%\w+}}, {{%\w+}}}], [{{%\w+}}];
        CHECK-NEXT: cp.async.bulk.commit_group;
        CHECK-NEXT: [[SKIP]]:
    """, count=3),
    # sm_90a: the multicast TMA load (A shared by the pair) names its CTA mask
    Golden("sm90_multicast_load", "h100_128x256", r"""
        CHECK: mov.b16 [[MASK:%xh\d+]], 0x3;
        CHECK-NEXT: cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [{{%\w+}}], [%tmap_{{a|b}}, {{{%\w+}}, {{%\w+}}}], [{{%\w+}}], [[MASK]];
    """),
]


def check_golden(g: Golden, ptx: str) -> None:
    """Run golden check ``g`` over ``ptx`` ``g.count`` times, each from the line after the previous match."""
    lines = ptx.splitlines()
    for i in range(g.count):
        try:
            lines = lines[filecheck("\n".join(lines), g.script):]
        except CheckError as exc:
            raise CheckError(f"golden {g.name} ({g.config}), occurrence {i + 1}/{g.count}: {exc}") from None
