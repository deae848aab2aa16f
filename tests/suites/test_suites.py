"""Shape suites: shipped data, expansion, the fixed tune/report split, errors."""

import pytest

from ptxgen import suites
from ptxgen.errors import ConfigError


@pytest.mark.parametrize("name, at_least", [("gemm", 80), ("swiglu", 24)])
def test_shipped_suite_is_large_and_split_in_halves_of_every_kind(name, at_least):
    s = suites.load(name)
    assert len(s.shapes) >= at_least
    assert len({x.mnk for x in s.shapes}) == len(s.shapes)
    tune, report = s.half("tune"), s.half("report")
    assert len(tune) + len(report) == len(s.shapes)
    for kind in {x.kind for x in s.shapes}:
        n_tune = sum(x.kind == kind for x in tune)
        n_report = sum(x.kind == kind for x in report)
        assert n_tune >= 1 and n_report >= 1 and abs(n_tune - n_report) <= 1, kind


def test_gemm_suite_covers_the_kinds_users_have():
    s = suites.load("gemm")
    mnks = [x.mnk for x in s.shapes]
    assert {1, 16, 64, 128, 256, 512, 1024, 4096, 8192, 16384} <= {m for m, _, _ in mnks}
    assert any(k % 8 for _, _, k in mnks)  # K whose row pitch is not 16-byte aligned
    assert any((2 * k) % 128 and k % 8 == 0 for _, _, k in mnks)  # 16-B but not 128-B aligned pitch
    assert any(k <= 512 for _, _, k in mnks) and any(k >= 32768 for _, _, k in mnks)
    assert any(m >= 65536 and n <= 1024 for m, n, _ in mnks)
    assert any(n <= 64 for _, n, _ in mnks)


def test_split_is_a_function_of_seed_and_shape_only():
    rows = [((m, 4096, 4096), "llm") for m in (1, 16, 64, 128, 256, 512)]
    whole = suites.split(7, rows)
    assert suites.split(7, list(reversed(rows))) == whole
    assert list(whole.values()).count("tune") == 3
    assert suites.split(8, rows) != whole or suites.split(9, rows) != whole


def test_suite_errors_name_the_field():
    with pytest.raises(ConfigError, match="suite='nosuch': no such suite"):
        suites.load("nosuch")
    with pytest.raises(ConfigError, match=r"groups\[0\].kind='big'"):
        suites.parse({"seed": 1, "groups": [{"kind": "big", "n": 1, "k": 1, "m": [1]}]}, "x.yaml")
    with pytest.raises(ConfigError, match=r"groups\[0\].m=0"):
        suites.parse({"seed": 1, "groups": [{"kind": "ragged", "n": 1, "k": 1, "m": [0]}]}, "x.yaml")
    with pytest.raises(ConfigError, match="listed twice"):
        suites.parse({"seed": 1, "groups": [{"kind": "ragged", "n": 2, "k": 3, "m": [1, 1]}]}, "x.yaml")
    with pytest.raises(ConfigError, match="half='both'"):
        suites.load("gemm").half("both")


def test_cli_adds_a_suite_half_to_the_shapes():
    from argparse import Namespace

    from ptxgen.cli import chosen_shapes

    report = [s.mnk for s in suites.load("gemm").half("report")]
    args = Namespace(shape=[(64, 64, 64), report[0]], suite="gemm", half="report")
    assert chosen_shapes(args, ((1, 1, 1),)) == [(64, 64, 64)] + report
    assert chosen_shapes(Namespace(shape=None, suite=None, half="tune"), ((1, 1, 1),)) == ((1, 1, 1),)
    tune = chosen_shapes(Namespace(shape=None, suite="gemm", half="tune"), ())
    assert not set(tune) & set(report)
