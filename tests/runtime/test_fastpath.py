"""The per-call fast path (ptxgen.runtime.fastpath): parameter layout, the launcher, the tensor-map cache."""

from __future__ import annotations

import ctypes
import struct

import pytest

from ptxgen.errors import CudaError, ShapeError
from tests.helpers.runtime import spec


# --------------------------------------------------------------------------- fast path


GEMM_KINDS = ["tensor_map", "tensor_map", "tensor_map", "u64", "u32", "u32", "u32"]


def test_param_layout_gemm():
    from ptxgen.runtime.fastpath import ParamLayout

    lay = ParamLayout(GEMM_KINDS)
    assert lay.offsets == (0, 128, 256, 384, 392, 396, 400) and lay.size == 404
    assert ParamLayout(["u32", "tensor_map", "u64"]).offsets == (128, 0, 136)
    with pytest.raises(ValueError, match=r"parameter kind 'f16'"):
        ParamLayout(["f16"])


class FakeLaunch:
    """Stands in for cuLaunchKernelEx: records the launch config and the parameter bytes."""

    def __init__(self, launcher_ref, result=0):
        self.launches = []
        self.launcher_ref = launcher_ref
        self.result = result

    def __call__(self, config, function, params_address, extra):
        ptrs = (ctypes.c_void_p * 7).from_address(params_address)
        sizes = [128, 128, 128, 8, 4, 4, 4]
        self.launches.append((config.gridDimX, config.hStream, function,
                              [ctypes.string_at(ptrs[i], sizes[i]) for i in range(7)]))
        return (self.result,)


def make_launcher(capacity=1024, result=0):
    from types import SimpleNamespace

    from ptxgen.runtime.fastpath import Launcher

    encodes = []

    def encoder(address, rows, cols, row_stride, spec):
        encodes.append((address, rows, cols, row_stride, spec.tensor))
        return struct.pack("<QQQQ", address, rows, cols, row_stride) + spec.tensor.encode() * 96

    def check(res, call, detail):
        raise CudaError(f"{call} failed: {res[0]}\n{detail}", call=call, code=str(res[0]))

    fake = FakeLaunch(None, result)
    specs = [spec(tensor=t) for t in "abd"]
    launcher = Launcher("fn", SimpleNamespace(gridDimX=1, hStream=None), GEMM_KINDS, specs, launch_fn=fake,
                        encoder=encoder, check=check, capacity=capacity, name="fake")
    return launcher, fake, encodes


def expected_map(address, rows, cols, stride, tensor):
    return struct.pack("<QQQQ", address, rows, cols, stride) + tensor.encode() * 96


def test_launcher_packs_parameters_and_launches_once():
    launcher, fake, encodes = make_launcher()
    maps = ((0x1000, 64, 128, 128), (0x2000, 32, 128, 128), (0x3000, 64, 32, 32))
    launcher.launch(12, maps, (0x3000, 64, 32, 128), stream=77)
    (grid, stream, fn, params), = fake.launches
    assert (grid, stream, fn) == (12, 77, "fn")
    assert params[:3] == [expected_map(*m, t) for m, t in zip(maps, "abd")]
    assert params[3:] == [struct.pack("<Q", 0x3000), *(struct.pack("<I", v) for v in (64, 32, 128))]
    assert [launcher.param_bytes(i) for i in range(7)] == params


def test_tensor_map_cache_hits_and_new_shape_same_pointer():
    launcher, fake, encodes = make_launcher()
    a, b = (0x1000, 64, 128, 128), (0x2000, 32, 128, 128)
    for _ in range(3):
        launcher.launch(1, (a, b, None), (0, 64, 32, 128), stream=0)
    assert len(encodes) == 2  # a and b once each; D unused (zeros)
    assert fake.launches[-1][3][2] == bytes(128)
    # same pointer, different shape: a new map, never the stale one
    a2 = (0x1000, 32, 64, 64)
    launcher.launch(1, (a2, b, None), (0, 32, 32, 64), stream=0)
    assert fake.launches[-1][3][0] == expected_map(*a2, "a") != fake.launches[0][3][0]
    assert len(encodes) == 3
    # back to the first shape: a cache hit, and the bytes are right again
    launcher.launch(1, (a, b, None), (0, 64, 32, 128), stream=0)
    assert fake.launches[-1][3][0] == expected_map(*a, "a") and len(encodes) == 3
    assert launcher.maps.hits >= 1


def test_tensor_map_cache_is_lru():
    from ptxgen.runtime.fastpath import TensorMapCache

    calls = []
    cache_ = TensorMapCache([spec()], capacity=2, encoder=lambda *a: calls.append(a[:4]) or bytes(128))
    x, y, z = (16, 1, 8, 8), (32, 1, 8, 8), (48, 1, 8, 8)
    cache_.get(0, x), cache_.get(0, y), cache_.get(0, x)  # x most recent
    cache_.get(0, z)  # evicts y
    assert len(cache_) == 2
    cache_.get(0, x)
    cache_.get(0, y)
    assert calls == [x, y, z, y]


def test_launch_failure_raises_cuda_error():
    launcher, fake, _ = make_launcher(result=1)
    with pytest.raises(CudaError, match=r"cuLaunchKernelEx failed.*\nfake: grid 3"):
        launcher.launch(3, ((16, 1, 8, 8), (16, 1, 8, 8), None), (0, 1, 1, 8), stream=0)


def test_encode_failure_launches_nothing_and_recovers():
    launcher, fake, encodes = make_launcher()
    good = ((16, 1, 8, 8), (32, 1, 8, 8), None)
    launcher.launch(1, good, (0, 1, 1, 8), stream=0)

    def failing(*a):
        raise ShapeError("tensor map 'b': bad")

    launcher.maps._encoder = failing
    with pytest.raises(ShapeError):
        launcher.launch(1, ((16, 1, 8, 8), (48, 1, 8, 8), None), (0, 1, 1, 8), stream=0)
    assert len(fake.launches) == 1
    launcher.launch(1, good, (0, 1, 1, 8), stream=0)  # all from the cache; every slot rewritten
    assert fake.launches[-1][3] == fake.launches[0][3]


def test_scalar_out_of_range_is_an_error():
    launcher, fake, _ = make_launcher()
    with pytest.raises(struct.error):
        launcher.launch(1, (None, None, None), (0, 1 << 32, 1, 8), stream=0)
    assert fake.launches == []


def test_launcher_for_a_generated_kernel(built_h100):
    """Built from a real launch spec (no GPU): slots in signature order, launch config pre-filled."""
    pytest.importorskip("cuda.bindings.driver")
    from types import SimpleNamespace

    from ptxgen.runtime.fastpath import Launcher

    spec = built_h100.launch
    launcher = Launcher.for_kernel(SimpleNamespace(function="f", spec=spec, pdl=False))
    assert launcher.maps.specs == (spec.tensor_maps["a"], spec.tensor_maps["b"], spec.tensor_maps["d"])
    assert launcher.layout.offsets == (0, 128, 256, 384, 392, 396, 400)
    cfg = launcher._config
    assert (cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ) == tuple(spec.block)
    assert cfg.sharedMemBytes == spec.dynamic_smem_bytes and cfg.numAttrs == 1


@pytest.mark.parametrize("knob, attrs", [(None, 2), ("0", 1), ("off", 1), ("on", 2)])
def test_programmatic_dependent_launch_attribute(built_h100, monkeypatch, knob, attrs):
    """A kernel built with ``schedule.pdl`` (the shipped default) is launched with the programmatic stream
    serialization attribute unless ``PTXGEN_PDL`` is off (on by default); its fast-path launcher takes the kernel's
    decision."""
    pytest.importorskip("cuda.bindings.driver")
    from cuda.bindings import driver as drv

    from ptxgen.runtime.driver import DeviceInfo
    from ptxgen.runtime.fastpath import Launcher
    from ptxgen.runtime.module import Kernel

    if knob is None:
        monkeypatch.delenv("PTXGEN_PDL", raising=False)
    else:
        monkeypatch.setenv("PTXGEN_PDL", knob)
    spec = built_h100.launch
    assert spec.pdl, "the shipped configs are built with schedule.pdl"
    kernel = Kernel(None, "f", spec, DeviceInfo(0, "H100", 132, (9, 0), 232448, 50 << 20))
    assert kernel.pdl == (attrs == 2)
    for cfg in (kernel._config, Launcher.for_kernel(kernel)._config):
        assert cfg.numAttrs == attrs
        ids = [a.id for a in cfg.attrs]
        assert ids[0] == drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        if attrs == 2:
            assert ids[1] == drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            assert cfg.attrs[1].value.programmaticStreamSerializationAllowed == 1


def test_pdl_knob_refuses_a_non_boolean_word():
    from ptxgen import knobs
    from ptxgen.errors import ConfigError

    assert knobs.read({}).pdl and knobs.read({"PTXGEN_PDL": " "}).pdl and knobs.read({"PTXGEN_PDL": "on"}).pdl
    assert not knobs.read({"PTXGEN_PDL": "0"}).pdl and not knobs.read({"PTXGEN_PDL": "off"}).pdl
    with pytest.raises(ConfigError, match=r"^PTXGEN_PDL='maybe': must be one of 1, true"):
        knobs.read({"PTXGEN_PDL": "maybe"})
