"""Emitted PTX: golden snippets of the protocol the seeds describe, and one comment per IR op."""

from __future__ import annotations

import re

import pytest

from ptxgen.build import build
from ptxgen.config import shipped_configs
from ptxgen.ir import ops


def ptx(name):
    return build(name).ptx


def test_two_sm_tma_masks_barrier_not_destination():
    text = ptx("level2")
    loads = re.findall(r"and\.b32 (%x\d+), %x\d+, 0xfeffffff;.*\n\s*cp\.async\.bulk\.tensor\.2d\.cta_group::2\S* \[(%x\d+)\], \[%tmap_\w, \{[^}]*\}\], \[(%x\d+)\];", text)
    assert len(loads) == 2
    for masked, dst, bar in loads:
        assert bar == masked and dst != masked


def test_level1_has_plain_loads_and_relay():
    text = ptx("level1")
    assert "cta_group::2.shared::cluster.global" not in text
    assert "mapa.shared::cluster.u32" in text and "mbarrier.arrive.shared::cluster.b64 _, [%x" in text


def test_commit_multicasts_to_both_ctas():
    text = ptx("level7")
    assert text.count("tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64") == 2
    assert "mov.b16 %xh" in text and "0x3;" in text


def test_level9_shares_descriptors_with_shfl():
    text = ptx("level9")
    assert text.count("shfl.sync.idx.b32 %a_lo") == 1 and text.count("shfl.sync.idx.b32 %b_lo") == 1
    assert text.count("tcgen05.mma.cta_group::2.kind::f16") == 8
    assert "tcgen05.ld.sync.aligned.32x32b.x32.b32" in text
    assert "mov.u32 %idesc, 0x10400490;" in text


def _k_loops(text):
    """Bodies of the ``$KB_LOOP_n`` .. ``$KB_DONE_n`` regions (the K loops)."""
    return re.findall(r"^\$KB_LOOP_(\d+):\n(.*?)^\$KB_DONE_\d+:", text, re.M | re.S)


@pytest.mark.parametrize("name", shipped_configs())
def test_loop_invariants_are_hoisted(name):
    """Loop invariants: constants and descriptor high words (and, where ``emitters.hoist_bases`` says so,
    barrier/region bases) are computed once, before the body; the K loops read them by name."""
    from emitters import hoist_bases

    res = build(name)
    text = res.ptx
    top = text[text.index("==== loop invariants"):]
    bases = hoist_bases(res.kernel)
    assert bool(re.search(r"^\s*add\.u32 %bar_full, %smem_base, \d+;$", top, re.M)) == bases
    loops = _k_loops(text)
    assert loops
    for _, loop in loops:
        code = [ln.split("//")[0].strip() for ln in loop.splitlines() if not ln.strip().startswith("//")]
        assert not [c for c in code if re.match(r"mov\.u32 %x\d+, (0x)?\d", c)], "constant mov in a K loop"
        if bases:
            assert not [c for c in code if re.search(r"%smem_base, \d+;", c)], "smem base + constant in a K loop"
    mma = "".join(loop for _, loop in loops)
    if "tcgen05.mma" in mma:
        # the block-scaled form (NVFP4) has its two scale-factor TMEM addresses before the predicate
        assert re.search(r"tcgen05\.mma\S* \[%x\d+\], %xd\d+, %xd\d+, %idesc(_\d+)?, (\[%x\d+\], \[%x\d+\], )?%", mma)
    assert text.count("mov.u32 %desc_hi, ") == 1


@pytest.mark.parametrize("d", [3, 5, 6, 10, 11, 144, 176, 384, 1000, 4097, 65535])
def test_udiv_magic_is_exact(d):
    """Division by a constant as multiply-high and shift: exact on every u32 edge (0, multiples of d and their
    neighbours, the top of the range) and on random values; the check fails for a multiplier one too small."""
    import random

    from emitters.core import udiv_magic

    m, s = udiv_magic(d)
    top = (1 << 32) - 1
    ns = {0, 1, d - 1, d, d + 1, top, top - 1, 1 << 31} | {q * d + j for q in (1, 2, 1000, top // d) for j in (-1, 0, 1)}
    ns |= {random.Random(d).randrange(1 << 32) for _ in range(2000)}
    ns = sorted(n for n in ns if 0 <= n <= top)
    assert all((n * m) >> (32 + s) == n // d for n in ns)
    assert any((n * (m - 1)) >> (32 + s) != n // d for n in ns)


def test_udiv_magic_declines_33_bit_multipliers():
    from emitters.core import udiv_magic

    assert udiv_magic(7) is None and udiv_magic(1) is None and udiv_magic(0) is None


def test_constant_division_is_multiply_high():
    """The k-loop's ``it % 5`` / ``it / 5`` (5 stages) and the tile counts ``/ 144``: no div.u32 or rem.u32 by a
    constant (ptxas 13 turned those into a run-time reciprocal and two corrections, docs/performance.md, "Constant division")."""
    text = ptx("h100_128x144")
    assert not re.search(r"(div|rem)\.u32 %\w+, %\w+, \d+;", text)
    assert "mul.hi.u32" in text and re.search(r"// Let stage = it % 5\n\s*mul\.hi\.u32 %x\d+, %it, 3435973837;", text)


def test_hoist_bases_only_where_ptxas_gains():
    """The per-config back-out (ptxas registers and SASS mix, docs/performance.md, "Lean PTX"): bases stay in place on sm_90a
    and in register-store epilogues."""
    from emitters import hoist_bases

    assert [n for n in sorted(shipped_configs()) if hoist_bases(build(n).kernel)] == [
        "dual_sm100_256x128", "fp8_sm100_128x128", "fp8_sm100_256x128", "level4", "level5", "level6", "level7", "level8",
        "level9", "nvfp4_dual_128x128", "nvfp4_dual_256x128"]


def test_teardown_cluster_sync_around_dealloc():
    text = ptx("level9")
    tail = text[text.index("==== teardown"):]
    assert tail.index("barrier.cluster.wait") < tail.index("tcgen05.dealloc") < tail.rindex("barrier.cluster.wait")


def test_sm90_protocol():
    text = ptx("h100_128x256")
    assert "setmaxnreg.dec.sync.aligned.u32 40;" in text and "setmaxnreg.inc.sync.aligned.u32 232;" in text
    assert ".multicast::cluster" in text and "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16" in text
    assert ".maxnreg 168" in text and ".reqnctapercluster 2, 1, 1" in text
    assert "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group" in text


@pytest.mark.parametrize("name", shipped_configs())
def test_every_op_leaves_a_comment(name):
    res = build(name)
    leaves = [op for op in ops.walk(res.kernel.body) if not isinstance(op, (ops.Comment,))]
    comments = [line for line in res.ptx.splitlines() if line.strip().startswith("// ")]
    assert len(comments) >= len(leaves) - sum(isinstance(o, ops.If) for o in leaves)
    assert f".visible .entry {res.plan.kernel}(" in res.ptx and ".version 8.8" in res.ptx


# ------------------------------------------------------------------ FileCheck-style golden sequences
# (tests/helpers/ptx_filecheck.py)

from tests.helpers.ptx_filecheck import GOLDEN, CheckError, check_golden, filecheck  # noqa: E402


@pytest.mark.parametrize("golden", GOLDEN, ids=lambda g: g.name)
def test_golden_sequence(golden):
    check_golden(golden, ptx(golden.config))


def test_filecheck_fails_where_it_should():
    text = "alpha %x1, 3;\n// note\n\nbeta %x1;\ngamma %x2;\ndelta;"
    assert filecheck(text, r"CHECK: alpha [[R:%x\d+]], 3;" "\n" "CHECK-NEXT: beta [[R]];") == 4
    with pytest.raises(CheckError, match="CHECK-NEXT"):
        filecheck(text, "CHECK: alpha\nCHECK-NEXT: gamma")
    with pytest.raises(CheckError, match="no match"):
        filecheck(text, r"CHECK: alpha [[R:%x\d+]], 3;" "\n" "CHECK: gamma [[R]];")
    with pytest.raises(CheckError, match="CHECK-NOT"):
        filecheck(text, "CHECK: alpha\nCHECK-NOT: beta\nCHECK: gamma")
    filecheck(text, "CHECK: beta\nCHECK-NOT: alpha\nCHECK: delta")
