"""Config fuzzing: thousands of mutated configs (dicts and YAML files) give either a ConfigError naming a
field, or a config that builds (plan + IR + PTX); never another exception.

Mutations, applied to every shipped config: wrong types in every field; 0, negative and huge values
(2^31, 2^32, 10^30, a 5000-digit int) in every int field; non-UTF-8 and binary files, deeply nested and
malformed YAML, unknown and non-string keys; non-ASCII and path-like names (``../x``); every combination of
epilogue store / swizzle / store_block_n / stages; and a seeded stream of random multi-field mutations.
Every distinct accepted config is built (plan, IR, emit); a seeded sample is verified and assembled here,
all of them with --runslow.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import re
import typing

import pytest
import yaml

from ptxgen.build import build
from ptxgen.build import from_dict as checked_from_dict  # with the plan's budgets
from ptxgen.config import Config, from_dict, load_config, shipped_configs, to_dict
from ptxgen.errors import ConfigError

BASES = {name: to_dict(load_config(name)) for name in shipped_configs()}
SECTIONS = {f.name: f.type for f in dataclasses.fields(Config)}
SECTION_TYPES = {k: v for k, v in typing.get_type_hints(Config).items() if dataclasses.is_dataclass(v)}
FIELDS = ["name", "arch", "kernel", "operands"] + [f"{s}.{f.name}" for s, cls in SECTION_TYPES.items() for f in dataclasses.fields(cls)]
INT_FIELDS = [p for p in FIELDS if isinstance(_v := BASES["level9"].get(p) if "." not in p else
                                              BASES["level9"][p.split(".")[0]][p.split(".")[1]], int)
              and not isinstance(_v, bool)]
KNOWN_PATHS = {"config", *SECTION_TYPES, *FIELDS}

HUGE = [2**31, 2**31 - 1, 2**32, 2**32 + 16, 2**63, 10**30, 10**5000, -(10**5000)]
NUMBERS = [0, -1, -64, 1, 2, 3, 7, 8, 12, 16, 24, 48, 64, 96, 100, 101, 127, 128, 192, 255, 256, 257, 512, 1024,
           1025, *HUGE]
WRONG_TYPES = ["x", "", "128", 1.5, 64.0, float("nan"), float("inf"), True, False, None, [], [64], {}, {"a": 1},
               b"\xff\x00", "\udcff", "ünï", 10**5000]
NAMES = ["../x", "..", ".", "", " ", "a/b", "a\\b", "/abs", "x\x00y", "\x1b[31m", "-rf", "é", "名前", "a" * 65,
         "a.b", "a b", "tab\t", "new\nline", 7, None]
GOOD_NAMES = ["a" * 64, "ok_name-1", "_x", "CON"]


def _get(raw: dict, path: str):
    head, _, tail = path.partition(".")
    return raw[head][tail] if tail else raw[head]


def _set(raw: dict, path: str, value) -> dict:
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()}
    head, _, tail = path.partition(".")
    if tail:
        out[head] = {**out[head], tail: value}
    else:
        out[head] = value
    return out


def _leading_path(message: str) -> str:
    """The field path a ConfigError message starts with (after an optional ``file.yaml:`` prefix)."""
    m = re.match(r"^(?:[\w.-]+\.yaml: )?([A-Za-z_][\w]*(?:\.[\w]+)?)(?:[=:]| \(| key)", message)
    return m.group(1) if m else ""


class Outcome:
    """Accepted configs (deduplicated by content, name aside) and the count of rejections."""

    def __init__(self):
        self.accepted: dict[str, Config] = {}
        self.rejected = 0
        self.cases = 0


def _try(raw, outcome: Outcome, names_field: str | None = None) -> None:
    outcome.cases += 1
    try:
        cfg = checked_from_dict(raw)
    except ConfigError as exc:
        message = str(exc)
        assert "\n" not in message and len(message) < 400, message
        path = _leading_path(message)
        assert path in KNOWN_PATHS or "unknown key" in message, f"ConfigError names no field: {message!r}"
        if names_field is not None:
            assert path == names_field, f"expected {names_field}: {message!r}"
        outcome.rejected += 1
        return
    key = repr(sorted((k, v) for k, v in to_dict(cfg).items() if k != "name"))
    outcome.accepted.setdefault(key, cfg)


TYPE_BASES = ("level9", "h100_128x256")  # wrong types: one base per arch is enough (the schema is arch-blind)
NUMBER_BASES = ("level1", "level6", "level9", "h100_128x128", "h100_256x128")


def _mutations() -> typing.Iterator[tuple[dict, str | None]]:
    """(raw config, field the error must name or None)."""
    for name, base in BASES.items():
        for path in FIELDS if name in TYPE_BASES else ():
            for value in WRONG_TYPES:
                if type(value) is type(_get(base, path)) and path != "name":
                    continue
                strict_field = value is not None and not (isinstance(value, (int, float)) and not isinstance(value, bool)
                                                          and isinstance(_get(base, path), int))
                yield _set(base, path, value), path if strict_field and path != "name" else None
        for path in INT_FIELDS if name in NUMBER_BASES else ():
            for value in NUMBERS:
                yield _set(base, path, value), None
        for value in NAMES:
            yield _set(base, "name", value), "name"
        for value in GOOD_NAMES:
            yield _set(base, "name", value), None
        for section in SECTION_TYPES:
            yield _set(base, section, 5), section
            yield _set(base, section, None), section
            yield _set(base, section, {**base[section], "bogus_key": 1}), f"{section}.bogus_key"
            yield _set(base, section, {**base[section], 3: 1}), section
        yield {**base, "tiles": {}}, "tiles"
        for store, swizzle, sbn, stages, warps in itertools.product(
                ("direct", "tma"), ("none", "128"), (0, 8, 16, 24, 32, 48, 64, 96, 128, 256), (1, 2, 3, 4), (0, 4)):
            yield _set(base, "epilogue", {**base["epilogue"], "store": store, "swizzle": swizzle,
                                          "store_block_n": sbn, "stages": stages, "warps": warps}), None


def _random_mutations(n: int, seed: int = 13) -> typing.Iterator[dict]:
    rng = random.Random(seed)
    pool = NUMBERS + WRONG_TYPES + ["tma", "direct", "128", "none", "all", "one", "separated", "specialized",
                                    "lockstep", "per_thread", "256", "sm_90a", "sm_100a", True, False]
    bases = list(BASES.values())
    for _ in range(n):
        raw = rng.choice(bases)
        for _ in range(rng.randint(1, 4)):
            path = rng.choice(FIELDS)
            raw = _set(raw, path, rng.choice(pool) if rng.random() < 0.7 else _get(rng.choice(bases), path))
        yield raw


@pytest.fixture(scope="module")
def outcome() -> Outcome:
    out = Outcome()
    for raw, field in _mutations():
        _try(raw, out, field)
    for raw in _random_mutations(1000):
        _try(raw, out)
    return out


def _sample(outcome: Outcome, k: int, seed: int = 7) -> list[Config]:
    keys = sorted(outcome.accepted)
    return [outcome.accepted[key] for key in random.Random(seed).sample(keys, min(k, len(keys)))]


def test_mutated_configs_raise_config_error_or_build(outcome):
    """Every mutation: a one-line ConfigError naming a field, or a config whose plan exists (validation builds
    it); a seeded sample of the distinct accepted configs is built to PTX (all of them with --runslow)."""
    assert outcome.cases >= 5000 and outcome.rejected >= 4000 and len(outcome.accepted) >= 300
    for cfg in _sample(outcome, 80):
        res = build(cfg)
        assert res.ptx.startswith("//") and f".entry {res.plan.kernel}" in res.ptx


def test_accepted_sample_verifies_and_assembles(outcome):
    from ptxgen.assemble import assemble
    from ptxgen.check.verify import verify

    picked = {}
    for cfg in _sample(outcome, len(outcome.accepted), seed=3):
        picked.setdefault(cfg.arch, cfg)
    assert set(picked) == {"sm_100a", "sm_90a"}
    for cfg in picked.values():
        res = build(cfg)
        verify(res.kernel)
        assert assemble(res.ptx, cfg.arch).cubin


@pytest.mark.slow
def test_every_accepted_config_builds_and_verifies(outcome):
    from ptxgen.check.verify import verify

    for cfg in outcome.accepted.values():
        verify(build(cfg).kernel)


def _yaml_cases() -> typing.Iterator[tuple[str, bytes]]:
    rng = random.Random(5)
    level9 = yaml.safe_dump(BASES["level9"]).encode()
    yield "latin1", "name: caf\xe9\n".encode("latin-1")
    yield "utf16", "name: x\n".encode("utf-16")
    yield "bom", b"\xef\xbb\xbf" + level9
    yield "nul", level9 + b"\x00"
    yield "empty", b""
    yield "null", b"~\n"
    yield "list", b"- 1\n- 2\n"
    yield "scalar", b"42\n"
    yield "deep_flow", b"[" * 50000 + b"]" * 50000
    yield "deep_flow_in_field", b"name: x\ntile: {block_n: " + b"[" * 30000 + b"]" * 30000 + b"}\n"
    yield "deep_block", "".join(f"{'  ' * i}k{i}:\n" for i in range(3000)).encode()
    yield "huge_int_literal", b"name: x\ntile: {block_n: " + b"9" * 5000 + b"}\n"
    yield "huge_int_ok_digits", b"name: x\ntile: {block_n: " + b"9" * 4000 + b"}\n"
    yield "hex_int", b"name: x\ntile: {block_n: 0x80}\n"
    yield "float", b"name: x\ntile: {block_n: 128.0}\n"
    yield "date", b"name: x\npipeline: {stages: 2024-01-01}\n"
    yield "binary_tag", b"name: !!binary aGVsbG8=\n"
    yield "python_tag", b"name: !!python/object:os.system x\n"
    yield "set", b"name: x\ntile: !!set {a, b}\n"
    yield "alias_bomb", b"a: &a [1,1,1,1]\nb: &b [*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b]\nname: x\n"
    yield "complex_key", b"? [a, b]\n: 1\nname: x\n"
    yield "int_key", b"name: x\n1: 2\n"
    yield "dup_key", b"name: x\nname: y\n"
    yield "tabs", b"name: x\n\ttile: {}\n"
    yield "path_name", b"name: ../x\n"
    yield "unicode_name", "name:名前\n".encode()
    yield "no_name_from_stem", yaml.safe_dump({k: v for k, v in BASES["level9"].items() if k != "name"}).encode()
    for i in range(150):
        data = bytearray(level9)
        for _ in range(rng.randint(1, 8)):
            pos = rng.randrange(len(data))
            data[pos:pos + 1] = bytes([rng.randrange(256)]) if rng.random() < 0.7 else b""
        yield f"flip{i}", bytes(data)
    for i in range(50):
        yield f"random{i}", bytes(rng.randrange(256) for _ in range(rng.randint(1, 400)))


def test_yaml_files_raise_config_error_or_load(tmp_path):
    """Non-UTF-8, binary, deep, huge and malformed files: a one-line ConfigError that names the file, or a config."""
    loaded = rejected = 0
    for label, data in _yaml_cases():
        path = tmp_path / f"{label}.yaml"
        path.write_bytes(data)
        try:
            cfg = load_config(path)
        except ConfigError as exc:
            message = str(exc)
            assert "\n" not in message and len(message) < 400, (label, message)
            assert message.startswith((str(path), path.name)), (label, message)
            rejected += 1
        else:
            assert isinstance(cfg, Config)
            loaded += 1
    assert rejected >= 100 and loaded >= 2  # the flips keep some files valid (e.g. inside comments or names)


def test_python_construction_is_validated_like_yaml(outcome):
    """The constructor, dataclasses.replace and Config.replace reject exactly what from_dict rejects, same message."""
    base = load_config("level9")
    raw0 = to_dict(base)
    for path in FIELDS:
        for value in WRONG_TYPES[:12] + NUMBERS[::3]:
            raw = _set(raw0, path, value)
            try:
                expected = from_dict(raw)
            except ConfigError as exc:
                expected = str(exc)
            head, _, tail = path.partition(".")
            makers = {
                "constructor": lambda: Config(**{k: SECTION_TYPES[k](**v) if k in SECTION_TYPES else v
                                                 for k, v in raw.items()}),
                "dataclasses.replace": lambda: dataclasses.replace(
                    base, **{head: dataclasses.replace(getattr(base, head), **{tail: value}) if tail else value}),
                "Config.replace": lambda: base.replace(**{path: value}),
            }
            for how, make in makers.items():
                try:
                    got = make()
                except ConfigError as exc:
                    got = str(exc)
                assert got == expected, (how, path, value)


def test_name_must_be_a_safe_file_stem():
    base = to_dict(load_config("level1"))
    for bad in NAMES:
        with pytest.raises(ConfigError, match=r"^name=.*: (must be a file stem|expected str)"):
            from_dict(_set(base, "name", bad))
    for good in GOOD_NAMES:
        assert from_dict(_set(base, "name", good)).name == good
