"""Benchmark shape suites, shipped as data, each split once into a tune half and a report half.

A suite (``ptxgen/suites/<name>.yaml``) lists weights (an ``N x K`` from a model's public config, or a synthetic
shape) and the ``M`` values each is timed at.  :func:`load` expands it into :class:`SuiteShape` rows and marks
each row's half.  The split is a pure function of the suite's ``seed`` and the shapes: within each ``kind``
(``llm``, ``ragged``, ``aspect``), shapes are ordered by ``sha256(f"{seed}:{M}x{N}x{K}")`` and dealt alternately
to ``tune`` and ``report``, so both halves hold every kind and a shape's half never depends on the rest of the
file.  Tuned tables, cost-model constants and defaults are fitted on the tune half only; performance targets are
reported on the report half.

Raises :class:`ptxgen.errors.ConfigError` for an unknown suite, a malformed entry or a repeated shape.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError

SUITES_DIR = Path(__file__).resolve().parent
HALVES = ("tune", "report")
KINDS = ("llm", "ragged", "aspect")


@dataclass(frozen=True)
class SuiteShape:
    """One problem of a suite: ``D[M, N] = A[M, K] @ B[N, K]^T`` (dual GEMM: two B operands of ``[N, K]``).

    kind: ``llm`` (a model's weight), ``ragged`` or ``aspect``.
    label: where the ``N x K`` comes from (``llama3-8b.qkv``) or ``kind`` for synthetic shapes.
    half: ``tune`` or ``report``.
    """

    m: int
    n: int
    k: int
    kind: str
    label: str
    half: str

    @property
    def mnk(self) -> tuple[int, int, int]:
        return (self.m, self.n, self.k)

    def __str__(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"


@dataclass(frozen=True)
class Suite:
    """A named, split list of shapes (see the module docstring)."""

    name: str
    seed: int
    shapes: tuple[SuiteShape, ...]

    def half(self, which: str) -> tuple[SuiteShape, ...]:
        """The shapes of one half (``tune``, ``report``) or all of them (``all``).

        Raises:
            ConfigError: ``which`` is none of those.
        """
        if which == "all":
            return self.shapes
        if which not in HALVES:
            raise ConfigError(f"suite half={which!r}: must be one of {', '.join(HALVES)} or all")
        return tuple(s for s in self.shapes if s.half == which)


def names() -> list[str]:
    """The shipped suites' names."""
    return sorted(p.stem for p in SUITES_DIR.glob("*.yaml"))


def _split_key(seed: int, mnk: tuple[int, int, int]) -> str:
    return hashlib.sha256(f"{seed}:{mnk[0]}x{mnk[1]}x{mnk[2]}".encode()).hexdigest()


def split(seed: int, rows: Iterable[tuple[tuple[int, int, int], str]]) -> dict[tuple[int, int, int], str]:
    """The half of each ``(mnk, kind)`` row: per kind, hash order, dealt alternately (tune first)."""
    by_kind: dict[str, list[tuple[int, int, int]]] = {}
    for mnk, kind in rows:
        by_kind.setdefault(kind, []).append(mnk)
    out = {}
    for mnks in by_kind.values():
        for i, mnk in enumerate(sorted(mnks, key=lambda s: _split_key(seed, s))):
            out[mnk] = HALVES[i % 2]
    return out


def _positive(where: str, field: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where}.{field}={value!r}: must be a positive integer")
    return value


def parse(doc: Any, source: str) -> Suite:
    """A :class:`Suite` from a parsed YAML document (``source`` names it in errors)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("groups"), list):
        raise ConfigError(f"{source}: a suite is a mapping with a list of groups")
    seed = _positive(source, "seed", doc.get("seed"))
    rows: list[tuple[tuple[int, int, int], str, str]] = []
    for i, g in enumerate(doc["groups"]):
        where = f"{source}: groups[{i}]"
        if not isinstance(g, dict):
            raise ConfigError(f"{where}: must be a mapping")
        kind = g.get("kind")
        if kind not in KINDS:
            raise ConfigError(f"{where}.kind={kind!r}: must be one of {', '.join(KINDS)}")
        n, k = _positive(where, "n", g.get("n")), _positive(where, "k", g.get("k"))
        ms = g.get("m")
        if not isinstance(ms, list) or not ms:
            raise ConfigError(f"{where}.m={ms!r}: must be a non-empty list of M values")
        label = f"{g['model']}.{g['weight']}" if kind == "llm" else kind
        for m in ms:
            rows.append(((_positive(where, "m", m), n, k), kind, label))
    seen: set[tuple[int, int, int]] = set()
    for mnk, _, _ in rows:
        if mnk in seen:
            raise ConfigError(f"{source}: shape {mnk[0]}x{mnk[1]}x{mnk[2]} is listed twice")
        seen.add(mnk)
    halves = split(seed, ((mnk, kind) for mnk, kind, _ in rows))
    shapes = tuple(SuiteShape(*mnk, kind=kind, label=label, half=halves[mnk]) for mnk, kind, label in rows)
    return Suite(name=str(doc.get("name", source)), seed=seed, shapes=shapes)


def load(name: str) -> Suite:
    """The shipped suite ``name`` (``gemm``, ``swiglu``) or a suite file by path.

    Raises:
        ConfigError: no such suite, or the file is malformed.
    """
    path = Path(name)
    if not (path.suffix in (".yaml", ".yml") and path.is_file()):
        path = SUITES_DIR / f"{name}.yaml"
        if not path.is_file():
            raise ConfigError(f"suite={name!r}: no such suite (shipped: {', '.join(names())})")
    with open(path) as f:
        return parse(yaml.safe_load(f), path.name)
