"""A PTX interpreter for the subset ptxgen's emitters produce: one thread's scalar part, async work as effects.

Purpose: check emitted PTX against the Kernel IR on a machine without a GPU
(tests/check/ptx/test_ptx_vs_ir.py).  :func:`parse` reads PTX text (no plan, no config);
:func:`run_thread` executes the ``.entry`` body for one thread and returns its
*effects*: every instruction that acts outside the thread (mbarrier, TMA,
tcgen05, wgmma, thread/cluster barriers, fences, shared/global stores, the
TMEM-slot load, setmaxnreg, nanosleep) as a tuple ``(kind, operands...)`` with
its operands evaluated.  Nothing blocks: ``mbarrier.try_wait`` returns true.

Interpreted (u32/s32/u64/s64/b16/b32/b64 as fits): ``add sub mul.lo mul.wide
mad.lo div rem min max and or xor not shl shr setp (incl. setp.CMP.and/or)
selp mov (incl. mov.b64 {lo, hi}, a symbol's address) cvt cvta ld.param
ld.shared bra ret elect.sync shfl.sync.idx mapa``.  Anything else raises
:class:`PtxInterpError`, so an emitter change that leaves the subset is loud.

Model (what the effects' numbers mean):

* Shared-memory addresses are the thread's 32-bit shared-window addresses.
  The caller gives ``smem_base`` (the value of ``mov.u32 %r, smem``); in a
  cluster, the CTA rank sits in bits 24..27 of a shared::cluster address (so
  the 2-SM peer-bit mask 0xFEFFFFFF selects the even CTA of a pair), and
  ``mapa.shared::cluster.u32 d, a, r`` is modelled as
  ``(a & ~0x0F000000) | r << 24``.  Callers pass ``smem_base`` with the rank
  bits of the executing CTA set.
* ``ld.shared`` (the TMEM slot read after ``tcgen05.alloc``) returns
  ``tmem_base`` and records ``("ld.shared", addr)``.
* f32 registers are never given values: a register never written reads as
  :class:`Sym` (its name).  ``cvt.rn.bf16x2.f32 d, hi, lo`` and
  ``cvt.rn.bf16.f32`` make a :class:`Packed` value naming the source
  registers; stores report the stored elements, in memory order, as
  ``(array, index)`` pairs (``%acc0_5`` -> ``("acc0", 5)``).  Integer
  arithmetic on a Sym raises, so an integer register read before it is
  written is an error, not a silent value.
* ``elect.sync`` elects lane 0 (the lowest lane of a full warp: every
  ``elect.sync`` the emitters produce runs on whole warps; the IR simulator's
  walker makes the same choice for ``Elect``).
* ``shfl.sync.idx``: the thread's warp mates are interpreted on demand. When
  the thread reaches its j-th shfl, the source lane's interpreter is advanced to
  its own j-th shfl and its source register read there (lanes of a warp run
  the same shfls in the same order, as ``.sync`` with a full mask requires).

Effects are the typed tuples of :mod:`ptxgen.check.ptx.effects` (``(kind, operands...)``; addresses are
ints).  The hang watchdog's loads read 0 (never reached here: ``try_wait`` succeeds at once), its
``atom.cas`` returns 0 and ``%globaltimer`` reads 0; a predicated-off ``ld.global.v4.f32`` has no effect;
a split-K spin (``ld.SEM.SCOPE.global.u32``) reads the value the ``setp.ne`` after it waits for, so it
passes at once, like ``try_wait``.

Sources: PTX ISA 8.8, the instruction sections named above and in :mod:`.effects`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from . import effects as E
from .effects import Effect

MASKS = {8: 0xFF, 16: 0xFFFF, 32: 0xFFFFFFFF, 64: 0xFFFFFFFFFFFFFFFF}
RANK_SHIFT = 24
RANK_BITS = 0xF << RANK_SHIFT


class PtxInterpError(Exception):
    """The PTX leaves the interpreted subset, or its execution is undefined here (e.g. arithmetic on an f32)."""


@dataclass(frozen=True)
class Sym:
    """The value of a register the interpreter does not model (an f32 register): its name."""

    name: str

    def element(self) -> tuple[str, int] | str:
        """``%acc0_5`` -> ``("acc0", 5)``; other names as they are."""
        base, _, idx = self.name[1:].rpartition("_")
        return (base, int(idx)) if base and idx.isdigit() else self.name


@dataclass(frozen=True)
class Packed:
    """16-bit values converted from f32 registers, low half first (memory order); see :func:`stored`."""

    elements: tuple


@dataclass(frozen=True)
class ParamAddr:
    """Address of a kernel parameter (``mov.u64 %r, tmap_a``); ``cvta.param`` keeps it."""

    name: str


# ------------------------------------------------------------------ parsing


@dataclass
class Insn:
    """One instruction: ``@guard`` (register, negated), opcode split at dots, raw operand strings."""

    line: int
    text: str
    guard: str | None
    neg: bool
    parts: tuple[str, ...]
    ops: tuple[str, ...]
    fn: object = None


@dataclass
class Program:
    """A parsed ``.entry``: instructions, label -> index, shared and parameter symbol names."""

    insns: list[Insn]
    labels: dict[str, int]
    shared: set[str] = field(default_factory=set)
    params: set[str] = field(default_factory=set)


_LABEL = re.compile(r"^([$\w]+):$")


def _split_operands(s: str) -> list[str]:
    out, depth, cur = [], 0, []
    for ch in s:
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def parse(text: str) -> Program:
    """Parse the (single) ``.entry`` of ``text``.  Raises PtxInterpError on what it cannot read."""
    shared = set(re.findall(r"\.shared\s[^;]*?\s(\w+)\s*\[", text))
    params = set(re.findall(r"\.param\s[^,)]*?\s(\w+)\s*(?:\[\d*\])?\s*[,)]", text))
    start = text.find("{", text.find(".entry"))
    if start < 0:
        raise PtxInterpError("no .entry body")
    body = text[start + 1: text.rindex("}")]
    insns, labels = [], {}
    for lineno, raw in enumerate(body.splitlines(), 1):
        line = raw.split("//", 1)[0].strip()
        if not line:
            continue
        m = _LABEL.match(line)
        if m:
            labels[m.group(1)] = len(insns)
            continue
        if line.startswith((".reg", ".local", ".shared", ".pragma")):
            continue
        for stmt in filter(None, (s.strip() for s in line.split(";"))):
            guard, neg = None, False
            if stmt.startswith("@"):
                g, stmt = stmt.split(None, 1)
                neg = g.startswith("@!")
                guard = g[2:] if neg else g[1:]
            head, _, rest = stmt.partition(" ")
            insns.append(Insn(lineno, stmt, guard, neg, tuple(head.split(".")), tuple(_split_operands(rest))))
    for insn in insns:
        insn.fn = _compile(insn)
    return Program(insns, labels, shared, params)


# ------------------------------------------------------------------ execution


class Thread:
    """One thread's state; :meth:`run` executes until the end or the next ``shfl`` (which the warp resolves)."""

    def __init__(self, prog: Program, *, tid: int, ctaid: int, nctaid: int, ntid: int, rank: int, cluster_size: int,
                 params: dict[str, int], smem_base: int, tmem_base: int, max_steps: int):
        self.prog = prog
        self.lane = tid % 32
        self.smem_base, self.tmem_base = smem_base, tmem_base
        self.params = params
        self.regs: dict[str, object] = {
            "%tid.x": tid, "%tid.y": 0, "%tid.z": 0, "%ntid.x": ntid, "%ctaid.x": ctaid, "%ctaid.y": 0,
            "%nctaid.x": nctaid, "%cluster_ctarank": rank, "%cluster_nctarank": cluster_size,
            "%laneid": tid % 32, "%warpid": tid // 32, "%clusterid.x": ctaid // cluster_size,
            "%cluster_ctaid.x": rank, "%nclusterid.x": nctaid // cluster_size,
            "%globaltimer": 0,  # a stopped clock: nothing blocks here, so no watchdog budget expires
        }
        self.effects: list[Effect] = []
        self.pc = 0
        self.steps = 0
        self.max_steps = max_steps
        self.shfl_src: list[tuple[int, object]] = []  # (source lane, this lane's source value) per shfl
        self.waiting: Insn | None = None  # the shfl this thread stopped at
        self.done = False

    def get(self, name: str):
        v = self.regs.get(name)
        return Sym(name) if v is None else v

    def run(self) -> None:
        insns, n = self.prog.insns, len(self.prog.insns)
        while self.pc < n:
            insn = insns[self.pc]
            self.steps += 1
            if self.steps > self.max_steps:
                raise PtxInterpError(f"more than {self.max_steps} instructions executed (endless loop?) at "
                                     f"line {insn.line}: {insn.text}")
            if insn.guard is not None:
                p = self.regs.get(insn.guard)
                if not isinstance(p, bool):
                    raise PtxInterpError(f"line {insn.line}: guard {insn.guard} read before any setp wrote it")
                if p == insn.neg:
                    self.pc += 1
                    continue
            try:
                nxt = insn.fn(self)
            except PtxInterpError:
                raise
            except (TypeError, KeyError, ValueError, ZeroDivisionError) as exc:
                raise PtxInterpError(f"line {insn.line}: {insn.text}: {type(exc).__name__}: {exc}") from None
            if nxt == "shfl":
                self.waiting = insn
                return
            if nxt == "ret":
                break
            self.pc = self.pc + 1 if nxt is None else nxt
        self.done = True

    def resume(self, value) -> None:
        insn, self.waiting = self.waiting, None
        self.regs[insn.ops[0]] = value
        self.pc += 1


class Warp:
    """Lanes of one warp, created and advanced on demand (only shfl needs them)."""

    def __init__(self, make):
        self.make = make
        self.lanes: dict[int, Thread] = {}

    def lane(self, lane: int) -> Thread:
        t = self.lanes.get(lane)
        if t is None:
            t = self.lanes[lane] = self.make(lane)
        return t

    def src_at(self, lane: int, j: int, depth: int = 0):
        """Lane ``lane``'s source value at its ``j``-th shfl."""
        if depth > 64:
            raise PtxInterpError("shfl resolution does not terminate")
        t = self.lane(lane)
        while len(t.shfl_src) <= j:
            self.step(t, depth + 1)
            if t.done:
                raise PtxInterpError(f"lane {lane} ended after {len(t.shfl_src)} shfl, another lane reached shfl #{j}")
        return t.shfl_src[j][1]

    def step(self, t: Thread, depth: int = 0) -> None:
        """Resolve ``t``'s pending shfl (if any) and run it to its next stop."""
        if t.waiting is not None:
            j = len(t.shfl_src) - 1
            t.resume(self.src_at(t.shfl_src[j][0], j, depth))
        t.run()


def run_thread(prog: Program | str, *, tid: int, ctaid: int, nctaid: int, ntid: int, rank: int = 0,
               cluster_size: int = 1, params: dict[str, int], smem_base: int, tmem_base: int = 0,
               max_steps: int = 2_000_000) -> list[Effect]:
    """Execute ``prog`` for thread ``tid`` of CTA ``ctaid``; return its effects in program order.

    params: values of the ``.param`` scalars by name (``m``, ``n``, ``k``, ``d_ptr``).
    smem_base: the shared-window address of the dynamic shared memory, rank bits included (module docstring).
    Raises PtxInterpError (unknown instruction, endless loop, arithmetic on an unmodelled value).
    """
    if isinstance(prog, str):
        prog = parse(prog)
    warp0 = tid - tid % 32

    def make(lane: int) -> Thread:
        return Thread(prog, tid=warp0 + lane, ctaid=ctaid, nctaid=nctaid, ntid=ntid, rank=rank,
                      cluster_size=cluster_size, params=params, smem_base=smem_base, tmem_base=tmem_base,
                      max_steps=max_steps)

    warp = Warp(make)
    t = warp.lane(tid % 32)
    while not t.done:
        warp.step(t)
    return t.effects


# ------------------------------------------------------------------ instruction semantics


def _width(parts) -> int:
    for p in reversed(parts):
        if p[:1] in "usbf" and p[1:].isdigit():
            return int(p[1:])
    return 32


def _signed(parts) -> bool:
    return any(p[:1] == "s" and p[1:].isdigit() for p in parts)


def _to_signed(v: int, bits: int) -> int:
    return v - (1 << bits) if v >> (bits - 1) & 1 else v


def _int(text: str) -> int | None:
    t = text.strip()
    neg = t.startswith("-")
    t = t[1:] if neg else t
    try:
        v = int(t, 16) if t.lower().startswith("0x") else int(t, 10)
    except ValueError:
        return None
    return -v if neg else v


def _src(text: str):
    """A getter ``f(thread) -> value`` for a register or immediate operand."""
    v = _int(text)
    if v is not None:
        return lambda t: v
    if text.startswith("%"):
        return lambda t: t.get(text)
    raise PtxInterpError(f"cannot read operand {text!r}")


def _addr(text: str):
    """A getter for ``[reg]``, ``[reg+imm]`` or ``[imm]``."""
    if not (text.startswith("[") and text.endswith("]")):
        raise PtxInterpError(f"expected a memory operand, got {text!r}")
    inner = text[1:-1].strip()
    m = re.fullmatch(r"(%[\w.]+)\s*([+-]\s*\w+)?", inner)
    if m:
        base, off = m.group(1), _int(m.group(2).replace(" ", "")) if m.group(2) else 0
        return lambda t: _need_int(t.get(base), base) + off
    v = _int(inner)
    if v is not None:
        return lambda t: v
    raise PtxInterpError(f"cannot read address {text!r}")


def _need_int(v, what: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise PtxInterpError(f"{what} holds {v!r}, not an integer")
    return v


def _vec(text: str) -> list[str]:
    if not (text.startswith("{") and text.endswith("}")):
        return [text]
    return [s.strip() for s in text[1:-1].split(",")]


def stored(element: tuple, fmt: str) -> tuple:
    """The normal form of an f32 register element converted to ``fmt``: bf16 (the default store type) is the
    element itself, f16 is tagged ``("f16", array, index)`` (so a store of the wrong type differs)."""
    return element if fmt == "bf16" else (fmt, *element)


def _elements(v) -> tuple:
    """Stored elements (memory order) of a stored register value."""
    if isinstance(v, Packed):
        return v.elements
    if isinstance(v, Sym):
        return (v.element(),)
    return (("int", v),)


def _cta_group(parts) -> int:
    for p in parts:
        if p.startswith("cta_group::"):
            return int(p.split("::")[1])
    return 1


_CMPS = {
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b, "lo": lambda a, b: a < b, "ls": lambda a, b: a <= b,
    "hi": lambda a, b: a > b, "hs": lambda a, b: a >= b,
}


def _binop(op: str, signed: bool, bits: int):
    mask = MASKS[bits]

    def s(x):
        return _to_signed(x & mask, bits) if signed else x & mask

    if op == "add":
        return lambda a, b: (a + b) & mask
    if op == "sub":
        return lambda a, b: (a - b) & mask
    if op == "mul":
        return lambda a, b: (s(a) * s(b)) & mask
    if op == "div":
        def div(a, b):
            a, b = s(a), s(b)
            q = abs(a) // abs(b)
            return (-q if (a < 0) != (b < 0) else q) & mask
        return div
    if op == "rem":
        def rem(a, b):
            a, b = s(a), s(b)
            r = abs(a) % abs(b)
            return (-r if a < 0 else r) & mask
        return rem
    if op == "min":
        return lambda a, b: min(s(a), s(b)) & mask
    if op == "max":
        return lambda a, b: max(s(a), s(b)) & mask
    if op == "and":
        return lambda a, b: (a & b) & mask if not isinstance(a, bool) else a and b
    if op == "or":
        return lambda a, b: (a | b) & mask if not isinstance(a, bool) else a or b
    if op == "xor":
        return lambda a, b: (a ^ b) & mask if not isinstance(a, bool) else a != b
    if op == "shl":
        return lambda a, b: (a << min(b, bits)) & mask
    if op == "shr":
        return lambda a, b: (s(a) >> min(b, bits)) & mask
    raise PtxInterpError(f"no binary op {op}")


def _float(insn: Insn):
    """f32 arithmetic (``mul.f32``, ``add.f32``, ``ex2.approx``, ``rcp.approx``): the destination holds a value the
    interpreter does not model, so it reads as its own name afterwards (a store of it names that register)."""
    d = insn.ops[0]

    def run(t):
        t.regs.pop(d, None)
    return run


def _arith(insn: Insn):
    parts, ops = insn.parts, insn.ops
    op = parts[0]
    if "f32" in parts:
        return _float(insn)
    bits, signed = _width(parts), _signed(parts)
    d = ops[0]
    if op == "mad":  # mad.lo
        a, b, c = map(_src, ops[1:4])
        mask = MASKS[bits]

        def mad(t):
            t.regs[d] = (_need_int(a(t), ops[1]) * _need_int(b(t), ops[2]) + _need_int(c(t), ops[3])) & mask
        return mad
    if op == "mul" and "hi" in parts:  # mul.hi: the upper half of the double-width product
        a, b = map(_src, ops[1:3])
        mask = MASKS[bits]

        def high(t):
            x, y = _need_int(a(t), ops[1]), _need_int(b(t), ops[2])
            if signed:
                x, y = _to_signed(x, bits), _to_signed(y, bits)
            t.regs[d] = ((x * y) >> bits) & mask
        return high
    if op == "mul" and "wide" in parts:
        a, b = map(_src, ops[1:3])
        wmask = MASKS[2 * bits]

        def wide(t):
            x, y = _need_int(a(t), ops[1]), _need_int(b(t), ops[2])
            if signed:
                x, y = _to_signed(x, bits), _to_signed(y, bits)
            t.regs[d] = (x * y) & wmask
        return wide
    if op == "not":
        a = _src(ops[1])
        mask = MASKS[bits]

        def not_(t):
            v = a(t)
            t.regs[d] = (not v) if isinstance(v, bool) else ~_need_int(v, ops[1]) & mask
        return not_
    f = _binop(op, signed, bits)
    a, b = _src(ops[1]), _src(ops[2])
    pred = parts[-1] == "pred"

    def arith(t):
        x, y = a(t), b(t)
        if pred:
            t.regs[d] = bool(f(x, y))
            return
        t.regs[d] = f(_need_int(x, ops[1]), _need_int(y, ops[2]))
    return arith


def _setp(insn: Insn):
    parts, ops = insn.parts, insn.ops
    cmp = _CMPS[parts[1]]
    boolop = parts[2] if parts[2] in ("and", "or", "xor") else None
    bits, signed = _width(parts), _signed(parts)
    mask = MASKS[bits]
    dests = ops[0].split("|")
    a, b = _src(ops[1]), _src(ops[2])
    c = ops[3] if boolop else None
    neg_c = bool(c) and c.startswith("!")
    c = c[1:] if neg_c else c

    def setp(t):
        x, y = _need_int(a(t), ops[1]) & mask, _need_int(b(t), ops[2]) & mask
        if signed:
            x, y = _to_signed(x, bits), _to_signed(y, bits)
        r = cmp(x, y)
        if boolop:
            q = t.regs.get(c)
            if not isinstance(q, bool):
                raise PtxInterpError(f"line {insn.line}: predicate {c} read before any setp wrote it")
            q = q != neg_c
            r = r and q if boolop == "and" else (r or q if boolop == "or" else r != q)
        t.regs[dests[0]] = r
        if len(dests) > 1 and dests[1] != "_":
            t.regs[dests[1]] = not r
    return setp


def _selp(insn: Insn):
    d, a, b, p = insn.ops[0], _src(insn.ops[1]), _src(insn.ops[2]), insn.ops[3]

    def selp(t):
        c = t.regs.get(p)
        if not isinstance(c, bool):
            raise PtxInterpError(f"line {insn.line}: predicate {p} read before any setp wrote it")
        t.regs[d] = a(t) if c else b(t)
    return selp


def _mov(insn: Insn):
    d, s = insn.ops[0], insn.ops[1]
    bits = _width(insn.parts)
    if d.startswith("{"):  # mov.b32 {lo, hi}, w: the 16-bit halves of a packed word (element 0 in the low half)
        dsts = _vec(d)
        a = _src(s)

        def unpack(t):
            v = a(t)
            if not isinstance(v, Packed) or len(v.elements) != len(dsts):
                raise PtxInterpError(f"line {insn.line}: unpacking {v!r}: only packed 16-bit pairs are interpreted")
            for r, e in zip(dsts, v.elements):
                t.regs[r] = Packed((e,))
        return unpack
    if s.startswith("{"):  # mov.b64 d, {lo, hi}: element 0 in the low bits
        halves = [_src(x) for x in _vec(s)]
        w = bits // len(halves)

        def pack(t):
            v = 0
            for i, h in enumerate(halves):
                v |= (_need_int(h(t), s) & MASKS[w]) << (w * i)
            t.regs[d] = v
        return pack
    if re.fullmatch(r"[A-Za-z_]\w*", s):  # a symbol's address
        def sym(t):
            if s in t.prog.shared:
                t.regs[d] = t.smem_base
            elif s in t.prog.params:
                t.regs[d] = ParamAddr(s)
            else:
                raise PtxInterpError(f"line {insn.line}: unknown symbol {s}")
        return sym
    a = _src(s)
    mask = MASKS[bits]

    def mov(t):
        v = a(t)
        t.regs[d] = v & mask if isinstance(v, int) and not isinstance(v, bool) else v
    return mov


def _cvt(insn: Insn):
    parts, ops = insn.parts, insn.ops
    d = ops[0]
    if "bf16x2" in parts or "f16x2" in parts:  # cvt.rn.{bf16|f16}x2.f32 d, hi, lo
        hi, lo = _src(ops[1]), _src(ops[2])
        fmt = parts[2].removesuffix("x2")
        return lambda t: t.regs.__setitem__(d, Packed(tuple(stored(e, fmt) for e in (*_elements(lo(t)),
                                                                                    *_elements(hi(t))))))
    if "bf16" in parts or "f16" in parts:
        a = _src(ops[1])
        fmt = "bf16" if "bf16" in parts else "f16"
        return lambda t: t.regs.__setitem__(d, Packed(tuple(stored(e, fmt) for e in _elements(a(t)))))
    if parts[0] == "cvta":
        a = _src(ops[1])
        return lambda t: t.regs.__setitem__(d, a(t))
    types = [p for p in parts[1:] if p[:1] in "usb" and p[1:].isdigit()]
    if len(types) != 2:
        raise PtxInterpError(f"line {insn.line}: cvt form not interpreted: {insn.text}")
    dbits, sbits = int(types[0][1:]), int(types[1][1:])
    a = _src(ops[1])

    def cvt(t):
        v = _need_int(a(t), ops[1]) & MASKS[sbits]
        if types[1][0] == "s":
            v = _to_signed(v, sbits)
        t.regs[d] = v & MASKS[dbits]
    return cvt


def _ld(insn: Insn):
    parts, ops = insn.parts, insn.ops
    d = ops[0]
    if parts[1] == "param":
        name = ops[1].strip("[] ")

        def ld_param(t):
            if name not in t.params:
                raise PtxInterpError(f"line {insn.line}: no value for parameter {name}")
            t.regs[d] = t.params[name]
        return ld_param
    if parts[1] == "shared":
        a = _addr(ops[1])

        def ld_shared(t):
            addr = a(t)
            t.effects.append(E.LdShared(addr))
            t.regs[d] = t.tmem_base
        return ld_shared
    if parts[1] in ("acquire", "relaxed") and tuple(parts[3:]) == ("global", "u32"):  # a split-K counter spin
        return _ld_spin(insn)
    if tuple(parts[1:]) == ("global", "v4", "f32"):  # a split-K partial chunk
        a = _addr(ops[1])
        n = len(_vec(ops[0]))

        def ld_partial(t):
            t.effects.append(E.LdGlobalF32(a(t), n))
            for r in _vec(ops[0]):
                t.regs.pop(r, None)  # an f32 value the interpreter does not model
        return ld_partial
    if tuple(parts[1:]) == ("volatile", "global", "u32"):  # only the watchdog flag read; other global loads stay loud
        a = _addr(ops[1])

        def ld_global(t):  # the watchdog's abort flag: no wait expires in this model, so it reads 0
            t.effects.append(E.LdGlobal(a(t)))
            t.regs[d] = 0
        return ld_global
    raise PtxInterpError(f"line {insn.line}: load not interpreted: {insn.text}")


def _ld_spin(insn: Insn):
    """``ld.SEM.SCOPE.global.u32 d, [a]`` of a counter spin: it reads the value the ``setp.ne.u32 p, d, V`` after
    it compares with (nothing blocks in this model), so the loop passes at once."""
    parts, ops = insn.parts, insn.ops
    d, a, sem, scope = ops[0], _addr(ops[1]), parts[1], parts[2]

    def ld_spin(t):
        t.effects.append(E.LdGlobalU32(sem, scope, a(t)))
        nxt = t.prog.insns[t.pc + 1] if t.pc + 1 < len(t.prog.insns) else None
        awaited = _int(nxt.ops[2]) if nxt is not None and nxt.parts[:2] == ("setp", "ne") and nxt.ops[1] == d else None
        t.regs[d] = awaited if awaited is not None else 0
    return ld_spin


def _red(insn: Insn):
    """``red.SEM.SCOPE.global.add.u32 [a], v`` (a split-K counter increment)."""
    parts, ops = insn.parts, insn.ops
    if len(parts) != 6 or parts[3:] != ("global", "add", "u32"):
        raise PtxInterpError(f"line {insn.line}: red form not interpreted: {insn.text}")
    return _effect(insn, E.RedGlobal, _const(parts[1]), _const(parts[2]), _addr(ops[0]), _src(ops[1]))


def _atom(insn: Insn):
    """``atom.global.cas.b32 d, [a], cmp, new`` (the watchdog's claim): effect, and the old word reads 0."""
    parts, ops = insn.parts, insn.ops
    if tuple(parts[1:]) != ("global", "cas", "b32"):
        raise PtxInterpError(f"line {insn.line}: atom form not interpreted: {insn.text}")
    d, a, cmp_, new = ops[0], _addr(ops[1]), _src(ops[2]), _src(ops[3])

    def atom(t):
        t.effects.append(E.AtomCas(a(t), cmp_(t), new(t)))
        t.regs[d] = 0
    return atom


def _bra(insn: Insn):
    target = insn.ops[0]

    def bra(t):
        try:
            return t.prog.labels[target]
        except KeyError:
            raise PtxInterpError(f"line {insn.line}: no label {target}") from None
    return bra


def _elect(insn: Insn):
    dests = insn.ops[0].split("|")

    def elect(t):
        if dests[0] != "_":
            t.regs[dests[0]] = 0
        t.regs[dests[1]] = t.lane == 0
    return elect


def _shfl(insn: Insn):
    if insn.parts[2] != "idx":
        raise PtxInterpError(f"line {insn.line}: only shfl.sync.idx is interpreted")
    src, lane, clamp = _src(insn.ops[1]), _src(insn.ops[2]), _src(insn.ops[3])

    def shfl(t):
        c = _need_int(clamp(t), "clamp")
        seg_mask = (c >> 8) & 0x1F
        sl = (t.lane & seg_mask) | (_need_int(lane(t), insn.ops[2]) & (c & 0x1F) & ~seg_mask)
        t.shfl_src.append((sl & 31, src(t)))
        return "shfl"
    return shfl


def _mapa(insn: Insn):
    d, a, r = insn.ops[0], _src(insn.ops[1]), _src(insn.ops[2])

    def mapa(t):
        t.regs[d] = (_need_int(a(t), insn.ops[1]) & ~RANK_BITS & MASKS[32]) | _need_int(r(t), insn.ops[2]) << RANK_SHIFT
    return mapa


def _effect(insn: Insn, effect: type, *getters):
    """An instruction whose execution records ``effect`` (an :mod:`.effects` type) of the getters' values."""
    def eff(t):
        t.effects.append(effect(*(g(t) for g in getters)))
    return eff


def _const(v):
    return lambda t: v


def _tensor(text: str):
    """``[%tmap_a, {col, row}]`` -> (tensor-name getter, [coordinate getters])."""
    inner = text.strip()[1:-1]
    tmap, _, coords = inner.partition(",")
    tmap = tmap.strip()
    cs = [_src(c) for c in _vec(coords.strip())]

    def name(t):
        v = t.get(tmap)
        if not isinstance(v, ParamAddr):
            raise PtxInterpError(f"{tmap} holds {v!r}, not a tensor-map parameter address")
        return v.name.removeprefix("tmap_")
    return name, cs


def _stmatrix(insn: Insn):
    """``stmatrix.sync.aligned.m8n8.x4.shared.b16 [a], {w0..w3}``: this lane's operands, ``("stmatrix", addr,
    elements)`` (where another lane's words land is the simulator's business, not one thread's)."""
    if tuple(insn.parts[1:]) != ("sync", "aligned", "m8n8", "x4", "shared", "b16"):
        raise PtxInterpError(f"line {insn.line}: stmatrix form not interpreted: {insn.text}")
    a = _addr(insn.ops[0])
    vals = [_src(x) for x in _vec(insn.ops[1])]

    def st(t):
        t.effects.append(E.StMatrix(a(t), tuple(e for v in vals for e in _elements(v(t)))))
    return st


def _sem_scope(insn: Insn, sem: str) -> str:
    """Scope of the ``.release``/``.acquire`` qualifier (``cta`` when absent: the PTX default), e.g.
    ``mbarrier.arrive.release.cluster`` -> ``cluster``.  PTX ISA "mbarrier.arrive", "mbarrier.test_wait/try_wait"."""
    parts = insn.parts
    if sem not in parts:
        return "cta"
    i = parts.index(sem)
    if i + 1 >= len(parts) or parts[i + 1] not in ("cta", "cluster"):
        raise PtxInterpError(f"line {insn.line}: .{sem} without a .cta/.cluster scope not interpreted: {insn.text}")
    return parts[i + 1]


def _mbarrier(insn: Insn):
    parts, ops = insn.parts, insn.ops
    space = "cluster" if "shared::cluster" in parts else "cta"
    if parts[1] == "init":
        return _effect(insn, E.MbarrierInit, _addr(ops[0]), _src(ops[1]))
    if parts[1] == "arrive":
        if ops[0] != "_":
            raise PtxInterpError(f"line {insn.line}: arrive state register not interpreted")
        tx = _src(ops[2]) if parts[2] == "expect_tx" else _const(0)
        return _effect(insn, E.MbarrierArrive, _const(space), _addr(ops[1]), tx, _const(_sem_scope(insn, "release")))
    if parts[1] == "try_wait" and parts[2] == "parity":
        p, a, ph = ops[0], _addr(ops[1]), _src(ops[2])
        scope = _sem_scope(insn, "acquire")

        def try_wait(t):
            t.effects.append(E.MbarrierTryWait(a(t), ph(t), scope))
            t.regs[p] = True
        return try_wait
    raise PtxInterpError(f"line {insn.line}: mbarrier form not interpreted: {insn.text}")


def _cp(insn: Insn):
    parts, ops = insn.parts, insn.ops
    if parts[1:3] == ("async", "bulk"):
        if parts[3] == "commit_group":
            return _effect(insn, E.BulkCommit)
        if parts[3] == "wait_group":
            return _effect(insn, E.BulkWait, _src(ops[0]), _const("read" in parts))
        if parts[3] == "tensor" and parts[4] == "2d":
            rest = parts[5:]
            if rest[:2] == ("global", "shared::cta"):  # store: [tmap, {c, r}], [src]
                name, (col, row) = _tensor(ops[0])
                return _effect(insn, E.TmaStore, name, _addr(ops[1]), col, row)
            dst = _addr(ops[0])
            name, (col, row) = _tensor(ops[1])
            bar = _addr(ops[2])
            mask = _src(ops[3]) if "multicast::cluster" in parts else _const(0)
            hinted = "L2::cache_hint" in parts
            if len(ops) != 3 + ("multicast::cluster" in parts) + hinted:
                raise PtxInterpError(f"line {insn.line}: operands do not match the form (CTA mask, cache policy)")
            policy = _src(ops[-1]) if hinted else _const("none")
            return _effect(insn, E.TmaLoad, name, dst, col, row, bar, _const(_cta_group(parts)), mask, policy)
    raise PtxInterpError(f"line {insn.line}: cp form not interpreted: {insn.text}")


def _tcgen05(insn: Insn):
    parts, ops = insn.parts, insn.ops
    what, g = parts[1], _const(_cta_group(parts))
    if what == "alloc":
        return _effect(insn, E.TmemAlloc, g, _addr(ops[0]), _src(ops[1]))
    if what == "relinquish_alloc_permit":
        return _effect(insn, E.TmemRelinquish, g)
    if what == "dealloc":
        return _effect(insn, E.TmemDealloc, g, _src(ops[0]), _src(ops[1]))
    if what.startswith("fence::"):
        return _effect(insn, E.TcgenFence, _const(what.split("::")[1].removesuffix("_thread_sync")))
    if what == "mma" and "block_scale" in parts:  # [d], adesc, bdesc, idesc, [sfa], [sfb], p
        kind = next((p.split("::")[1] for p in parts if p.startswith("kind::")), None)
        scale_vec = parts[parts.index("block_scale") + 1] if parts[-1] != "block_scale" else None
        if len(ops) != 7:
            raise PtxInterpError(f"line {insn.line}: block-scaled mma takes 7 operands: {insn.text}")
        return _effect(insn, E.UmmaBlockScaled, g, _const(kind), _const(scale_vec), _addr(ops[0]),
                       _src(ops[1]), _src(ops[2]), _src(ops[3]), _addr(ops[4]), _addr(ops[5]), _pred(insn, ops[6]))
    if what == "mma":
        return _effect(insn, E.Umma, g, _addr(ops[0]), _src(ops[1]), _src(ops[2]), _src(ops[3]),
                       _pred(insn, ops[4]))
    if what == "cp":  # tcgen05.cp.cta_group::G.<shape>[.<multicast>] [taddr], sdesc
        shape = ".".join(p for p in parts[2:] if not p.startswith("cta_group"))
        return _effect(insn, E.TmemCopy, g, _addr(ops[0]), _src(ops[1]), _const(shape))
    if what == "commit":
        mask = _src(ops[1]) if "multicast::cluster" in parts else _const(0)
        if ("multicast::cluster" in parts) != (len(ops) == 2):
            raise PtxInterpError(f"line {insn.line}: commit operands do not match its multicast qualifier")
        return _effect(insn, E.UmmaCommit, g, _addr(ops[0]), mask)
    if what == "ld":
        regs = _vec(ops[0])
        n = int(next(p for p in parts if p.startswith("x") and p[1:].isdigit())[1:])
        if n != len(regs):
            raise PtxInterpError(f"line {insn.line}: .x{n} with {len(regs)} destination registers")
        array = Sym(regs[0]).element()[0]
        return _effect(insn, E.TmemLoad, _addr(ops[1]), _const(n), _const(array))
    if what.startswith("wait::ld"):
        return _effect(insn, E.TmemWaitLd)
    raise PtxInterpError(f"line {insn.line}: tcgen05 form not interpreted: {insn.text}")


def _pred(insn: Insn, name: str):
    def get(t):
        p = t.regs.get(name)
        if not isinstance(p, bool):
            raise PtxInterpError(f"line {insn.line}: predicate {name} read before any setp wrote it")
        return p
    return get


def _wgmma(insn: Insn):
    parts, ops = insn.parts, insn.ops
    if parts[1] == "fence":
        return _effect(insn, E.WgmmaFence)
    if parts[1] == "commit_group":
        return _effect(insn, E.WgmmaCommit)
    if parts[1] == "wait_group":
        return _effect(insn, E.WgmmaWait, _src(ops[0]))
    if parts[1] == "mma_async":
        shape = next(p for p in parts if p.startswith("m64n"))
        n, k = (int(x) for x in shape[4:].split("k"))
        atype = parts[parts.index(shape) + 2]  # .m64nNkK.f32.<atype>.<btype>
        regs = _vec(ops[0])
        if len(regs) != n // 2:
            raise PtxInterpError(f"line {insn.line}: m64n{n} takes {n // 2} accumulator registers, got {len(regs)}")
        # 16-bit inputs: scale-a, scale-b, transpose-a, transpose-b; 8-bit inputs (K-major only): no transposes
        want = ("1", "1", "0", "0") if atype in ("bf16", "f16") else ("1", "1")
        if tuple(ops[4:]) != want or (atype, k) not in (("bf16", 16), ("e4m3", 32)) or parts[parts.index(shape) + 3] != atype:
            raise PtxInterpError(f"line {insn.line}: wgmma form {shape}.{atype} with immediates {ops[4:]} is not "
                                 "bf16 k16 (1, 1, 0, 0) or e4m3 k32 (1, 1), K-major")
        return _effect(insn, E.Wgmma, _const(Sym(regs[0]).element()[0]), _const(n), _src(ops[1]), _src(ops[2]),
                       _pred(insn, ops[3]), _const(k), _const(atype))
    raise PtxInterpError(f"line {insn.line}: wgmma form not interpreted: {insn.text}")


def _st(insn: Insn):
    parts, ops = insn.parts, insn.ops
    space = parts[2] if parts[1] == "volatile" else parts[1]
    a = _addr(ops[0])
    vals = [_src(x) for x in _vec(ops[1])]
    if parts[1] in ("relaxed", "release") and tuple(parts[3:]) == ("global", "u32"):  # a split-K counter reset
        return _effect(insn, E.StGlobalSemU32, _const(parts[1]), _const(parts[2]), a, vals[0])
    if space == "global" and parts[-1] == "f32":  # a split-K partial chunk (st.global.v4.f32)
        def st_partial(t):
            t.effects.append(E.StGlobalF32(a(t), tuple(e for v in vals for e in _elements(v(t)))))
        return st_partial
    if space == "global" and parts[-1] == "u32":  # a 32-bit word (the watchdog record)
        def st_global_word(t):
            t.effects.append(E.StGlobalU32(a(t), vals[0](t)))
        return st_global_word
    if space == "shared":
        def st_shared(t):
            els = tuple(e for v in vals for e in _elements(v(t)))
            t.effects.append(E.StShared(a(t), els))
        return st_shared
    if space == "global":
        def st_global(t):
            base = a(t)
            els = [e for v in vals for e in _elements(v(t))]
            for j, e in enumerate(els):  # bf16 elements, 2 bytes each
                t.effects.append(E.StGlobal(base + 2 * j, e))
        return st_global
    raise PtxInterpError(f"line {insn.line}: store not interpreted: {insn.text}")


def _bar(insn: Insn):
    if insn.parts[0] == "barrier" and insn.parts[1] == "cluster":
        if insn.parts[2] not in ("arrive", "wait"):
            raise PtxInterpError(f"line {insn.line}: barrier.cluster form not interpreted: {insn.text}")
        return _effect(insn, E.BarrierClusterArrive if insn.parts[2] == "arrive" else E.BarrierClusterWait)
    if insn.parts[1] not in ("sync",):
        raise PtxInterpError(f"line {insn.line}: barrier form not interpreted: {insn.text}")
    n = _src(insn.ops[1]) if len(insn.ops) > 1 else _const(None)
    return _effect(insn, E.BarSync, _src(insn.ops[0]), n)


def _createpolicy(insn: Insn):
    """``createpolicy.fractional.L2::<hint>.b64 d, 1.0``: the policy register holds the hint's name (the
    ``tma.load`` effect that uses it reports it)."""
    if insn.parts[1] != "fractional" or not insn.parts[2].startswith("L2::") or insn.ops[1:] != ("1.0",):
        raise PtxInterpError(f"line {insn.line}: createpolicy form not interpreted: {insn.text}")
    d, hint = insn.ops[0], insn.parts[2].removeprefix("L2::")

    def create(t):
        t.regs[d] = hint
    return create


def _fence(insn: Insn):
    if insn.parts[1] == "proxy" and insn.parts[2] == "async":
        return _effect(insn, E.FenceProxyAsync)
    if insn.parts[1] == "mbarrier_init":
        return _effect(insn, E.FenceMbarrierInit)
    raise PtxInterpError(f"line {insn.line}: fence form not interpreted: {insn.text}")


_ARITH_OPS = ("add", "sub", "mul", "mad", "fma", "div", "rem", "min", "max", "and", "or", "xor", "not", "shl", "shr")
_FAMILIES = {
    **{op: _arith for op in _ARITH_OPS},
    "ex2": _float, "rcp": _float,
    "setp": _setp, "selp": _selp, "mov": _mov, "cvt": _cvt, "cvta": _cvt, "ld": _ld, "bra": _bra,
    "ret": lambda insn: (lambda t: "ret"), "exit": lambda insn: (lambda t: "ret"),
    "elect": _elect, "shfl": _shfl, "mapa": _mapa, "mbarrier": _mbarrier, "cp": _cp, "tcgen05": _tcgen05,
    "wgmma": _wgmma, "createpolicy": _createpolicy, "st": _st, "atom": _atom, "red": _red, "bar": _bar,
    "barrier": _bar, "fence": _fence,
    "nanosleep": lambda insn: _effect(insn, E.Nanosleep, _src(insn.ops[0])),
    "stmatrix": _stmatrix,
    "setmaxnreg": lambda insn: _effect(insn, E.SetMaxNReg, _const(insn.parts[1]), _src(insn.ops[0])),
}


def _compile(insn: Insn):
    family = _FAMILIES.get(insn.parts[0])
    if family is None:
        raise PtxInterpError(f"line {insn.line}: instruction not interpreted: {insn.text}")
    return family(insn)
