"""The grid policy (ptxgen.launch) and the kernel parameter packing (ptxgen.runtime.module)."""

from __future__ import annotations

import ctypes
import struct

import pytest

from ptxgen.launch import GridPolicy


# --------------------------------------------------------------------------- grid policy


@pytest.mark.parametrize(
    "persistent, m, n, sms, expected",
    [
        (False, 128, 256, 132, 2),  # one cluster tile, 2 CTAs
        (False, 129, 256, 132, 4),  # rows spill into a second tile
        (False, 1, 1, 132, 2),
        (False, 4096, 4096, 132, 2 * 32 * 16),
        (True, 4096, 4096, 132, 132),  # capped at one cluster per 2 SMs
        (True, 128, 256, 132, 2),  # fewer tiles than SMs
        (True, 8192, 8192, 1, 2),  # at least one cluster
    ],
)
def test_grid_x(persistent, m, n, sms, expected):
    policy = GridPolicy(persistent=persistent, tile_rows=128, tile_cols=256, cluster_size=2)
    assert policy.grid_x(m, n, sms) == expected
    assert policy.grid_x(m, n, sms) % policy.cluster_size == 0


def test_cluster_tiles_round_up():
    policy = GridPolicy(persistent=False, tile_rows=128, tile_cols=128, cluster_size=1)
    assert policy.cluster_tiles(257, 1) == 3
    assert policy.cluster_tiles(128, 129) == 2


# --------------------------------------------------------------------------- parameter packing


def test_kernel_params_layout():
    from ptxgen.runtime.module import KernelParams

    maps = [bytes([i]) * 128 for i in (1, 2, 3)]
    params = KernelParams(tuple(maps), 0xDEADBEEF00, 7, 8, 4096)
    for i in range(3):
        assert params.slot_bytes(i) == maps[i]
    assert params.slot_bytes(3) == struct.pack("<Q", 0xDEADBEEF00)
    assert [params.slot_bytes(i) for i in (4, 5, 6)] == [struct.pack("<I", v) for v in (7, 8, 4096)]
    ptrs = (ctypes.c_void_p * 7).from_address(params.address)
    assert ctypes.string_at(ptrs[1], 128) == maps[1]


def test_kernel_params_unused_map_is_zero():
    from ptxgen.runtime.module import KernelParams

    params = KernelParams((b"\1" * 128, b"\2" * 128, None), 0, 1, 1, 8)
    assert params.slot_bytes(2) == bytes(128)


def test_kernel_params_reject_bad_values():
    from ptxgen.runtime.module import KernelParams

    maps = (bytes(128),) * 3
    with pytest.raises(ValueError, match=r"m=4294967296: must fit in u32"):
        KernelParams(maps, 0, 1 << 32, 1, 8)
    with pytest.raises(ValueError, match=r"tensor map must be 128 bytes, got 64"):
        KernelParams((bytes(64),) * 3, 0, 1, 1, 8)


def test_kernel_params_from_cu_tensor_map():
    pytest.importorskip("cuda.bindings.driver")
    from cuda.bindings import driver as cu

    from ptxgen.runtime.module import KernelParams, tensor_map_bytes

    tmap = cu.CUtensorMap()
    ctypes.memmove(tmap.getPtr(), bytes(range(128)), 128)
    assert tensor_map_bytes(tmap) == bytes(range(128))
    assert KernelParams((tmap, tmap, tmap), 0, 1, 1, 8).slot_bytes(0) == bytes(range(128))


def test_ptx_target():
    from ptxgen.runtime.module import ptx_target

    assert ptx_target(".version 8.8\n.target sm_90a\n.address_size 64\n") == "sm_90a"
    assert ptx_target("// nothing") == ""
