"""ptxas / nvJitLink / nvdisasm through ptxgen.assemble, on tiny hand-written kernels.

Tests marked ``compile`` need the NVIDIA wheels (no GPU); the log/SASS parsers
are tested on captured text and run everywhere.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ptxgen.assemble import (
    assemble,
    check_log,
    count_opcodes,
    opcode_histogram,
    parse_diagnostics,
    parse_resources,
    toolchain_version,
)
from ptxgen.errors import AssembleError


def _tools_available() -> bool:
    try:
        from cuda.pathfinder import find_nvidia_binary_utility
    except ImportError:
        return False
    return all(find_nvidia_binary_utility(tool) for tool in ("ptxas", "nvdisasm"))


_needs_tools = pytest.mark.skipif(
    not _tools_available(),
    reason="assembler wheels (cuda-pathfinder, nvidia-cuda-nvcc, nvidia-cuda-nvdisasm) not installed")


def compile_test(fn: Callable[..., None]) -> Callable[..., None]:
    """Mark a test ``compile`` and skip it when the assembler wheels are missing."""
    return pytest.mark.compile(_needs_tools(fn))

HEADER_90 = ".version 8.8\n.target sm_90a\n.address_size 64\n"
HEADER_100 = ".version 8.8\n.target sm_100a\n.address_size 64\n"
ACC = "{%f0, %f1, %f2, %f3, %f4, %f5, %f6, %f7}"

# One m64n16k16 wgmma on a 2 KiB static tile; descriptors: K-major bf16, 128B swizzle (high word 0x40000040).
WGMMA_PTX = HEADER_90 + f"""
.visible .entry wg_tiny(.param .u64 out)
{{
    .reg .b32 %r<4>;
    .reg .f32 %f<8>;
    .reg .b64 %rd<4>;
    .shared .align 1024 .b8 tile[2048];
    mov.u32 %r0, tile;
    shr.u32 %r1, %r0, 4;
    mov.b64 %rd0, {{%r1, 0x40000040}};
    add.u64 %rd1, %rd0, 64;
    wgmma.fence.sync.aligned;
    wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {ACC}, %rd0, %rd1, 0, 1, 1, 0, 0;
    wgmma.commit_group.sync.aligned;
    wgmma.wait_group.sync.aligned 0;
    add.f32 %f0, %f0, %f7;
    ld.param.u64 %rd2, [out];
    cvta.to.global.u64 %rd2, %rd2;
    st.global.f32 [%rd2], %f0;
    ret;
}}
"""

# A mov into an accumulator between two chained wgmmas: ptxas 13.5 -O3 serializes (C7511).
SERIALIZED_PTX = WGMMA_PTX.replace("wg_tiny", "wg_serialized").replace(
    "    wgmma.commit_group", f"""    mov.f32 %f0, 0f3F800000;
    wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {ACC}, %rd0, %rd1, 1, 1, 1, 0, 0;
    wgmma.commit_group""")

# alloc -> one tcgen05.mma (M128 N128, idesc 0x08200490) -> commit to an mbarrier -> wait -> tcgen05.ld -> dealloc.
TCGEN05_PTX = HEADER_100 + """
.extern .shared .align 1024 .b8 smem[];
.visible .entry tc_tiny(.param .u64 out)
{
    .reg .pred %p<4>;
    .reg .b32 %r<16>;
    .reg .b64 %rd<4>;
    .shared .align 8 .b8 slots[16];
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, slots;
    add.u32 %r2, %r1, 8;
    setp.eq.u32 %p0, %r0, 0;
    @%p0 mbarrier.init.shared::cta.b64 [%r2], 1;
    fence.mbarrier_init.release.cluster;
    setp.lt.u32 %p1, %r0, 32;
    @!%p1 bra.uni ALLOCATED;
    tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r1], 128;
    tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;
ALLOCATED:
    tcgen05.fence::before_thread_sync;
    bar.sync 0;
    tcgen05.fence::after_thread_sync;
    ld.shared.u32 %r3, [%r1];
    @!%p0 bra.uni WAIT;
    mov.u32 %r4, smem;
    shr.u32 %r5, %r4, 4;
    mov.b64 %rd0, {%r5, 0x40004040};
    add.u64 %rd1, %rd0, 1024;
    tcgen05.mma.cta_group::1.kind::f16 [%r3], %rd0, %rd1, 0x08200490, 0;
    tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%r2];
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r2], 0;
    @!%p2 bra.uni WAIT;
    tcgen05.fence::after_thread_sync;
    setp.lt.u32 %p3, %r0, 128;
    @!%p3 bra.uni DEALLOC;
    shl.b32 %r6, %r0, 16;
    and.b32 %r6, %r6, 0x600000;
    add.u32 %r6, %r6, %r3;
    tcgen05.ld.sync.aligned.32x32b.x2.b32 {%r7, %r8}, [%r6];
    tcgen05.wait::ld.sync.aligned;
    add.u32 %r7, %r7, %r8;
    ld.param.u64 %rd2, [out];
    cvta.to.global.u64 %rd2, %rd2;
    mul.wide.u32 %rd3, %r0, 4;
    add.u64 %rd2, %rd2, %rd3;
    st.global.u32 [%rd2], %r7;
DEALLOC:
    tcgen05.fence::before_thread_sync;
    bar.sync 0;
    @!%p1 bra.uni DONE;
    tcgen05.fence::after_thread_sync;
    tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r3, 128;
DONE:
    ret;
}
"""

BAD_TEXT = "add.f32 %f0, %f0, %undeclared;"
BROKEN_PTX = WGMMA_PTX.replace("add.f32 %f0, %f0, %f7;", BAD_TEXT)


def line_of(ptx: str, text: str) -> int:
    """1-based number of the first PTX line containing ``text``."""
    return next(i for i, line in enumerate(ptx.splitlines(), 1) if text in line)


# --- with the assembler -------------------------------------------------------------

@compile_test
@pytest.mark.parametrize("backend", ["ptxas", "nvjitlink"])
def test_wgmma_kernel_assembles(backend: str) -> None:
    r = assemble(WGMMA_PTX, "sm_90a", sass=True, backend=backend)
    assert r.kernel == "wg_tiny" and r.target == "sm_90a"
    assert r.cubin[:4] == b"\x7fELF"
    assert r.registers > 0
    assert r.shared_bytes >= 2048  # nvJitLink adds the 1 KiB system reservation on sm_90a
    assert (r.spill_store_bytes, r.spill_load_bytes, r.stack_frame_bytes) == (0, 0, 0)
    assert r.warnings == ()
    assert r.count("HGMMA") == 1 and "HGMMA.64x16x16.F32.BF16" in r.opcodes
    assert r.count("WARPGROUP.ARRIVE") == 1
    assert r.toolchain == toolchain_version(backend) and r.toolchain.startswith(backend)


@compile_test
def test_tcgen05_kernel_sass() -> None:
    r = assemble(TCGEN05_PTX, "sm_100a", sass=True)
    assert r.kernel == "tc_tiny"
    # 16 B of static slots, padded to the 1024-B alignment of the extern dynamic array that follows.
    assert r.registers > 0 and r.shared_bytes == 1024
    assert r.count("UTCHMMA") == 1   # tcgen05.mma
    assert r.count("UTCBAR") == 1    # tcgen05.commit
    assert r.count("LDTM") == 1      # tcgen05.ld (as LDTM.x2)
    assert r.count("UTCATOMSWS") >= 1  # tcgen05.alloc / dealloc bookkeeping
    assert r.sass is not None and "UTCHMMA" in r.sass


@compile_test
def test_without_sass_no_histogram() -> None:
    r = assemble(WGMMA_PTX, "sm_90a")
    assert r.sass is None and r.opcodes == {} and r.count("HGMMA") == 0


@compile_test
@pytest.mark.parametrize("backend", ["ptxas", "nvjitlink"])
def test_broken_ptx_names_line_and_text(backend: str) -> None:
    expected = line_of(BROKEN_PTX, BAD_TEXT)
    with pytest.raises(AssembleError) as info:
        assemble(BROKEN_PTX, "sm_90a", backend=backend)
    e = info.value
    assert e.line == expected and e.source_line is not None and BAD_TEXT in e.source_line
    assert f"at line {expected}:" in str(e) and BAD_TEXT in str(e) and "%undeclared" in str(e)
    assert "error" in e.log


@compile_test
def test_wrong_target_is_rejected() -> None:
    with pytest.raises(AssembleError, match="rejected the PTX"):
        assemble(TCGEN05_PTX, "sm_90a")


@compile_test
def test_wgmma_serialization_raises() -> None:
    with pytest.raises(AssembleError, match=r"serialized the wgmma pipeline \(C75\d\d\)") as info:
        assemble(SERIALIZED_PTX, "sm_90a")
    wgmma_lines = [i for i, line in enumerate(SERIALIZED_PTX.splitlines(), 1) if "wgmma.mma_async" in line]
    assert info.value.line in wgmma_lines  # ptxas 13.5 points at the second one
    assert "wgmma.mma_async" in (info.value.source_line or "")


@compile_test
def test_spills_are_data_not_errors() -> None:
    n = 48
    body = "".join(f"    ld.volatile.global.f32 %f{i}, [%rd0+{4 * i}];\n" for i in range(n))
    body += "".join(f"    fma.rn.f32 %acc, %f{i}, %f{(i * 7) % n}, %acc;\n" for i in range(n))
    ptx = HEADER_90 + f"""
.visible .entry spiller(.param .u64 p) .maxnreg 24
{{
    .reg .f32 %f<{n}>, %acc;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd0, [p];
    cvta.to.global.u64 %rd0, %rd0;
    mov.f32 %acc, 0f00000000;
{body}    st.global.f32 [%rd0], %acc;
    ret;
}}
"""
    r = assemble(ptx, "sm_90a")
    assert r.registers <= 24
    assert r.spill_store_bytes > 0 and r.spill_load_bytes > 0 and r.stack_frame_bytes > 0
    assert any("spilled" in w for w in r.warnings)


@compile_test
def test_toolchain_version() -> None:
    v = toolchain_version()
    assert v.startswith("ptxas ") and v.endswith(" -O3") and v is toolchain_version()


# --- parsers on captured text (no tools needed) ------------------------------------

CAPTURED_PTX = "\n".join(f"line {i}" for i in range(1, 31))


@pytest.mark.parametrize("log_line", [
    # C7515: wording of ptxas's message as it appears in public build logs.
    "ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized due to "
    "non wgmma instructions defining accumulator registers of a wgmma between start and end of the pipeline "
    "stage in the function 'k' in line 12",
    # C7519: captured here (ptxas 13.5 -c, an extern call between two wgmmas); not in SERIALIZATION_CODES,
    # caught by its text.
    "ptxas info    : (C7519) Potential Performance Loss: wgmma.mma_async instructions are serialized due to "
    "program dependence on compiler-inserted WG.AR in divergent path in the function 'k' in line 12",
    # Synthetic: a listed code with other wording, and a listed code printed as a warning.
    "ptxas info    : (C7510) Potential Performance Loss: pipeline stage broken in the function 'k' in line 12",
    "ptxas kernel.ptx, line 12; warning : (C7515) wgmma pipeline stalls",
])
def test_serialization_classifier(log_line: str) -> None:
    (d,) = parse_diagnostics(log_line)
    assert d.is_serialization and d.line == 12
    with pytest.raises(AssembleError, match="serialized the wgmma pipeline") as info:
        check_log(CAPTURED_PTX, log_line)
    assert info.value.line == 12 and info.value.source_line == "line 12"
    assert "12 | line 12" in str(info.value)


def test_injected_wait_is_a_warning_not_an_error() -> None:
    log = ("ptxas info    : (C7517) wgmma.wait_group is injected in around line 27 by compiler to allow use of "
           "registers defined by GMMA in function 'k'\nptxas info    : Used 34 registers, used 0 barriers")
    diagnostics = check_log(CAPTURED_PTX, log)
    assert [d.code for d in diagnostics if d.is_warning] == ["C7517"]
    assert diagnostics[0].line == 27


def test_error_without_line_and_failed_run() -> None:
    with pytest.raises(AssembleError, match="rejected the PTX: Parsing error") as info:
        check_log(CAPTURED_PTX, "ptxas fatal   : Parsing error near '{': syntax error")
    assert info.value.line is None
    with pytest.raises(AssembleError, match="rejected the PTX"):
        check_log(CAPTURED_PTX, "", failed=True)


PTXAS_REPORT = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k' for 'sm_90a'
ptxas info    : Function properties for k
    432 bytes stack frame, 432 bytes spill stores, 604 bytes spill loads
ptxas info    : Used 24 registers, used 0 barriers, 432 bytes cumulative stack size, 4096 bytes smem
ptxas info    : Compile time = 10.685 ms
"""

NVJITLINK_REPORT = """ptxas info    : Compiling entry function 'k' for 'sm_90a'
ptxas info    : Function properties for k
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 34 registers, used 0 barriers
info    : Function properties for 'k':
info    : used 34 registers, used 5 barriers, 0 stack, 1024 bytes smem, 540 bytes cmem[0], 0 bytes lmem
"""


def test_parse_resources() -> None:
    r = parse_resources(PTXAS_REPORT)
    assert (r.kernel, r.registers, r.shared_bytes) == ("k", 24, 4096)
    assert (r.stack_frame_bytes, r.spill_store_bytes, r.spill_load_bytes) == (432, 432, 604)
    r = parse_resources(NVJITLINK_REPORT)
    assert (r.kernel, r.registers, r.shared_bytes, r.spill_store_bytes) == ("k", 34, 1024, 0)


def test_parse_resources_needs_one_entry() -> None:
    with pytest.raises(AssembleError, match="expected one .entry"):
        parse_resources(PTXAS_REPORT + PTXAS_REPORT.replace("'k'", "'k2'"))
    with pytest.raises(AssembleError, match="expected one .entry"):
        parse_resources("ptxas info    : 0 bytes gmem")


SASS = """
        /*0000*/                   LDC R1, c[0x0][0x37c] ;
        /*00a0*/                   UTCHMMA gdesc[UR4], gdesc[UR6], tmem[UR12], tmem[UR10], idesc[UR11], UP0 ;
.L_x_8:
        /*0090*/              @!P0 UTCHMMA gdesc[UR4], gdesc[UR6], tmem[UR12], tmem[UR10], idesc[UR11], !UPT ;
        /*0510*/                   UTCBAR [UR4], URZ ;
        /*0890*/                   @UP0 UTCATOMSWS.AND URZ, UR5 ;
        /*0630*/                   LDTM.x4 R4, tmem[UR4] ;
        /*00e0*/                   HGMMA.64x16x16.F32.BF16 R24, gdesc[UR8], RZ, !UPT, gsb0 ;
        /*0590*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR8+0x8], R2 ;
        /*06f0*/               @P1 EXIT ;
"""


def test_opcode_histogram_and_count() -> None:
    ops = opcode_histogram(SASS)
    assert ops == {"EXIT": 1, "HGMMA.64x16x16.F32.BF16": 1, "LDC": 1, "LDTM.x4": 1,
                   "SYNCS.PHASECHK.TRANS64.TRYWAIT": 1, "UTCATOMSWS.AND": 1, "UTCBAR": 1, "UTCHMMA": 2}
    assert count_opcodes(ops, "UTCHMMA") == 2
    assert count_opcodes(ops, "HGMMA") == 1
    assert count_opcodes(ops, "SYNCS.PHASECHK") == 1
    assert count_opcodes(ops, "LDT") == 0  # whole dotted components only
    assert count_opcodes(ops, "UTC") == 0


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="target='sm_80'"):
        assemble(WGMMA_PTX, "sm_80")
    with pytest.raises(ValueError, match="backend='nvcc'"):
        assemble(WGMMA_PTX, "sm_90a", backend="nvcc")
