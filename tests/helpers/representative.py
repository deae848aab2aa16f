"""The representative shipped configs: the main tier's share of the per-config simulator sweeps.

The sweeps of every shipped config (the verifier, the simulator's shapes and interleavings, its adversarial
schedules, the PTX-vs-IR differential's drawn cases) run in the slow tier; the main tier runs them on :data:`REPRESENTATIVE`, the
configs that together carry every feature a shipped config carries (:func:`features`).
tests/test_representative.py fails when a shipped config brings a feature none of them carries, naming it, and
when one of them carries nothing the others lack.
"""

from __future__ import annotations

import dataclasses
import functools
import typing

import annotated_types
import pytest

from ptxgen.config import Config, load_config, shipped_configs
from ptxgen.ir import ops as O
from ptxgen.plan import make_plan
from tests.helpers.sim_support import kernel_for

#: One config per feature family: each carries a feature (:func:`features`) no other one here carries.
REPRESENTATIVE = (
    "dual_h100_128x128_lw2",
    "dual_sm100_256x128",
    "fp8_h100_192x128_c2",
    "fp8_h100_64x128",
    "fp8_sm100_128x128",
    "grouped_contiguous_fp8_h100_128x128",
    "grouped_contiguous_h100_128x256_runs",
    "grouped_masked_fp8_h100_128x256_c2",
    "grouped_masked_h100_128x128",
    "h100_128x128",
    "h100_128x128_pp",
    "h100_128x192_sk3",
    "h100_128x80_c2n",
    "h100_64x16_swap",
    "level1",
    "level7",
    "level9",
    "nvfp4_dual_256x128",
)

_PLAN_SKIPPED = ("cfg", "kernel_name", "expr")  # the config itself (its fields count below), a name, an expression tree


def _config_fields(obj, prefix: str = ""):
    """(dotted name, type hint, value) of every field of a config, sections flattened."""
    hints = typing.get_type_hints(type(obj), include_extras=True)
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            yield from _config_fields(value, f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", hints[f.name], value


def _is_number_range(hint) -> bool:
    return any(isinstance(m, annotated_types.Ge) for m in getattr(hint, "__metadata__", ()))


def _record_fields(obj) -> tuple[str, ...] | None:
    """The field names of a record (a dataclass or a NamedTuple, as the launch records are), None for anything else."""
    if dataclasses.is_dataclass(obj):
        return tuple(f.name for f in dataclasses.fields(obj))
    return getattr(type(obj), "_fields", None)


def _plan_fields(obj, path: str = ""):
    """(dotted name, value) of every bool and string of a plan, and None for each absent optional part; tuples of
    parts (operands, MMA streams) contribute each part's fields under ``name[]``."""
    names = _record_fields(obj)
    if names is not None:
        for name in names:
            if name not in _PLAN_SKIPPED:
                yield from _plan_fields(getattr(obj, name), f"{path}.{name}" if path else name)
    elif isinstance(obj, tuple):
        for part in obj:
            if _record_fields(part) is not None:
                yield from _plan_fields(part, f"{path}[]")
    elif obj is None or isinstance(obj, (bool, str)):
        yield path, obj


@functools.cache
def _defaults() -> dict[str, object]:
    return {name: value for name, _, value in _config_fields(Config(name="defaults"))}


@functools.cache
def features(name: str) -> frozenset[tuple]:
    """What the sweeps of shipped config ``name`` exercise, as tuples led by the arch:

    - its family: ``("family", kernel, operands, grouped layout)``;
    - every config field: a choice (bool, string, one of a set) by its value, a number by whether it keeps its
      default (``"default"`` or ``"set"``), the fused epilogue by whether there is one;
    - every bool and string of the plan (barrier protocols, operand splits and formats, epilogue forms, split-K of
      the last wave, ...) and each optional part of the plan it lacks (split-K, FP8 promotion, accumulator ring, ...);
    - the name of every warp role of the built kernel.
    """
    cfg = load_config(name)
    arch = cfg.arch
    out = {(arch, "family", cfg.kernel, cfg.operands, cfg.schedule.grouped)}
    for field, hint, value in _config_fields(cfg):
        if field == "name":
            continue
        if field == "epilogue.expr":
            value = bool(value)
        elif _is_number_range(hint):
            value = "default" if value == _defaults()[field] else "set"
        out.add((arch, field, value))
    out |= {(arch, f"plan.{field}", value) for field, value in _plan_fields(make_plan(cfg))}
    out |= {(arch, "role", role.name) for op in O.walk(kernel_for(name).body) if isinstance(op, O.WarpSwitch)
            for role in op.roles}
    return frozenset(out)


def uncovered(subset) -> dict[tuple, str]:
    """Feature -> the first shipped config carrying it, for each feature of a shipped config no config of ``subset``
    carries."""
    have = set().union(*(features(c) for c in subset))
    out: dict[tuple, str] = {}
    for name in shipped_configs():
        for feature in sorted(features(name) - have, key=repr):
            out.setdefault(feature, name)
    return out


def shipped_params() -> list:
    """Every shipped config as a pytest parameter: the representative ones in the main tier, the others marked
    ``slow``."""
    return [pytest.param(c, marks=() if c in REPRESENTATIVE else pytest.mark.slow) for c in shipped_configs()]
