"""benchmarks/paired_bench.py's watch on the GPU (issue 24: is an evaluation read slow when the GPU ran
slower?), clock_probe's sampler tagged per evaluation: nvidia-smi's CSV lines as samples, and each
evaluation's summary of them."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))


def test_the_gpu_watch_reads_nvidia_smis_lines_and_says_the_clocks_range_of_each_evaluation():
    from paired_bench import Clocks

    watch = Clocks.__new__(Clocks)  # its samples as its reader thread would store them, no nvidia-smi started
    watch.side, watch.samples, watch.proc = "idle", [], None
    for side, line in [("eval 1", "1980, 2619, 112.34, 41, 0x0"), ("eval 1", "1755, 2619, 650.10, 55, 0x4"),
                       ("eval 1", "1980, 2619, 300.0, 50, 0x0"), ("eval 2", "1980, 2619, 90.0, 40, 0x0"),
                       ("eval 1", "[N/A], [N/A], [N/A], [N/A], [N/A]")]:
        watch.samples.append((side, [f.strip() for f in line.split(",")]))
    got = watch.summary("eval 1")
    assert (got["samples"], got["sm_min"], got["sm_max"], got["temp_c"]) == (4, 1755, 1980, 48.7)
    assert got["event_reasons"] == ["0x0", "0x4", "[N/A]"] and watch.summary("eval 2")["sm_mhz"] == 1980


def test_without_nvidia_smi_the_watch_says_nothing_rather_than_a_made_up_state():
    from paired_bench import Clocks

    watch = Clocks("0", every_ms=50)
    watch.stop()
    if shutil.which("nvidia-smi") is None:  # a machine without a GPU (CI): no state, and no failure
        assert watch.summary("idle")["samples"] == 0 and watch.summary("idle")["sm_mhz"] is None
