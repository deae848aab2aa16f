"""``bench/timeline.py``'s clock stamps (docs/performance.md, "Small products: where a CTA's time goes").

The probe loads a copy of a kernel's PTX with ``%clock64`` / ``%globaltimer`` reads and one thread's stores added:
it must add lines only (every line of the kernel's own PTX kept, in order, so the timed kernel computes what the
shipped one does), assemble with 0 spills and no wgmma serialization (``ptxgen.assemble`` refuses that), and refuse a
kernel whose stamp points it does not find rather than time a kernel it did not instrument.
"""

import pytest

from ptxgen.assemble import assemble
from ptxgen.build import build
from tests.helpers.runtime import bench_module

STAMP_LINES = 45  # declarations, clock reads, the slot address and the stores


@pytest.mark.parametrize("name", ["h100_128x64", "h100_64x128", "h100_128x256", "h100_128x80_c2n"])
def test_the_stamps_only_add_lines_and_assemble(name):
    ptx = build(name).ptx
    stamped = bench_module("timeline").instrument(ptx)
    remaining = iter(stamped.splitlines())
    assert all(line in remaining for line in ptx.splitlines())  # the kernel's lines, in order
    commits = stamped.count("cp.async.bulk.commit_group;")  # each TMA-store commit is stamped
    assert 0 < len(stamped.splitlines()) - len(ptx.splitlines()) <= STAMP_LINES + commits
    assert stamped.count("%clock64") == 11 + commits and stamped.count("%globaltimer") == 2
    result = assemble(stamped, "sm_90a")
    assert result.spill_store_bytes == result.spill_load_bytes == 0


def test_a_kernel_without_the_stamp_points_is_refused():
    with pytest.raises(ValueError, match="timeline: no accumulator declaration"):
        bench_module("timeline").instrument(build("level9").ptx)  # sm_100a: TMEM accumulators, no register fragments
