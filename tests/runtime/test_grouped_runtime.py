"""``ptxgen.grouped_gemm`` without a GPU: every input rule is a one-line ShapeError before any launch, ``out``
untouched; the table rules of both layouts; configs of another layout or dtype refused; the launch packs the
kernel's signature (maps and scalars) with a monkeypatched driver."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

import ptxgen  # noqa: E402
from ptxgen.build import build  # noqa: E402
from ptxgen.errors import ConfigError, ShapeError  # noqa: E402
from ptxgen.runtime import grouped  # noqa: E402
from ptxgen.runtime.grouped import check_grouped_operands, check_indices, contiguous_layout  # noqa: E402

BF16, E4M3, I32 = torch.bfloat16, torch.float8_e4m3fn, torch.int32


def masked(g=3, m=64, n=200, k=256, dtype=BF16, **over):
    x = {"a": torch.zeros((g, m, k), dtype=dtype), "b": torch.zeros((g, n, k), dtype=dtype),
         "masked_m": torch.tensor([m, 0, 1][:g] + [1] * max(0, g - 3), dtype=I32)}
    if dtype == E4M3:
        x["scale_a"] = torch.ones((g, m, -(-k // 128)))
        x["scale_b"] = torch.ones((g, -(-n // 128), -(-k // 128)))
    x.update(over)
    return x


def contiguous(rows=(70, 0, 1), n=200, k=256, dtype=BF16, **over):
    idx = contiguous_layout(rows)
    x = {"a": torch.zeros((idx.numel(), k), dtype=dtype), "b": torch.zeros((len(rows), n, k), dtype=dtype),
         "m_indices": idx}
    if dtype == E4M3:
        x["scale_a"] = torch.ones((idx.numel(), -(-k // 128)))
        x["scale_b"] = torch.ones((len(rows), -(-n // 128), -(-k // 128)))
    x.update(over)
    return x


def test_valid_operands_give_the_problem():
    p = check_grouped_operands(**masked(), require_cuda=False)
    assert (p.layout, p.fp8, p.groups, p.rows, p.m, p.n, p.k) == ("masked", False, 3, 192, 64, 200, 256)
    p = check_grouped_operands(**contiguous(dtype=E4M3), require_cuda=False)
    assert (p.layout, p.fp8, p.groups, p.rows, p.m) == ("contiguous", True, 3, 256, 256)


def test_contiguous_layout_pads_each_segment_to_block_m():
    idx = contiguous_layout([70, 0, 129, 1])
    assert idx.numel() == 128 + 256 + 128
    assert idx[:70].eq(0).all() and idx[70:128].eq(-1).all() and idx[128:257].eq(2).all()
    assert idx[257:384].eq(-1).all() and idx[384] == 3 and idx[385:].eq(-1).all()


@pytest.mark.parametrize("make, over, message", [
    (masked, {"a": torch.zeros((3, 64, 256), dtype=torch.float16)}, "a: dtype=torch.float16: must be"),
    (masked, {"b": torch.zeros((3, 200, 256), dtype=E4M3)}, "b: dtype=torch.float8_e4m3fn: must be torch.bfloat16"),
    (masked, {"b": torch.zeros((2, 200, 256), dtype=BF16)}, "a: shape=(3, 64, 256): G=3 must equal b's G=2"),
    (masked, {"masked_m": torch.tensor([1, 1], dtype=I32)}, "masked_m: shape=(2,): must be [G] = (3,) (b's G)"),
    (masked, {"masked_m": torch.tensor([1, 1, 1], dtype=torch.int64)}, "masked_m: dtype=torch.int64: must be torch.int32"),
    (masked, {"masked_m": torch.tensor([65, 0, 1], dtype=I32)}, "masked_m[0]=65: must be in [0, M_max=64]"),
    (masked, {"masked_m": torch.tensor([1, -2, 1], dtype=I32)}, "masked_m[1]=-2: must be in [0, M_max=64]"),
    (masked, {"b": torch.zeros((3, 200, 128), dtype=BF16)}, "b: shape=(3, 200, 128): K=128 must equal a's K=256"),
    (masked, {"a": torch.zeros((3, 64, 12), dtype=BF16), "b": torch.zeros((3, 200, 12), dtype=BF16)},
     "K=12: must be a positive multiple of 8"),
    (masked, {"scale_a": torch.ones((3, 64, 2))}, "scale_a/scale_b: given for bf16 operands"),
    (masked, {"out": torch.zeros((3, 64, 199), dtype=BF16)}, "out: shape=(3, 64, 199): must be (3, 64, 200)"),
    (masked, {"out": torch.zeros((3, 64, 200))}, "out: dtype=torch.float32: must be torch.bfloat16"),
    (masked, {"a": torch.zeros((3, 256, 64), dtype=BF16).transpose(1, 2)}, "a: shape=(3, 64, 256) stride="),
    (contiguous, {"m_indices": torch.tensor([0] * 128 + [3] + [-1] * 127, dtype=I32)},
     "m_indices[128]=3: must be -1 (padding) or a group in [0, 3)"),
    (contiguous, {"m_indices": torch.tensor([0] * 128 + [-2] + [-1] * 127, dtype=I32)}, "m_indices[128]=-2"),
    (contiguous, {"m_indices": torch.tensor([0] * 100 + [2] * 156, dtype=I32)},
     "m_indices[100]=2: m-block 0 starts with 0"),
    (contiguous, {"m_indices": torch.tensor([2] * 128 + [0] * 128, dtype=I32)}, "unsorted"),
    (contiguous, {"m_indices": torch.tensor([0] * 60 + [-1] * 68 + [0] * 128, dtype=I32)}, "ended by padding"),
    (contiguous, {"m_indices": torch.tensor([0, -1, 0] + [-1] * 253, dtype=I32)}, "m_indices[2]=0: m-block 0"),
    (contiguous, {"a": torch.zeros((200, 256), dtype=BF16), "m_indices": torch.zeros(200, dtype=I32)},
     "m_indices: length 200: must be a multiple of block_m=128"),
    (contiguous, {"m_indices": torch.zeros(255, dtype=I32)}, "m_indices: shape=(255,): must be [M_total] = (256,)"),
])
def test_input_rules_are_one_line_shape_errors(make, over, message):
    with pytest.raises(ShapeError) as exc:
        check_grouped_operands(**make(**over), require_cuda=False)
    assert message in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("make, over, message", [
    (masked, {"scale_b": torch.ones((2, 2, 2))}, "scale_b: shape=(2, 2, 2): must be [G, ceil(N/128), ceil(K/128)] = (3, 2, 2)"),
    (masked, {"scale_a": torch.ones((3, 64, 3))}, "scale_a: shape=(3, 64, 3): must be [G, M_max, ceil(K/128)]"),
    (masked, {"scale_a": None}, "scale_a: None: FP8 operands need scale_a"),
    (contiguous, {"scale_a": torch.ones((256, 2), dtype=torch.float64)}, "scale_a: dtype=torch.float64"),
    (contiguous, {"a": torch.zeros((256, 200), dtype=E4M3), "b": torch.zeros((3, 200, 200), dtype=E4M3)},
     "K=200: must be a positive multiple of 16"),
])
def test_fp8_scale_rules(make, over, message):
    with pytest.raises(ShapeError) as exc:
        check_grouped_operands(**make(dtype=E4M3, **over), require_cuda=False)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_exactly_one_table():
    x = masked()
    with pytest.raises(ShapeError, match="pass exactly one"):
        check_grouped_operands(x["a"], x["b"], require_cuda=False)
    with pytest.raises(ShapeError, match="pass exactly one"):
        check_grouped_operands(x["a"], x["b"], masked_m=x["masked_m"], m_indices=x["masked_m"], require_cuda=False)


def test_out_overlapping_an_input_is_refused():
    x = contiguous(k=200)
    with pytest.raises(ShapeError, match="out: memory overlaps a"):
        check_grouped_operands(**x, out=x["a"], require_cuda=False)


def test_table_rules_skipped_when_asked():
    x = masked(masked_m=torch.tensor([99, 0, 1], dtype=I32))
    assert check_grouped_operands(**x, require_cuda=False, check_tables=False).groups == 3


def test_check_indices_accepts_every_layout_contiguous_layout_makes():
    for rows in ([0], [1], [128], [129, 0, 0, 3], [0, 0, 256, 1]):
        check_indices(contiguous_layout(rows), len(rows))


def test_cpu_tensors_are_refused_before_any_launch_and_out_is_untouched():
    out = torch.full((3, 64, 200), 7.0, dtype=BF16)
    with pytest.raises(ShapeError, match="a: device=cpu: must be a CUDA tensor"):
        ptxgen.grouped_gemm(**masked(), out=out)
    assert bool((out == 7.0).all())


def _fake_driver(monkeypatch, spec):
    """grouped_gemm on CPU tensors: the driver, the kernel load and the CUDA-device rule replaced; records the
    launches (``calls``), the kernel loads (``loads``) and each operand check's ``check_tables`` (``checks``)."""
    import functools

    import ptxgen.runtime.api as api
    import ptxgen.runtime.driver as driver

    calls, loads, checks = [], [], []
    launcher = SimpleNamespace(launch=lambda grid_x, maps, scalars, stream: calls.append((grid_x, maps, scalars)))

    def load(cfg, ordinal):
        loads.append(cfg)
        return SimpleNamespace(spec=spec, launcher=launcher)

    def check(*args, check_tables=True, **kw):
        checks.append(check_tables)
        return check_grouped_operands(*args, check_tables=check_tables, require_cuda=False, **kw)

    monkeypatch.setattr(api, "loaded_kernel", load)
    monkeypatch.setattr(api, "_ordinal", lambda a: 0)
    monkeypatch.setattr(api, "_calls", {})
    monkeypatch.setattr(api, "_current_device", lambda: 0)
    monkeypatch.setattr(api, "current_stream", lambda ordinal: 0)
    monkeypatch.setattr(driver, "ensure_context", lambda ordinal=None: 0)
    monkeypatch.setattr(driver, "device_info", lambda ordinal: SimpleNamespace(sm_count=132, capability=(9, 0)))
    monkeypatch.setattr(grouped, "check_grouped_operands", functools.partial(check))
    return SimpleNamespace(calls=calls, loads=loads, checks=checks)


def test_masked_launch_packs_the_kernel_signature(monkeypatch):
    spec = build("grouped_masked_h100_128x128").launch
    calls = _fake_driver(monkeypatch, spec).calls
    x = masked(g=3, m=130, n=200, k=256)
    out = ptxgen.grouped_gemm(**x)
    (grid_x, maps, scalars), = calls
    assert [nm for nm, kind in spec.params if kind != "tensor_map"] == ["d_ptr", "m", "n", "k", "group_ptr", "num_groups"]
    assert grid_x == 3 * 2 * 2  # G x ceil(130 / 128) x ceil(200 / 128) work units (< 132 SMs)
    assert maps == ((x["a"].data_ptr(), 390, 256, 256), (x["b"].data_ptr(), 600, 256, 256), None)
    assert scalars == (out.data_ptr(), 130, 200, 256, x["masked_m"].data_ptr(), 3)
    assert tuple(out.shape) == (3, 130, 200)


def test_fp8_contiguous_launch_maps_the_grouped_scales(monkeypatch):
    calls = _fake_driver(monkeypatch, build("grouped_contiguous_fp8_h100_128x128").launch).calls
    x = contiguous(rows=(70, 0, 1), n=200, k=256, dtype=E4M3)
    x["scale_b"] = torch.arange(3 * 2 * 2, dtype=torch.float32).reshape(3, 2, 2)
    ptxgen.grouped_gemm(**x)
    (grid_x, maps, scalars), = calls
    assert grid_x == 2 * 2 and len(maps) == 5 and maps[4] is None
    assert maps[3][1:] == (2, 12, 12)  # [ceil(K/128), G x 4]: each group's 2 blocks padded to one 16-byte box
    assert scalars[4:] == (x["m_indices"].data_ptr(), 3)


@pytest.mark.parametrize("variant, make, rows", [("grouped_masked_h100_128x256_tma", masked, 3 * 130),
                                                  ("grouped_contiguous_fp8_h100_128x128_tma", contiguous, 256)])
def test_tma_store_variants_get_d_map_over_the_flattened_rows(monkeypatch, variant, make, rows):
    """A TMA-store config (bench/configs) gets D's map ``[G x M_max or M_total, N]`` at 16-byte rows (N % 8 == 0),
    none at other N (the kernel then stores every m-block directly)."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "configs" / f"{variant}.yaml"
    fake = _fake_driver(monkeypatch, build(str(path)).launch)
    dtype = E4M3 if "fp8" in variant else BF16
    x = make(m=130, dtype=dtype) if make is masked else make(dtype=dtype)
    out = ptxgen.grouped_gemm(**x)
    assert fake.calls[-1][1][-1] == (out.data_ptr(), rows, 200, 200)
    ptxgen.grouped_gemm(**(make(m=130, n=199, dtype=dtype) if make is masked else make(n=199, dtype=dtype)))
    assert fake.calls[-1][1][-1] is None


def test_a_repeated_signature_is_set_up_once_and_a_changed_one_again(monkeypatch):
    fake = _fake_driver(monkeypatch, build("grouped_masked_h100_128x128").launch)
    x = masked(g=3, m=64, n=200, k=256)
    out = torch.zeros((3, 64, 200), dtype=BF16)
    for _ in range(3):
        ptxgen.grouped_gemm(**x, out=out, check_tables=False)
    assert len(fake.loads) == 1 and len(fake.calls) == 3 and fake.checks == [False]
    y = dict(x, a=torch.zeros((3, 64, 256), dtype=BF16))  # new tensors, same signature: new pointers, no check
    ptxgen.grouped_gemm(**y, out=out, check_tables=False)
    assert len(fake.loads) == 1 and fake.calls[-1][1][0][0] == y["a"].data_ptr()
    with pytest.raises(ShapeError, match="out: shape="):  # another out stride: another signature, fully checked
        ptxgen.grouped_gemm(**x, out=torch.zeros((3, 200, 64), dtype=BF16).transpose(1, 2), check_tables=False)
    ptxgen.grouped_gemm(**x, out=out, config="grouped_masked_h100_128x128", check_tables=False)  # another config
    assert len(fake.loads) == 2 and fake.checks.count(False) == 3


def test_a_cached_signature_still_refuses_a_bad_pointer_before_launch(monkeypatch):
    fake = _fake_driver(monkeypatch, build("grouped_masked_h100_128x128").launch)
    x = masked(g=3, m=64, n=200, k=256)
    ptxgen.grouped_gemm(**x, out=torch.zeros((3, 64, 200), dtype=BF16), check_tables=False)
    launches = len(fake.calls)
    base = torch.full((3 * 64 * 200 + 8,), 7.0, dtype=BF16)
    shifted = base[1:1 + 3 * 64 * 200].view(3, 64, 200)  # same signature, 2 bytes off 16-byte alignment
    with pytest.raises(ShapeError, match="out: data_ptr=.*must be 16-byte aligned"):
        ptxgen.grouped_gemm(**x, out=shifted, check_tables=False)
    a_in_d = torch.full((3 * 64 * 256 + 3 * 64 * 200,), 7.0, dtype=BF16)
    with pytest.raises(ShapeError, match="out: memory overlaps a"):
        ptxgen.grouped_gemm(**dict(x, a=a_in_d[:3 * 64 * 256].view(3, 64, 256)),
                            out=a_in_d[3 * 64 * 100:3 * 64 * 100 + 3 * 64 * 200].view(3, 64, 200), check_tables=False)
    assert len(fake.calls) == launches and bool((base == 7.0).all()) and bool((a_in_d == 7.0).all())


def test_the_table_is_read_once_until_it_changes(monkeypatch):
    fake = _fake_driver(monkeypatch, build("grouped_masked_h100_128x128").launch)
    x = masked(g=3, m=64, n=200, k=256)
    out = torch.full((3, 64, 200), 7.0, dtype=BF16)
    ptxgen.grouped_gemm(**x, out=out)
    ptxgen.grouped_gemm(**x, out=out)
    assert fake.checks.count(True) == 1 and len(fake.calls) == 2  # the same table, unchanged: read once
    x["masked_m"][0] = 65  # an in-place write bumps the version counter: read again, refused before launch
    with pytest.raises(ShapeError, match=r"masked_m\[0\]=65: must be in \[0, M_max=64\]"):
        ptxgen.grouped_gemm(**x, out=out)
    with pytest.raises(ShapeError, match=r"masked_m\[0\]=65"):  # a refused table is not remembered
        ptxgen.grouped_gemm(**x, out=out)
    assert len(fake.calls) == 2 and bool((out == 7.0).all())
    x["masked_m"] = torch.tensor([64, 0, 1], dtype=I32)  # another tensor object: read
    ptxgen.grouped_gemm(**x, out=out)
    assert fake.checks.count(True) == 4 and len(fake.calls) == 3
    x["masked_m"].copy_(torch.tensor([99, 0, 1], dtype=I32))
    ptxgen.grouped_gemm(**x, out=out, check_tables=False)  # never read: the kernel's bounds hold (docstring)
    assert fake.checks.count(True) == 4 and len(fake.calls) == 4


def test_a_changed_contiguous_table_is_read_again(monkeypatch):
    fake = _fake_driver(monkeypatch, build("grouped_contiguous_h100_128x128").launch)
    x = contiguous(rows=(70, 0, 1))
    ptxgen.grouped_gemm(**x)
    ptxgen.grouped_gemm(**x)
    x["m_indices"][128] = 0  # group 2's m-block now says group 0 after group 0 ended by padding
    with pytest.raises(ShapeError, match="ended by padding"):
        ptxgen.grouped_gemm(**x)
    assert fake.checks.count(True) == 2 and len(fake.calls) == 2


def test_scales_in_the_kernel_layout_are_read_in_place(monkeypatch):
    from ptxgen.runtime.grouped import tma_scale_layout

    calls = _fake_driver(monkeypatch, build("grouped_masked_fp8_h100_128x128").launch).calls
    x = masked(g=3, m=62, n=200, k=256, dtype=E4M3)
    x["scale_a"] = torch.rand((3, 62, 2))
    x["scale_b"] = torch.rand((3, 2, 2))
    ptxgen.grouped_gemm(**x, check_tables=False)  # plain row-major scales: one copy each, kernel layout
    sa, sb = calls[-1][1][2:4]
    assert sa[0] != x["scale_a"].data_ptr() and sa[1:] == (2, 3 * 64, 3 * 64)
    assert sb[0] != x["scale_b"].data_ptr() and sb[1:] == (2, 3 * 4, 3 * 4)
    fast = dict(x, scale_a=tma_scale_layout(x["scale_a"]), scale_b=tma_scale_layout(x["scale_b"]))
    assert torch.equal(fast["scale_a"], x["scale_a"]) and torch.equal(fast["scale_b"], x["scale_b"])
    ptxgen.grouped_gemm(**fast, check_tables=False)
    assert calls[-1][1][2] == (fast["scale_a"].data_ptr(), 2, 3 * 64, 3 * 64)
    assert calls[-1][1][3] == (fast["scale_b"].data_ptr(), 2, 3 * 4, 3 * 4)


def test_deepgemm_col_major_contiguous_scale_a_is_read_in_place(monkeypatch):
    calls = _fake_driver(monkeypatch, build("grouped_contiguous_fp8_h100_128x128").launch).calls
    x = contiguous(rows=(70, 0, 1), dtype=E4M3)
    x["scale_a"] = torch.rand((2, 256)).T  # [M_total, K/128], column-major (get_col_major_tma_aligned_tensor)
    ptxgen.grouped_gemm(**x, check_tables=False)
    assert calls[-1][1][2] == (x["scale_a"].data_ptr(), 2, 256, 256)


@pytest.mark.parametrize("config, message", [
    ("grouped_contiguous_h100_128x128", "schedule.grouped=contiguous; this call needs a schedule.grouped=masked"),
    ("grouped_masked_fp8_h100_128x128", "operands fp8 do not match bf16 a/b"),
    ("h100_128x128", "schedule.grouped=none"),
])
def test_configs_of_another_layout_or_dtype_are_refused(monkeypatch, config, message):
    fake = _fake_driver(monkeypatch, build(config).launch)
    with pytest.raises(ConfigError, match=message):
        ptxgen.grouped_gemm(**masked(), config=config)
    assert not fake.calls


def test_default_configs_by_layout_dtype_and_m_max():
    assert grouped.default_config(check_grouped_operands(**masked(m=128), require_cuda=False)) == \
        "grouped_masked_h100_128x128"
    assert grouped.default_config(check_grouped_operands(**masked(m=256), require_cuda=False)) == \
        "grouped_masked_h100_128x256_c2"
    assert grouped.default_config(check_grouped_operands(**masked(m=256, dtype=E4M3), require_cuda=False)) == \
        "grouped_masked_fp8_h100_256x128"
    assert grouped.default_config(check_grouped_operands(**contiguous(), require_cuda=False)) == \
        "grouped_contiguous_h100_128x256_c2"
    for name in {*grouped.DEFAULT_CONFIGS.values(), grouped.MASKED_WIDE,
                 grouped.MASKED_FP8_WIDE, grouped.MASKED_FP8_TALL}:
        assert build(name).launch.extra["grouped"] in ("masked", "contiguous")


def test_gemm_and_gemm_fp8_refuse_grouped_configs():
    from ptxgen.runtime.api import _fp8_refuses, _gemm_refuses
    from ptxgen.runtime.choose import candidates

    assert "use ptxgen.grouped_gemm" in _gemm_refuses(build("grouped_masked_h100_128x128").launch)
    assert "use ptxgen.grouped_gemm" in _fp8_refuses(build("grouped_contiguous_fp8_h100_128x128").launch)
    names = [c.name for k in ("gemm", "gemm_fp8") for c in candidates("sm_90a", k)]
    assert names and not [n for n in names if n.startswith("grouped_")]


def test_a_cpu_table_is_checked_without_a_device_read_and_copied_per_call(monkeypatch):
    fake = _fake_driver(monkeypatch, build("grouped_masked_h100_128x128").launch)
    copies = []

    def device_table(table, name, device):
        copies.append((name, device))
        return table.clone()

    monkeypatch.setattr(grouped, "_device_table", device_table)
    x = masked(g=3, m=64, n=200, k=256)
    ptxgen.grouped_gemm(**x, check_tables=False)
    call, = ptxgen.runtime.api._calls.values()
    call.device = torch.device("meta")  # stands for the CUDA device of a: the table is a CPU tensor beside it
    ptxgen.grouped_gemm(**x)
    assert copies == [("masked_m", torch.device("meta"))] and fake.checks.count(True) == 1
    assert fake.calls[-1][2][4] != x["masked_m"].data_ptr()  # the kernel reads the device copy
    x["masked_m"][1] = -1
    with pytest.raises(ShapeError, match=r"masked_m\[1\]=-1"):
        ptxgen.grouped_gemm(**x)
    assert len(copies) == 1 and len(fake.calls) == 2


def test_a_copied_scale_b_is_kept_until_it_changes(monkeypatch):
    """scale_b (a weight's constant) copied into the kernel's layout once per signature and read again while it is
    the same tensor, unchanged, on the same stream; scale_a (per call) is copied every call."""
    import ptxgen.runtime.api as api

    calls = _fake_driver(monkeypatch, build("grouped_masked_fp8_h100_128x128").launch).calls
    x = masked(g=3, m=64, n=200, k=256, dtype=E4M3)
    x["scale_b"] = torch.rand((3, 2, 2))
    copies = []
    real = api._scale_map
    monkeypatch.setattr(api, "_scale_map", lambda t, device: copies.append(t) or real(t, device))
    for _ in range(3):
        ptxgen.grouped_gemm(**x, check_tables=False)
    assert [t is x["scale_b"] for t in copies] == [False, True, False, False]  # scale_a, scale_b, scale_a, scale_a
    assert calls[0][1][3] == calls[2][1][3]
    x["scale_b"].mul_(2)  # an in-place write bumps the version counter: copied again
    ptxgen.grouped_gemm(**x, check_tables=False)
    assert copies[-1] is x["scale_b"]
    call = next(c for c in api._calls.values() if isinstance(c, grouped.GroupedCall))
    assert torch.equal(call.scale_b_copy[5][:, :, :2].permute(1, 2, 0), x["scale_b"])  # the kept copy is the new one
    x["scale_b"] = x["scale_b"].clone()  # another tensor object: copied again
    ptxgen.grouped_gemm(**x, check_tables=False)
    assert copies[-1] is x["scale_b"] and len(copies) == 8
    monkeypatch.setattr(api, "current_stream", lambda ordinal: 1)  # another stream: copied again, on it
    ptxgen.grouped_gemm(**x, check_tables=False)
    assert copies[-1] is x["scale_b"] and len(copies) == 10


def _gkn(g, n, k, dtype=BF16):
    """B ``[G, N, K]`` as ``w.transpose(1, 2)`` of a contiguous ``[G, K, N]`` weight (``torch._grouped_mm``'s)."""
    return torch.zeros((g, k, n), dtype=dtype).transpose(1, 2)


@pytest.mark.parametrize("over, message", [
    ({"a": torch.zeros((3, 64, 72), dtype=BF16), "b": _gkn(3, 200, 72)},
     "b: shape=(3, 200, 72) stride=(14400, 1, 200): a transposed [G, K, N] weight is read in place with N a multiple "
     "of 8 and K a multiple of 64 (N=200, K=72); call .contiguous()"),
    ({"b": _gkn(3, 204, 256)}, "(N=204, K=256)"),
    ({"b": torch.zeros((3, 200, 512), dtype=BF16)[:, :, ::2]}, "b: shape=(3, 200, 256) stride=(102400, 512, 2): must be contiguous"),
])
def test_a_transposed_b_is_taken_where_it_can_be_read_in_place(over, message):
    p = check_grouped_operands(**masked(b=_gkn(3, 200, 256)), require_cuda=False)
    assert p.b_mn and (p.groups, p.n, p.k) == (3, 200, 256)
    assert not check_grouped_operands(**masked(), require_cuda=False).b_mn
    with pytest.raises(ShapeError, match=r"^b: shape=\(3, 200, 256\) stride=\(51200, 1, 200\): must be contiguous"):
        check_grouped_operands(**contiguous(dtype=E4M3, b=_gkn(3, 200, 256, E4M3)), require_cuda=False)  # FP8: K-major
    with pytest.raises(ShapeError) as exc:
        check_grouped_operands(**masked(**over), require_cuda=False)
    assert message in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("name, make", [("grouped_masked_h100_128x128", masked),
                                        ("grouped_contiguous_h100_128x256_c2", contiguous)])
def test_a_transposed_b_runs_the_mn_major_variant_over_the_stacked_k_rows(monkeypatch, name, make):
    """The call loads the config's ``tma.major_b: mn`` variant and maps B as the ``[G x K, N]`` stack, pitch N; a
    contiguous B with that variant given as the config is refused (the map would read it transposed)."""
    from ptxgen.config import load_config

    variant = load_config(name).replace(**{"name": f"{name}_mnb", "tma.major_b": "mn"})
    fake = _fake_driver(monkeypatch, build(variant).launch)
    x = make(b=_gkn(3, 200, 256))
    ptxgen.grouped_gemm(**x, config=name)
    assert fake.loads[-1].name == f"{name}_mnb" and fake.loads[-1].tma.major_b == "mn"
    assert fake.calls[-1][1][1] == (x["b"].data_ptr(), 3 * 256, 200, 200)
    with pytest.raises(ConfigError, match=r"tma.major_b=mn; b is contiguous \[G, N, K\]: needs tma.major_b=k"):
        ptxgen.grouped_gemm(**make(), config=variant)


def test_a_config_that_cannot_read_a_transposed_b_is_refused_before_launch(monkeypatch):
    """A grouped config whose block_n is not whole 64-column boxes has no MN-major variant: a transposed B given to
    it is a ConfigError naming the config and the rule, before any launch."""
    from ptxgen.config import load_config

    cfg = load_config("grouped_masked_h100_128x128").replace(**{"name": "grouped_masked_h100_128x96", "tile.block_n": 96})
    fake = _fake_driver(monkeypatch, build(cfg).launch)
    with pytest.raises(ConfigError, match=r"^config grouped_masked_h100_128x96: cannot read b MN-major \(tma.major_b=mn"):
        ptxgen.grouped_gemm(**masked(b=_gkn(3, 200, 256)), config=cfg)
    assert fake.calls == [] and fake.loads == []
