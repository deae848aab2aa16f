"""Config loading and validation: shipped configs, the level ladder, and every bad-input path."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from ptxgen.build import from_dict  # with the plan's budgets
from ptxgen.config import load_config, shipped_configs, to_dict
from ptxgen.errors import ConfigError

LEVEL_DIFFS = {  # LEVELS.md: each level differs from the one before by these knobs only
    2: {"pipeline.stages", "tma.two_sm"},
    3: {"pipeline.stages", "pipeline.roles"},
    4: {"epilogue.store"},
    5: {"schedule.persistent", "schedule.group"},
    6: {"tile.block_m", "pipeline.stages", "accumulator.stages", "epilogue.warps"},
    7: {"cluster.dual_tile"},
    8: {"tile.block_m", "pipeline.stages", "epilogue.swizzle", "epilogue.store_block_n", "epilogue.stages",
        "epilogue.early_release"},
    9: {"tile.block_m", "tile.block_n", "pipeline.stages", "accumulator.stages", "smem.layout", "mma.lanes",
        "epilogue.release", "tma.l2_promotion", "schedule.group"},
}


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def test_shipped_configs_load():
    names = shipped_configs()
    assert {f"level{i}" for i in range(1, 10)} <= set(names)
    assert sum(load_config(n).arch == "sm_90a" for n in names) >= 3
    for n in names:
        assert load_config(n).name == n
        assert load_config(f"{n}.yaml") == load_config(n)


@pytest.mark.parametrize("level", sorted(LEVEL_DIFFS))
def test_level_ladder_is_a_sequence_of_diffs(level):
    prev = _flat(to_dict(load_config(f"level{level - 1}")))
    cur = _flat(to_dict(load_config(f"level{level}")))
    changed = {k for k in cur if cur[k] != prev[k] and k != "name"}
    assert changed == LEVEL_DIFFS[level]


def test_roundtrip_and_replace():
    cfg = load_config("level9")
    assert from_dict(to_dict(cfg)) == cfg
    assert cfg.replace(**{"tile.block_n": 128}).tile.block_n == 128


BASE = {"name": "t", "arch": "sm_100a", "tile": {"block_m": 128, "block_n": 128}}


@pytest.mark.parametrize("patch, message", [
    ({"tiles": {}}, "tiles: unknown key (did you mean 'tile'?)"),
    ({"tile": {"blockn": 64}}, "tile.blockn: unknown key (did you mean 'block_n'?)"),
    ({"tile": {"block_n": "128"}}, "tile.block_n='128': expected int, got str"),
    ({"schedule": {"persistent": 1}}, "schedule.persistent=1: expected bool, got int"),
    ({"tile": {"block_n": 200}}, "tile.block_n=200: UMMA N must be a multiple of 16 in [16, 256]"),
    ({"tile": {"block_k": 32}}, "tile.block_k=32: must be 64"),
    ({"arch": "sm_80"}, "arch='sm_80': must be one of ['sm_100a', 'sm_90a']"),
    ({"pipeline": {"stages": 0}}, "pipeline.stages=0: must be in [1, 32]"),
    ({"pipeline": {"stages": 12}}, "pipeline.stages=12: operand stages need 393216 B + CD 0 B + barriers 224 B = 393440 B > 232448 B"),
    ({"accumulator": {"stages": 8}}, "TMEM columns block_n x m-waves x stages x accumulators = 128 x 1 x 8 x 1 = 1024"),
    ({"accumulator": {"stages": 3}, "epilogue": {"warps": 4}}, "= 384 must be a power of two in [32, 512]"),
    ({"cluster": {"dual_tile": True}}, "cluster.dual_tile=True: needs cluster.size=2"),
    ({"epilogue": {"warps": 2}}, "epilogue.warps=2: must be one of [0, 4]"),
    ({"epilogue": {"swizzle": "128"}}, "128B CD staging needs epilogue.store=tma"),
    ({"epilogue": {"store": "tma", "swizzle": "128", "store_block_n": 32}},  # found by test_config_fuzz: CD writes hit A
     "epilogue.store_block_n=32: 128B-swizzled CD staging rows are one swizzle atom row, 128 B = 64 bf16"),
    ({"tile": {"block_n": "x"}}, "tile.block_n='x': expected int, got str"),
    ({"tile": {"block_n": 10**5000}}, "tile.block_n=<5001-digit int>: must be in [1, 256]"),
    ({"schedule": {"group": 2**32}}, "schedule.group=4294967296: must be in [1, 1024]"),
    ({"name": "../x"}, "name='../x': must be a file stem"),
    ({"tile": 5}, "tile=5: expected a mapping of ['block_m', 'block_n', 'block_k']"),
    ({"mma": {"lanes": "all"}}, "shfl-shared descriptors need smem.layout=separated"),
    ({"cluster": {"size": 2}, "tile": {"block_m": 128, "block_n": 48}}, "UMMA N must be a multiple of 32 in [32, 256]"),
])
def test_bad_values_name_field_value_and_rule(patch, message):
    raw = {**BASE, **{k: ({**BASE.get(k, {}), **v} if isinstance(v, dict) else v) for k, v in patch.items()}}
    with pytest.raises(ConfigError) as err:
        from_dict(raw)
    assert message in str(err.value)


def test_sm90_rules():
    base = {"name": "h", "arch": "sm_90a", "tile": {"block_m": 128, "block_n": 256}, "mma": {"warpgroups": 2},
            "pipeline": {"stages": 4}}
    # the accumulators' register budget is the plan's: a consumer's setmaxnreg share less 40 spare registers
    from ptxgen.plan import make_plan
    with pytest.raises(ConfigError, match=r"^tile\.block_m=256: sm_90a: 256 fp32 accumulator registers per thread .* "
                                          r"\+ 40 spare > the 232 each consumer warpgroup gets \(setmaxnreg\)"):
        make_plan(from_dict({**base, "tile": {"block_m": 256, "block_n": 256}, "pipeline": {"stages": 2}}))
    make_plan(from_dict({**base, "tile": {"block_m": 256, "block_n": 192}, "pipeline": {"stages": 3}}))  # 192 + 40
    with pytest.raises(ConfigError, match=r"^tile\.block_m=192: sm_90a: 128 fp32 accumulator registers per thread .* "
                                          r"\+ 40 spare > the 152 each"):
        make_plan(from_dict({**base, "tile": {"block_m": 192, "block_n": 256}, "mma": {"warpgroups": 3},
                             "pipeline": {"stages": 2}}))
    with pytest.raises(ConfigError, match="tma.two_sm=True: 2-SM TMA loads are sm_100a only"):
        from_dict({**base, "tma": {"two_sm": True}})
    with pytest.raises(ConfigError, match="must equal size >= 2"):
        from_dict({**base, "cluster": {"size": 2}})
    # a 2x2 cluster: along mn, multicasting, the plain bf16 GEMM with K-major operands
    square = {**base, "cluster": {"size": 4, "dual_tile": True, "along": "mn"}, "tma": {"multicast": True}}
    assert from_dict(square).cluster.size == 4
    with pytest.raises(ConfigError, match=r"^cluster\.along='m': sm_90a: a cluster of 4 is a 2x2 square"):
        from_dict({**square, "cluster": {"size": 4, "dual_tile": True}})
    with pytest.raises(ConfigError, match=r"^cluster\.along='mn': sm_90a: a cluster of 4 is a 2x2 square"):
        from_dict({**square, "cluster": {"size": 2, "dual_tile": True, "along": "mn"}})
    with pytest.raises(ConfigError, match=r"^cluster\.along='mn': needs tma\.multicast=true"):
        from_dict({**square, "tma": {}})
    with pytest.raises(ConfigError, match=r"^cluster\.along='mn': needs schedule\.split_k=1"):
        from_dict({**square, "schedule": {"split_k": 2}})
    with pytest.raises(ConfigError, match=r"^cluster\.along='mn': needs kernel=gemm or dual_gemm and operands=bf16"):
        from_dict({**square, "operands": "fp8", "tile": {"block_m": 128, "block_n": 128, "block_k": 128}})
    with pytest.raises(ConfigError, match=r"^cluster\.along='mn': needs K-major operands"):
        from_dict({**square, "tma": {"multicast": True, "major_b": "mn"}})
    with pytest.raises(ConfigError, match=r"^cluster\.size=4: sm_100a: 1 or 2"):
        from_dict({"name": "s", "arch": "sm_100a", "tile": {"block_m": 128, "block_n": 128},
                   "cluster": {"size": 4, "dual_tile": True}})
    with pytest.raises(ConfigError, match=r"pipeline.stages=1: sm_90a: must be >= 2"):
        from_dict({**base, "pipeline": {"stages": 1}})
    three = {**base, "tile": {"block_m": 192, "block_n": 176}, "mma": {"warpgroups": 3}}
    assert from_dict(three).mma.warpgroups == 3  # three 64-row consumer warpgroups (h100_192x176)
    with pytest.raises(ConfigError, match=r"^tile\.block_m=128: sm_90a: a multiple of 64 x mma\.warpgroups=3 in \[64, 256\]"):
        from_dict({**three, "tile": {"block_m": 128, "block_n": 176}})
    with pytest.raises(ConfigError, match=r"^mma\.warpgroups=4: must be one of \[1, 2, 3\]"):
        from_dict({**three, "mma": {"warpgroups": 4}})


def test_files(tmp_path):
    with pytest.raises(ConfigError, match="no such file, and not a shipped config"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("tile: {block_m: 128\n  block_n: [\n")
    with pytest.raises(ConfigError, match="malformed YAML"):
        load_config(bad)
    good = tmp_path / "mine.yaml"
    good.write_text(yaml.safe_dump({k: v for k, v in BASE.items() if k != "name"}))
    assert load_config(good).name == "mine"
    with pytest.raises(ConfigError, match="expected a mapping"):
        good.write_text("- 1\n- 2\n")
        load_config(good)


@pytest.mark.parametrize("args, message", [
    (["build", "--config", "level99"], "ConfigError: config 'level99': no such file"),
    (["build", "--config", "BAD"], "ConfigError: bad.yaml:"),
])
def test_cli_user_errors_exit_nonzero_without_traceback(tmp_path, args, message):
    (tmp_path / "bad.yaml").write_text("name: bad\ntile: {block_n: 200}\n")
    args = [str(tmp_path / "bad.yaml") if a == "BAD" else a for a in args]
    proc = subprocess.run([sys.executable, "-m", "ptxgen.cli", *args, "-o", str(tmp_path / "out")],
                          capture_output=True, text=True)
    assert proc.returncode == 1  # a user error; 2 is argparse's usage error
    assert message in proc.stderr and proc.stderr.startswith("ptxgen: error: ")
    assert len(proc.stderr.splitlines()) == 1
    assert "Traceback" not in proc.stderr
