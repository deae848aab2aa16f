"""ptxgen's sm_100a constants against CuTe's, field by field, with every known legal difference spelled out.

A *family* is one shipped sm_100a config (or a 1-CTA variant of ``level3``, since no shipped bf16 config uses
cta_group::1) paired with the CuTe reference of the same MMA kind, CTA group and N.  :func:`compare` returns
one :class:`Row` per constant; a row is ``ok`` when the two sides are equal or differ exactly as its stated
legal difference says, so a changed constant on either side fails.

Run ``PYTHONPATH=. python tests/crosscheck/crosscheck_table.py`` (needs the ``crosscheck`` extra) to print the
table; ``pytest -m crosscheck -s tests/crosscheck`` prints it too.
"""

from __future__ import annotations

from dataclasses import dataclass

from ptx_constants import Constants, extract

# Instruction-descriptor bits CuTe fills at run time (PTX ISA "Instruction descriptor"): negate A (13) and
# negate B (14) from the tiled MMA's NEGATE fields; for block-scaled kinds the scale-factor ids (A: 29-30,
# B: 4-5) from the scale TMEM addresses' byte lane.
NEGATE_BITS = (1 << 13) | (1 << 14)
SF_ID_BITS = (3 << 29) | (3 << 4)


@dataclass(frozen=True)
class Family:
    """One of ours: a config name and the shape facts that pick its CuTe reference."""

    name: str
    operands: str  # "bf16" | "nvfp4" | "mxfp8"
    cta_group: int
    block_n: int
    m_waves: int  # 128-row MMA waves per CTA (tile.block_m // 128)
    acc_stages: int
    accumulators: int  # 2 for a dual GEMM
    derived: str = ""  # how a non-shipped variant was made

    @property
    def reference_key(self) -> tuple:
        return (self.operands, self.cta_group, self.block_n)


def family_of(cfg, derived: str = "") -> Family:
    """The :class:`Family` of a ptxgen Config (reads YAML-level fields only)."""
    return Family(cfg.name, cfg.operands if cfg.operands in ("nvfp4", "mxfp8") else "bf16", cfg.cluster.size, cfg.tile.block_n,
                  cfg.tile.block_m // 128, cfg.accumulator.stages, 2 if cfg.kernel == "dual_gemm" else 1, derived)


def families() -> list[tuple[Family, object]]:
    """Every shipped sm_100a config, plus level3 at cluster.size=1 with N=128 and N=256; (family, config)."""
    from ptxgen.config import from_dict, load_config, to_dict
    from ptxgen.shipped import shipped_configs

    out = []
    for name in shipped_configs():
        cfg = load_config(name)
        if cfg.arch == "sm_100a":
            out.append((family_of(cfg), cfg))
    for n in (128, 256):
        raw = to_dict(load_config("level3"))
        raw.update(name=f"level3_1cta_n{n}")
        raw["cluster"]["size"] = 1
        raw["tma"]["two_sm"] = False
        raw["tile"]["block_n"] = n
        raw["pipeline"]["stages"] = 4
        cfg = from_dict(raw)
        out.append((family_of(cfg, "level3 with cluster.size=1, tma.two_sm=false, pipeline.stages=4"), cfg))
    return out


@dataclass(frozen=True)
class Row:
    field: str
    ours: str
    cute: str
    verdict: str  # "equal" or "differs"
    why: str
    ok: bool


def _h(values) -> str:
    vals = sorted(values) if isinstance(values, (set, frozenset, list)) else [values]
    return ",".join(hex(v) if isinstance(v, int) and v >= 0x4000 and v not in _BYTE_COUNTS else str(v)
                    for v in vals) or "-"


_BYTE_COUNTS: set = set()  # values printed in decimal (expect_tx bytes)


def _pow2(n: int) -> int:
    p = 32
    while p < n:
        p *= 2
    return p


def compare(fam: Family, ours: Constants, cute: Constants, ref) -> list[Row]:
    """Field-by-field comparison of one family's PTX constants with its CuTe reference's.

    ref: the :class:`cute_reference.Reference` (its per-operand TMA bytes and accumulator TMEM columns are what
    CuTe's layout algebra computed for one tile).
    """
    rows: list[Row] = []

    def row(name, o, c, equal_ok, why_equal="", expected_diff=None, why_diff=""):
        """equal_ok: the sides agree; expected_diff: the sides differ exactly as a stated legal difference."""
        if equal_ok:
            rows.append(Row(name, _h(o), _h(c), "equal", why_equal, True))
        else:
            rows.append(Row(name, _h(o), _h(c), "differs", why_diff if expected_diff else "UNEXPECTED",
                            bool(expected_diff)))

    nv = fam.operands in ("nvfp4", "mxfp8")  # block-scaled: scale atoms copied to TMEM
    mx = fam.operands == "mxfp8"  # one atom per operand and K block; four MMAs pick its bytes by scale-factor ID
    rows.append(Row("resolved", _h(len(ours.unresolved)), _h(len(cute.unresolved)),
                    "equal" if not ours.unresolved and not cute.unresolved else "differs",
                    "; ".join(ours.unresolved + cute.unresolved), not ours.unresolved and not cute.unresolved))
    row("mma form", ours.mma_forms, cute.mma_forms, ours.mma_forms == cute.mma_forms and len(ours.mma_forms) == 1)
    # ours: NVFP4 dual GEMMs issue B1 with .collector::a::fill and B2 on the same A with ::lastuse (one A read for
    # both); CuTe's single-GEMM references have no A to reuse and spell the default, ::discard
    ours_collect = {".collector::a::fill", ".collector::a::lastuse"} if nv and fam.accumulators == 2 else set()
    row("mma A collector", ours.mma_collectors, cute.mma_collectors, False,
        expected_diff=ours.mma_collectors == ours_collect and cute.mma_collectors == {".collector::a::discard"},
        why_diff="CuTe spells .collector::a::discard, the default when no collector qualifier is given"
                 + ("; ours fills A with the B1 MMA and reads it back (lastuse) with the B2 MMA" if ours_collect else ""))

    # instruction descriptor: ours is one literal; CuTe's known part once its run-time bits are masked
    runtime_bits = NEGATE_BITS | (SF_ID_BITS if nv else 0)
    cute_base = {v & ~runtime_bits for v in cute.idesc_choices}
    negate_choices = {v & NEGATE_BITS for v in cute.idesc_choices}
    # MXFP8: ours is one literal per K step, equal but for its scale-factor ids (checked in their own row)
    ours_base = {v & ~(SF_ID_BITS if mx else 0) for v in ours.idesc}
    ours_one = next(iter(ours_base)) if len(ours_base) == 1 else None
    idesc_ok = (ours_one is not None and not ours.idesc_runtime and ours_one & runtime_bits == 0
                and cute_base == {ours_one} and negate_choices == {0, 1 << 13, 1 << 14, NEGATE_BITS}
                and cute.idesc_runtime == nv)
    row("instr descriptor", ours_base, cute_base, idesc_ok,
        "CuTe picks negate A/B (bits 13, 14) by selp at run time"
        + ("; ORs the scale-factor ids (bits 4-5, 29-30) from the scale TMEM address" if nv else "")
        + ("; ours: one literal per K step with its ids" if mx else ""))
    if mx:  # K step s reads byte s of the atom's columns: ours in the idesc literals, CuTe in bits 30-31 of the address
        ours_ids = sorted(((v >> 29) & 3, (v >> 4) & 3) for v in ours.idesc)
        cute_ids = sorted(zip(((c >> 30) & 3 for c in cute.sfa_cols), ((c >> 30) & 3 for c in cute.sfb_cols)))
        row("scale-factor IDs (A, B) per K step", ours_ids, cute_ids,
            ours_ids == cute_ids == [(i, i) for i in range(4)],
            "K step s reads byte s of each 32-bit scale column (its 32-K block); ours in the idesc literal, CuTe "
            "carries it in the scale TMEM address's top bits and ORs it into the idesc")

    row("smem desc hi word", ours.desc_hi, cute.desc_hi, ours.desc_hi == cute.desc_hi and len(ours.desc_hi) == 1,
        "SBO 1024 B, version 1, 128B swizzle")
    row("smem desc LBO", ours.desc_lbo, cute.desc_lbo, False, expected_diff=ours.desc_lbo == {0} and
        cute.desc_lbo == {1}, why_diff="CuTe writes 16 B, ours 0: LBO is not read for 128B-swizzled K-major layouts")
    row("K step (16 B units)", ours.k_steps, cute.k_steps, ours.k_steps == cute.k_steps == {2},
        "+2 = 32 B per MMA K step")
    row("MMAs per K block", ours.mmas_per_k_block, cute.mmas_per_k_block,
        ours.mmas_per_k_block == cute.mmas_per_k_block == {4})

    if nv:
        row("tcgen05.cp form", ours.cp_forms, cute.cp_forms, ours.cp_forms == cute.cp_forms and len(ours.cp_forms) == 1)
        row("SF desc hi word", ours.sf_desc_hi, cute.sf_desc_hi,
            ours.sf_desc_hi == cute.sf_desc_hi == {0x4008}, "SBO 128 B, version 1, no swizzle")
        row("SF desc LBO", ours.sf_desc_lbo, cute.sf_desc_lbo, False,
            expected_diff=ours.sf_desc_lbo == {8} and cute.sf_desc_lbo == {1},
            why_diff="ours 128 B, CuTe 16 B: a 32x128b copy reads one 16 B column of core matrices, LBO unused")
        row("SF desc K step", ours.sf_k_steps, cute.sf_k_steps,
            ours.sf_k_steps == cute.sf_k_steps == (set() if mx else {32}),
            "one atom per K block: no step" if mx else "+32 = 512 B: one 128-row x 4-scale atom per MMA K step")
        ours_acc = ref.acc_tmem_cols * fam.m_waves * fam.acc_stages * fam.accumulators
        col = (lambda c: c & 0xFFFF) if mx else (lambda c: c)  # the column field (CuTe: IDs in bits 30-31)
        o_sfa = sorted({col(c) - ours_acc for c in ours.sfa_cols})
        c_sfa = sorted({col(c) - ref.acc_tmem_cols for c in cute.sfa_cols})
        row("SFA TMEM cols (after accumulators)", o_sfa, c_sfa, o_sfa == c_sfa == ([0] if mx else [0, 4, 8, 12]),
            f"ours at +{ours_acc}.., CuTe at +{ref.acc_tmem_cols}.. (its tile has one accumulator)")
        o_sfb = sorted({col(c) - col(ours.sfa_cols[0]) for c in ours.sfb_cols}) if ours.sfa_cols else []
        c_sfb = sorted({col(c) - col(cute.sfa_cols[0]) for c in cute.sfb_cols}) if cute.sfa_cols else []
        first_b = [4] if mx else [16 + 4 * i for i in range(4)]
        row("SFB TMEM cols (from SFA)", o_sfb, c_sfb, o_sfb == c_sfb == first_b,
            expected_diff=c_sfb == first_b and o_sfb == [16 + 4 * i for i in range(4 * fam.accumulators)],
            why_diff="equal for B1; ours adds B2's scales right after (dual GEMM)")

    row("tcgen05.ld form", ours.ld_forms, cute.ld_forms, ours.ld_forms == cute.ld_forms and len(ours.ld_forms) == 1)
    row("tcgen05.commit forms", ours.commit_forms, cute.commit_forms, ours.commit_forms == cute.commit_forms,
        expected_diff=cute.commit_forms < ours.commit_forms and fam.cta_group == 2,
        why_diff="CuTe's multicast commit is among ours; ours also commits to its own CTA's barrier")

    tiles = fam.m_waves * fam.acc_stages * fam.accumulators
    sf_cols = (ours.sfb_cols[-1] + 4 - ours.sfa_cols[0]) if nv and ours.sfa_cols and ours.sfb_cols else 0
    want_ours = _pow2(ref.acc_tmem_cols * tiles + sf_cols)
    cute_ok = cute.alloc_cols == ({512} if nv else {ref.acc_tmem_cols})
    row("TMEM alloc cols", ours.alloc_cols, cute.alloc_cols, ours.alloc_cols == cute.alloc_cols and cute_ok
        and ours.alloc_cols == {want_ours}, f"accumulator tile = {ref.acc_tmem_cols} cols in both",
        expected_diff=cute_ok and ours.alloc_cols == {want_ours},
        why_diff=f"ours = pow2({ref.acc_tmem_cols} x {tiles} tiles (m-waves x stages x accumulators)"
                 + (f" + {sf_cols} scale cols" if nv else "") + ")"
                 + ("; CuTe reference allocates all 512" if nv else ""))

    tx = ref.tx_bytes
    per_cta = tx["a"] * fam.m_waves + tx["b"] * fam.accumulators
    if nv:
        per_cta += tx["sfa"] * fam.m_waves + tx["sfb"] * fam.accumulators
    cute_tx_ok = cute.expect_tx == {sum(tx.values()) * fam.cta_group} == {ref.expect_tx}
    parts = f"A {tx['a']} x{fam.m_waves}, B {tx['b']} x{fam.accumulators}" + (
        f", SFA {tx['sfa']} x{fam.m_waves}, SFB {tx['sfb']} x{fam.accumulators}" if nv else "")
    same_shape = fam.m_waves == 1 and fam.accumulators == 1 and fam.cta_group == 1
    _BYTE_COUNTS.update(ours.expect_tx | cute.expect_tx)
    row("expect_tx bytes", ours.expect_tx, cute.expect_tx, same_shape and ours.expect_tx == cute.expect_tx
        and cute_tx_ok, f"per operand: {parts}",
        expected_diff=cute_tx_ok and ours.expect_tx == {per_cta},
        why_diff=f"per CTA and operand equal ({parts})"
                 + ("; ours arms per CTA, CuTe's leader arms the pair once (x2)" if fam.cta_group == 2 else ""))
    cute_mc = 1 if nv and fam.cta_group == 2 else 0
    want_mc = cute_mc * fam.accumulators  # one multicast load per B scale tile
    row("TMA multicast loads", ours.tma_multicast, cute.tma_multicast,
        ours.tma_multicast == cute.tma_multicast == cute_mc == want_mc,
        "each CTA loads half of SFB and multicasts it to the pair" if cute_mc else "",
        expected_diff=cute.tma_multicast == cute_mc == 1 and ours.tma_multicast == want_mc,
        why_diff="both load half of each SFB per CTA and multicast it to the pair; ours has SFB1 and SFB2 (dual GEMM)")
    if fam.cta_group == 2:
        row("cluster barrier before paired alloc", ours.cluster_wait_before_alloc, cute.cluster_wait_before_alloc,
            ours.cluster_wait_before_alloc and cute.cluster_wait_before_alloc)
    row("tcgen05.fence / wait::ld", f"{ours.tcgen05_fences}/{ours.tcgen05_wait_ld}",
        f"{cute.tcgen05_fences}/{cute.tcgen05_wait_ld}", False,
        expected_diff=ours.tcgen05_fences > 0 and ours.tcgen05_wait_ld > 0
        and cute.tcgen05_fences == cute.tcgen05_wait_ld == 0,
        why_diff="CuTe's PTX has none in these kernels; ours fences around thread syncs and waits after each ld")
    return rows


def format_table(results: list[tuple[Family, list[Row]]]) -> str:
    """One line per (family, field): ours | CuTe | equal/differs | why."""
    lines = []
    for fam, rows in results:
        ref = "cute_{}_{}cta_{}x{}".format(fam.operands, fam.cta_group, 128 * fam.cta_group, fam.block_n)
        lines.append(f"{fam.name}  vs  {ref}" + (f"   [{fam.derived}]" if fam.derived else ""))
        w = max(len(r.field) for r in rows)
        for r in rows:
            flag = "" if r.ok else "  <-- FAIL"
            lines.append(f"  {r.field:<{w}}  {r.verdict:<7}  ours {r.ours:<22} cute {r.cute:<22} {r.why}{flag}")
    return "\n".join(lines)


def summary_table(results: list[tuple[Family, list[Row]]]) -> str:
    """Compact matrix: families down, fields across; '=' equal, 'd' a stated legal difference, 'X' failure."""
    fields = []
    for _, rows in sorted(results, key=lambda r: -len(r[1])):
        for r in rows:
            if r.field not in fields:
                fields.append(r.field)
    head = ["family"] + [f"{i + 1}" for i in range(len(fields))]
    out = [" ".join(f"{h:>3}" if i else f"{h:<22}" for i, h in enumerate(head))]
    for fam, rows in results:
        by = {r.field: r for r in rows}
        cells = [("-" if f not in by else "X" if not by[f].ok else "=" if by[f].verdict == "equal" else "d")
                 for f in fields]
        out.append(" ".join([f"{fam.name:<22}"] + [f"{c:>3}" for c in cells]))
    out.append("fields: " + "; ".join(f"{i + 1} {f}" for i, f in enumerate(fields)))
    return "\n".join(out)


def run_all(references: dict) -> list[tuple[Family, list[Row]]]:
    """Build every family with ptxgen and compare it with its reference (``references[family.reference_key]``)."""
    from ptxgen.build import build

    results = []
    for fam, cfg in families():
        ref = references[fam.reference_key]
        results.append((fam, compare(fam, extract(build(cfg).ptx), extract(ref.ptx), ref)))
    return results


REFERENCE_KEYS = [("bf16", 1, 128), ("bf16", 1, 256), ("bf16", 2, 128), ("bf16", 2, 256),
                  ("nvfp4", 1, 128), ("nvfp4", 2, 128), ("mxfp8", 1, 128), ("mxfp8", 2, 128)]


def compile_references() -> dict:
    from cute_reference import compile_reference

    return {k: compile_reference(*k) for k in REFERENCE_KEYS}


if __name__ == "__main__":
    res = run_all(compile_references())
    print(summary_table(res))
    print()
    print(format_table(res))
    raise SystemExit(0 if all(r.ok for _, rows in res for r in rows) else 1)
