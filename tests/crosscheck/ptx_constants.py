"""The tcgen05 constants of a PTX text, read the same way from ptxgen's PTX and from CuTe's.

Descriptors are often built at run time in registers (CuTe ORs a 64-bit literal into a shifted shared-memory
address; ptxgen packs ``{lo, hi}`` with ``mov.b64``), so every operand is evaluated by a small affine evaluator
over the PTX's own definitions: a value is ``c + t1 + t2 + ...`` where ``c`` is a known integer and each ``t``
names a quantity only known at run time (an address, a loop counter, a TMEM base).  The evaluator assumes what
both generators guarantee for these operands: run-time terms are 32-bit, aligned shared-memory or TMEM
addresses, so they never reach a descriptor's high word, ``or`` with a constant whose bits are clear in the
known part acts as an add, and ``shr`` of an aligned term by the descriptor's 4 bits is linear.

Fields (PTX ISA "tcgen05.mma" Instruction descriptor; "Shared memory descriptor"; "tcgen05.cp";
"tcgen05.ld"; "tcgen05.alloc"):

* ``idesc``: the instruction-descriptor operand of every ``tcgen05.mma`` (known part; ``idesc_runtime`` says
  whether run-time bits are ORed in, ``idesc_choices`` lists every literal a ``selp`` can pick).
* ``desc_hi`` / ``desc_lbo``: high word and leading-byte-offset field of the A/B smem descriptors.
* ``k_steps``: distinct steps of a descriptor's known part between the MMAs of one K block (+2 = 32 B).
* ``sf_desc_hi`` / ``sf_desc_lbo`` / ``sf_k_steps``: the same for the ``tcgen05.cp`` source descriptors.
* ``sfa_cols`` / ``sfb_cols``: TMEM column offsets (from the allocation base) of the scale-factor operands.
* ``alloc_cols``, ``expect_tx``: values of ``tcgen05.alloc`` column counts and ``mbarrier.arrive.expect_tx``.
* ``*_forms``: instruction spellings (``tcgen05.mma``, ``.cp``, ``.ld``, ``.commit``); ``mma_forms`` without the
  ``.collector::*`` qualifiers, which ``mma_collectors`` lists.
* ``tma_multicast``: how many ``cp.async.bulk.tensor`` loads multicast to the cluster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_K_BLOCK_GAP = 64  # 1 KiB in descriptor units: farther apart is not the same K block
_CAP = 64  # most alternatives one operand may take (selp chains, loop-carried registers)
_NO_DEST = ("st.", "tcgen05.", "mbarrier.", "cp.", "bar.", "barrier.", "fence", "bra", "ret", "prefetch",
            "red.", "elect.", "setp.", "@", "exit", "trap", "nanosleep", "griddepcontrol", "membar")


@dataclass(frozen=True, order=True)
class Sym:
    """``c + sum(terms)``: ``c`` known, each term a run-time quantity named after the register that made it."""

    c: int
    terms: frozenset = frozenset()

    @property
    def known(self) -> bool:
        return not self.terms


def _unknown(name: str) -> list[Sym]:
    return [Sym(0, frozenset({name}))]


def _literal(tok: str) -> int | None:
    t = tok.strip()
    try:
        if re.fullmatch(r"-?0[xX][0-9a-fA-F]+", t):
            return int(t, 16)
        if re.fullmatch(r"-?\d+", t):
            return int(t)
    except ValueError:
        return None
    return None


_OPERAND = re.compile(r"\{[^}]*\}|\[[^\]]*\]|[^,{\[]+")  # a vector, an address, or a plain token


def _split_operands(text: str) -> list[str]:
    """Comma-separated operands; vectors ``{..}`` and addresses ``[..]`` stay whole (PTX never nests them)."""
    return [t.strip() for t in _OPERAND.findall(text) if t.strip()]


@dataclass
class Instr:
    line: int
    op: str
    operands: list[str]


def parse(ptx: str) -> list[Instr]:
    """PTX statements in text order (comments, labels, predicates and directives removed)."""
    out: list[Instr] = []
    text = re.sub(r"/\*.*?\*/", "", ptx, flags=re.S)
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("//", 1)[0]
        for stmt in line.split(";"):
            s = stmt.strip().lstrip("{} \t")  # a leading brace opens or closes a block
            s = re.sub(r"^[$\w]+:\s*", "", s)  # label
            s = re.sub(r"^@!?%\w+\s+", "", s)  # guard predicate
            if not s or s.startswith("."):
                continue
            parts = s.split(None, 1)
            out.append(Instr(lineno, parts[0], _split_operands(parts[1]) if len(parts) > 1 else []))
    return out


class Values:
    """The affine evaluator over one PTX text: ``values(operand)`` -> the list of :class:`Sym` it may hold."""

    def __init__(self, ptx: str):
        self.instrs = parse(ptx)
        self.defs: dict[str, list[tuple[Instr, int | None]]] = {}
        for ins in self.instrs:
            if not ins.operands or ins.op.startswith(_NO_DEST):
                continue
            dst = ins.operands[0]
            if dst.startswith("{"):  # mov.b64 {lo, hi}, %rd: unpack
                for i, d in enumerate(_split_operands(dst[1:-1])):
                    if d.startswith("%"):
                        self.defs.setdefault(d, []).append((ins, i))
            elif re.fullmatch(r"%[\w]+", dst):
                self.defs.setdefault(dst, []).append((ins, None))
        self._memo: dict[str, list[Sym]] = {}
        self._busy: set[str] = set()

    def values(self, operand: str) -> list[Sym]:
        tok = operand.strip()
        if tok.startswith("[") and tok.endswith("]"):
            tok = tok[1:-1].strip()
        m = re.fullmatch(r"(%\w+)\s*\+\s*(-?\w+)", tok)
        if m:  # [%r + imm]
            return _add(self.values(m.group(1)), self.values(m.group(2)))
        lit = _literal(tok)
        if lit is not None:
            return [Sym(lit)]
        if not tok.startswith("%") or tok not in self.defs:
            return _unknown(tok)
        if tok in self._memo:
            return self._memo[tok]
        if tok in self._busy or len(self.defs[tok]) > 1:  # loop-carried or merged at a join: run time
            return _unknown(tok)
        self._busy.add(tok)
        try:
            out: list[Sym] = []
            for ins, part in self.defs[tok]:
                out.extend(self._eval(tok, ins, part))
            res = sorted(set(out))[:_CAP]
        finally:
            self._busy.discard(tok)
        self._memo[tok] = res
        return res

    def _eval(self, reg: str, ins: Instr, part: int | None) -> list[Sym]:
        op, src = ins.op, ins.operands[1:]
        base = op.split(".")[0]
        if part is not None:  # unpack half of a 64-bit value
            vals = self.values(src[0])
            if part == 0:
                return [Sym(v.c & 0xFFFFFFFF, v.terms) for v in vals]
            return [Sym(v.c >> 32) for v in vals]
        if base == "mov" and src and src[0].startswith("{"):  # pack {lo, hi}
            lo_t, hi_t = _split_operands(src[0][1:-1])
            out = []
            for lo in self.values(lo_t):
                for hi in self.values(hi_t):
                    if hi.terms:
                        return _unknown(reg)
                    out.append(Sym((hi.c << 32) + lo.c, lo.terms))
            return out
        if base in ("mov", "cvt") and len(src) == 1 and not op.startswith("cvta"):
            return self.values(src[0])
        if base == "selp" and len(src) == 3:
            return self.values(src[0]) + self.values(src[1])
        if base in ("add", "sub", "or", "and", "shl", "shr", "mul", "xor") and len(src) == 2:
            a, b = self.values(src[0]), self.values(src[1])
            if base == "add":
                return _add(a, b)
            out = []
            for x in a:
                for y in b:
                    r = _binary(base, x, y)
                    if r is None:
                        return _unknown(reg)
                    out.append(r)
            return out
        return _unknown(reg)


def _add(a: list[Sym], b: list[Sym]) -> list[Sym]:
    return [Sym(x.c + y.c, x.terms | y.terms) for x in a for y in b]


def _binary(op: str, x: Sym, y: Sym) -> Sym | None:
    if x.known and y.known:
        return Sym({"sub": x.c - y.c, "or": x.c | y.c, "and": x.c & y.c, "shl": x.c << y.c,
                    "shr": x.c >> y.c, "mul": x.c * y.c, "xor": x.c ^ y.c}[op])
    if op == "sub" and y.known:
        return Sym(x.c - y.c, x.terms)
    if op == "or" and (x.c & y.c) == 0:  # disjoint bits: an add of aligned run-time terms
        return Sym(x.c | y.c, x.terms | y.terms)
    if op in ("shl", "shr") and y.known and not x.known:
        if op == "shr" and x.c % (1 << y.c):
            return None
        name = f"({'+'.join(sorted(x.terms))}){'<<' if op == 'shl' else '>>'}{y.c}"
        return Sym(x.c << y.c if op == "shl" else x.c >> y.c, frozenset({name}))
    return None


# --------------------------------------------------------------------------- the constants of one PTX


@dataclass
class Constants:
    """What :func:`extract` read from one PTX text (see the module docstring for each field)."""

    mma_forms: set = field(default_factory=set)
    mma_collectors: set = field(default_factory=set)
    idesc: set = field(default_factory=set)
    idesc_runtime: bool = False
    idesc_choices: set = field(default_factory=set)
    desc_hi: set = field(default_factory=set)
    desc_lbo: set = field(default_factory=set)
    k_steps: set = field(default_factory=set)
    mmas_per_k_block: set = field(default_factory=set)
    cp_forms: set = field(default_factory=set)
    sf_desc_hi: set = field(default_factory=set)
    sf_desc_lbo: set = field(default_factory=set)
    sf_k_steps: set = field(default_factory=set)
    sfa_cols: list = field(default_factory=list)
    sfb_cols: list = field(default_factory=list)
    ld_forms: set = field(default_factory=set)
    commit_forms: set = field(default_factory=set)
    alloc_cols: set = field(default_factory=set)
    expect_tx: set = field(default_factory=set)
    tma_multicast: int = 0
    cluster_wait_before_alloc: bool = False
    tcgen05_fences: int = 0
    tcgen05_wait_ld: int = 0
    unresolved: list = field(default_factory=list)


_COLLECTOR = re.compile(r"\.collector::\w+::\w+")


def _known(vals: list[Sym], what: str, out: Constants) -> list[Sym]:
    if not vals:
        out.unresolved.append(what)
    return vals


def _steps(descs: list[Sym]) -> tuple[set, set]:
    """Steps of the descriptors' known parts along K, and the number of MMAs per K block.

    Descriptors are grouped by their run-time part; within a group the distinct start-address fields
    (bits 0-13, units of 16 B) are cut into K blocks wherever two neighbours lie 1 KiB or more apart (another
    operand, M wave or scale-factor block sharing the same base register).
    """
    groups: dict[frozenset, set] = {}
    for d in descs:
        groups.setdefault(d.terms, set()).add(d.c & 0xFFFF)
    steps, sizes = set(), set()
    for cs in groups.values():
        run = []
        for c in sorted(cs):
            if run and c - run[-1] >= _K_BLOCK_GAP:
                sizes.add(len(run))
                run = []
            if run:
                steps.add(c - run[-1])
            run.append(c)
        sizes.add(len(run))
    return steps, sizes


def extract(ptx: str) -> Constants:
    """Read the tcgen05 constants of one PTX text.  Operands the evaluator cannot resolve are listed in
    ``unresolved`` (a comparison must treat a non-empty list as a failure)."""
    vals = Values(ptx)
    out = Constants()
    descs: list[Sym] = []
    sf_descs: list[Sym] = []
    first_alloc = None
    cluster_waits: list[int] = []
    for ins in vals.instrs:
        op = ins.op
        if op.startswith("barrier.cluster.wait"):
            cluster_waits.append(ins.line)
        if op.startswith("cp.async.bulk.tensor") and ".multicast::cluster" in op:
            out.tma_multicast += 1
        if op.startswith("tcgen05.fence"):
            out.tcgen05_fences += 1
        if op.startswith("tcgen05.wait::ld"):
            out.tcgen05_wait_ld += 1
        if op.startswith("tcgen05.mma"):
            out.mma_forms.add(_COLLECTOR.sub("", op))
            out.mma_collectors.update(_COLLECTOR.findall(op))
            o = ins.operands
            for d in (o[1], o[2]):
                descs.extend(_known(vals.values(d), f"line {ins.line}: smem descriptor {d}", out))
            idesc = _known(vals.values(o[3]), f"line {ins.line}: idesc {o[3]}", out)
            for v in idesc:
                out.idesc.add(v.c)
                out.idesc_runtime |= not v.known
            # literals a selp may pick for the idesc (CuTe chooses its negate bits at run time)
            out.idesc_choices.update(v.c for v in idesc)
            if "block_scale" in op:
                out.sfa_cols.extend(v.c for v in vals.values(o[4]) if len(v.terms) == 1)
                out.sfb_cols.extend(v.c for v in vals.values(o[5]) if len(v.terms) == 1)
        elif op.startswith("tcgen05.cp"):
            out.cp_forms.add(op)
            sf_descs.extend(_known(vals.values(ins.operands[1]), f"line {ins.line}: cp descriptor", out))
        elif op.startswith("tcgen05.ld"):
            out.ld_forms.add(op)
        elif op.startswith("tcgen05.commit"):
            out.commit_forms.add(op)
        elif op.startswith("tcgen05.alloc"):
            first_alloc = first_alloc or ins.line
            out.alloc_cols.update(v.c for v in vals.values(ins.operands[1]) if v.known)
        elif op.startswith("mbarrier.arrive.expect_tx"):
            out.expect_tx.update(v.c for v in vals.values(ins.operands[-1]) if v.known)
    out.desc_hi = {d.c >> 32 for d in descs}
    out.desc_lbo = {(d.c >> 16) & 0x3FFF for d in descs}
    out.k_steps, out.mmas_per_k_block = _steps(descs)
    out.sf_desc_hi = {d.c >> 32 for d in sf_descs}
    out.sf_desc_lbo = {(d.c >> 16) & 0x3FFF for d in sf_descs}
    out.sf_k_steps, _ = _steps(sf_descs)
    out.sfa_cols = sorted(set(out.sfa_cols))
    out.sfb_cols = sorted(set(out.sfb_cols))
    out.cluster_wait_before_alloc = first_alloc is not None and any(w < first_alloc for w in cluster_waits)
    return out
