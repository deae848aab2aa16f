"""gemm's per-call cache: a repeated call signature skips the full setup and still checks its pointers."""

from __future__ import annotations

import pytest

from ptxgen.errors import ShapeError
from tests.helpers.runtime import bf16, spec


class FakeLauncher:
    def __init__(self):
        self.calls = []

    def launch(self, grid_x, maps, scalars, stream):
        self.calls.append((grid_x, maps, scalars, stream))


@pytest.fixture
def fake_setup(monkeypatch, torch_mod):
    """gemm with the driver replaced: counts the full (slow) setups, records the fast launches."""
    from ptxgen.launch import GridPolicy, LaunchSpec
    from ptxgen.runtime import api, driver

    launch_spec = LaunchSpec(name="fake", arch="sm_90a", kernel="k", block=(128, 1, 1), cluster=(1, 1, 1),
                             dynamic_smem_bytes=0, grid=GridPolicy(True, 128, 128, 1),
                             tensor_maps={t: spec(tensor=t) for t in "abd"})
    launcher = FakeLauncher()
    setups = []

    def setup(family, a, bs, out, config):
        m, n, k = api.check_gemm_inputs(a, bs[0], out, require_cuda=False)
        setups.append((tuple(a.shape), tuple(bs[0].shape), config))
        return api.LoadedKernel(None, launcher, launch_spec), 0, m, n, k, 7

    monkeypatch.setattr(api, "_checked_setup", setup)
    monkeypatch.setattr(api, "current_stream", lambda ordinal: 99)
    monkeypatch.setattr(api, "_current_device", lambda: 0)
    monkeypatch.setattr(driver, "ensure_context", lambda ordinal=None: 0)
    monkeypatch.setattr(api, "_calls", {})
    return launcher, setups


def test_gemm_signature_cache(fake_setup):
    from ptxgen.runtime import api

    launcher, setups = fake_setup
    a, b, out = bf16(64, 32), bf16(48, 32), bf16(64, 48)
    assert api.gemm(a, b, out=out, config="c") is out
    assert api.gemm(a, b, out=out, config="c") is out
    assert len(setups) == 1 and len(launcher.calls) == 2
    grid, maps, scalars, stream = launcher.calls[-1]
    assert (grid, stream) == (7, 99)
    assert maps == ((a.data_ptr(), 64, 32, 32), (b.data_ptr(), 48, 32, 32), (out.data_ptr(), 64, 48, 48))
    assert scalars == (out.data_ptr(), 64, 48, 32)
    # new tensors, same signature: still cached, new pointers
    a2, b2, out2 = bf16(64, 32), bf16(48, 32), bf16(64, 48)
    api.gemm(a2, b2, out=out2, config="c")
    assert len(setups) == 1 and launcher.calls[-1][1][0][0] == a2.data_ptr()
    # another shape, another config, N not a multiple of 8 (no D map): new setups
    api.gemm(bf16(64, 40), bf16(20, 40), config="c")
    assert launcher.calls[-1][1][2] is None
    api.gemm(a, b, out=out, config="other")
    assert len(setups) == 3


def test_gemm_cached_signature_still_checks_pointers(fake_setup):
    from ptxgen.runtime import api

    launcher, setups = fake_setup
    a, b, out = bf16(64, 32), bf16(48, 32), bf16(64, 48)
    api.gemm(a, b, out=out, config="c")
    n_launches = len(launcher.calls)
    base = bf16(64 * 48 + 8)
    shifted = base[1:1 + 64 * 48].view(64, 48)  # same signature, misaligned by 2 bytes
    with pytest.raises(ShapeError):
        api.gemm(a, b, out=shifted, config="c")
    big = bf16(64, 48)
    a_alias = big.view(-1)[: 64 * 32].view(64, 32)  # A inside D's memory
    with pytest.raises(ShapeError):
        api.gemm(a_alias, b, out=big, config="c")
    assert len(launcher.calls) == n_launches


def test_gemm_config_objects_are_keyed_by_identity(fake_setup, built_h100):
    from ptxgen.runtime import api

    launcher, setups = fake_setup
    cfg = built_h100.config
    a, b = bf16(64, 32), bf16(48, 32)
    api.gemm(a, b, config=cfg)
    api.gemm(a, b, config=cfg)
    assert len(setups) == 1
    api.gemm(a, b, config=cfg.replace())  # an equal but distinct object: checked again
    assert len(setups) == 2


def test_gemm_non_tensor_reaches_the_full_check(fake_setup):
    from ptxgen.runtime import api

    with pytest.raises(ShapeError, match=r"^a: got list"):
        api.gemm([[1.0]], bf16(4, 8))


def test_split_k_workspace_is_looked_up_once_per_stream_and_never_memoized_under_capture(fake_setup, monkeypatch):
    """A split-K signature asks split_k_workspace once per stream, not once per call; under graph capture it asks
    every call (split_k_workspace answers with the capture's), and does not replace the stream's memo."""
    from ptxgen.launch import WorkspaceSpec
    from ptxgen.runtime import api

    launcher, _ = fake_setup
    lookups = []

    def workspace(spec, m, n, device, ordinal, stream=None, num_sms=None):
        lookups.append(stream)
        return (1000 + len(lookups),)

    monkeypatch.setattr(api, "split_k_workspace", workspace)
    a, b, out = bf16(64, 32), bf16(48, 32), bf16(64, 48)
    api.gemm(a, b, out=out, config="c")  # the signature's setup (fake: no workspace)
    call = next(iter(api._calls.values()))
    call.spec = call.spec._replace(workspace=WorkspaceSpec(2, 64 * 1024, 2))
    call.split_k, capturing = True, []
    call.capturing = lambda: bool(capturing)
    api.gemm(a, b, out=out, config="c")
    api.gemm(a, b, out=out, config="c")
    assert lookups == [99] and [c[2][-1] for c in launcher.calls[-2:]] == [1001, 1001]
    capturing.append(True)
    api.gemm(a, b, out=out, config="c")
    api.gemm(a, b, out=out, config="c")
    assert lookups == [99, 99, 99] and [c[2][-1] for c in launcher.calls[-2:]] == [1002, 1003]
    capturing.clear()
    api.gemm(a, b, out=out, config="c")
    assert lookups == [99, 99, 99] and launcher.calls[-1][2][-1] == 1001
    monkeypatch.setattr(api, "current_stream", lambda ordinal: 5)  # another stream: its own workspace
    api.gemm(a, b, out=out, config="c")
    assert lookups == [99, 99, 99, 5] and launcher.calls[-1][2][-1] == 1004
