"""Cross-check tier: ptxgen's sm_100a PTX constants against NVIDIA's CuTe DSL compiling the same MMA shapes.

Needs the ``crosscheck`` extra (``nvidia-cutlass-dsl``); without it the module is skipped.  No GPU: CuTe's
reference kernels (:mod:`cute_reference`) are compiled for sm_100a to PTX only, once per session.  Every
shipped sm_100a config (and two 1-CTA variants of level3) is built with ``ptxgen.build`` and compared field
by field (:mod:`crosscheck_table`); planted bugs on either side must make the comparison fail.
"""

from __future__ import annotations

import re

import pytest

pytest.importorskip("cutlass.cute")

from crosscheck_table import (  # noqa: E402
    compare,
    compile_references,
    families,
    format_table,
    run_all,
    summary_table,
)
from ptx_constants import extract  # noqa: E402

pytestmark = pytest.mark.crosscheck

FAMILIES = families()


@pytest.fixture(scope="session")
def references():
    """The eight CuTe reference kernels, compiled once per session (keyed by (operands, cta_group, N))."""
    return compile_references()


@pytest.fixture(scope="session")
def ours():
    """ptxgen's PTX of every family, built once per session."""
    from ptxgen.build import build

    return {fam.name: build(cfg).ptx for fam, cfg in FAMILIES}


def _failures(rows) -> str:
    return "\n".join(f"{r.field}: ours {r.ours} / cute {r.cute}: {r.why}" for r in rows if not r.ok)


@pytest.mark.parametrize("fam", [f for f, _ in FAMILIES], ids=lambda f: f.name)
def test_constants_match_cute(fam, ours, references):
    ref = references[fam.reference_key]
    rows = compare(fam, extract(ours[fam.name]), extract(ref.ptx), ref)
    assert all(r.ok for r in rows), f"{fam.name} vs {ref.name}:\n{_failures(rows)}"
    assert {r.field for r in rows} >= {"instr descriptor", "smem desc hi word", "K step (16 B units)",
                                       "tcgen05.ld form", "TMEM alloc cols", "expect_tx bytes"}


def test_references_are_what_they_claim(references):
    """Each CuTe reference really is the MMA kind / CTA group / N it is filed under (a mislabelled reference
    would compare against the wrong shape)."""
    for (operands, cta_group, n), ref in references.items():
        c = extract(ref.ptx)
        kind = {"nvfp4": "kind::mxf4nvf4.block_scale.block16",
                "mxfp8": "kind::mxf8f6f4.block_scale.block32"}.get(operands, "kind::f16")
        assert c.mma_forms == {f"tcgen05.mma.cta_group::{cta_group}.{kind}"}, ref.name
        n_field = {(v >> 17) & 0x3F for v in c.idesc_choices}
        m_field = {(v >> 24) & 0x1F for v in c.idesc_choices}
        assert n_field == {n >> 3} and m_field == {(128 * cta_group) >> 4}, ref.name


def test_print_table(ours, references):
    """The family x constant table (shown with ``pytest -m crosscheck -s``)."""
    results = run_all(references)
    print()
    print(summary_table(results))
    print(format_table(results))
    assert len(results) == len(FAMILIES)


# --------------------------------------------------------------------------- planted bugs (no vacuous pass)


def _bump_hex(pattern: str, delta: int):
    def mutate(text: str) -> str:
        return re.sub(pattern, lambda m: m.group(1) + hex(int(m.group(2), 16) + delta), text, count=1)
    return mutate


def _bump_dec(pattern: str, delta: int):
    def mutate(text: str) -> str:
        return re.sub(pattern, lambda m: m.group(1) + str(int(m.group(2)) + delta), text, count=1)
    return mutate


OURS_BUGS = [
    # (family, field that must fail, mutation of our PTX text)
    ("level1", "instr descriptor", _bump_hex(r"(mov\.u32 %idesc, )(0x[0-9a-f]+)", 1 << 17)),  # N field + 1
    ("level9", "instr descriptor", _bump_hex(r"(mov\.u32 %idesc, )(0x[0-9a-f]+)", 1 << 24)),  # M field + 1
    ("level5", "smem desc hi word", _bump_hex(r"(mov\.u32 %desc_hi, )(0x[0-9a-f]+)", 0x40)),  # SBO 1 KiB -> 2 KiB
    ("level3", "K step (16 B units)", _bump_dec(r"(add\.u32 %x\d+, %x\d+, )(2);", 1)),  # one K step of 48 B
    ("level6", "expect_tx bytes", _bump_dec(r"(expect_tx\.shared::cta\.b64 _, \[%\w+\], )(\d+)", 16)),
    ("level3_1cta_n128", "TMEM alloc cols", _bump_dec(r"(tcgen05\.alloc\.\S+ \[%\w+\], )(\d+)", 128)),
    ("nvfp4_dual_128x128", "SFA TMEM cols (after accumulators)", _bump_dec(r"(add\.u32 %x\d+, %tmem, )(256);", 4)),
    ("nvfp4_dual_256x128", "SF desc hi word", _bump_hex(r"(mov\.u32 %desc_hi, )(0x4008)", 0x8)),
    ("nvfp4_dual_256x128", "TMA multicast loads",  # SFB2 loaded whole again: one multicast load, CuTe's count
     lambda t: re.sub(r"(cp\.async\.bulk\.tensor\S*)\.multicast::cluster( \[%x\d+\], \[%tmap_sfb2)", r"\1\2", t)),
    ("nvfp4_dual_128x128", "mma A collector",  # the B2 MMA reads A anew instead of from the collector
     lambda t: t.replace(".collector::a::lastuse", "")),
    ("nvfp4_dual_256x128", "tcgen05.cp form",
     lambda t: t.replace("tcgen05.cp.cta_group::2.32x128b.warpx4", "tcgen05.cp.cta_group::2.128x128b", 1)),
    # MXFP8: the third K step's idesc reads scale byte 0 instead of 2 (A id bits 29-30, B id bits 4-5 cleared)
    ("fp8_sm100_128x128", "scale-factor IDs (A, B) per K step",
     lambda t: re.sub(r"(mov\.u32 %idesc_2, )(0x[0-9a-f]+)", lambda m: m.group(1) + hex(int(m.group(2), 16) & ~0x60000030),
                      t, count=1)),
    ("fp8_sm100_256x128", "instr descriptor", _bump_hex(r"(mov\.u32 %idesc, )(0x[0-9a-f]+)", 1 << 7)),  # A: e5m2
    ("fp8_sm100_256x128", "SFB TMEM cols (from SFA)", _bump_dec(r"(add\.u32 %x\d+, %tmem, )(260);", 4)),
]


@pytest.mark.parametrize("family,field,mutate", OURS_BUGS, ids=[f"{f}-{fld}" for f, fld, _ in OURS_BUGS])
def test_planted_bug_in_ours_fails(family, field, mutate, ours, references):
    fam = next(f for f, _ in FAMILIES if f.name == family)
    ref = references[fam.reference_key]
    bad = mutate(ours[family])
    assert bad != ours[family], "the mutation did not apply"
    rows = {r.field: r for r in compare(fam, extract(bad), extract(ref.ptx), ref)}
    assert not rows[field].ok, f"planted bug in {field} went unnoticed: {rows[field]}"


def test_planted_bug_in_cute_fails(ours, references):
    """A changed constant on CuTe's side fails too: its idesc literals with N + 1."""
    fam = next(f for f, _ in FAMILIES if f.name == "level1")
    ref = references[fam.reference_key]
    base = 0x10200490
    bad = ref.ptx
    for v in (base, base | 1 << 13):
        assert str(v) in bad
        bad = bad.replace(str(v), str(v + (1 << 17)))
    rows = {r.field: r for r in compare(fam, extract(ours["level1"]), extract(bad), ref)}
    assert not rows["instr descriptor"].ok
