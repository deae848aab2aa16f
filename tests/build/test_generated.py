"""generated/ is fresh: the PTX and launch JSON of every shipped config equal what the current emitter writes.

Emit-only (no assembler, no GPU, no marker), so it runs in every tier and CI and has no skip path; it used
to live in test_compile.py, whose module-level ``importorskip("cuda.pathfinder")`` and ``compile`` marker
skipped or deselected it along with the assembler tests.
"""

from __future__ import annotations

import json

import pytest

from ptxgen.build import build
from ptxgen.config import shipped_configs
from tests.helpers import ROOT

GENERATED = ROOT / "generated"


@pytest.mark.parametrize("name", shipped_configs())
def test_generated_is_fresh(name):
    res = build(name)
    assert (GENERATED / f"{name}.ptx").read_text() == res.ptx, "generated/ is stale: run `ptxgen build --all`"
    assert json.loads((GENERATED / f"{name}.json").read_text()) == json.loads(res.launch.to_json())


def test_generated_has_no_strays():
    names = set(shipped_configs())
    assert names, "no shipped configs found"
    assert {p.stem for p in GENERATED.glob("*.ptx")} == names
    assert {p.stem for p in GENERATED.glob("*.json")} == names
