"""benchmarks/paired_bench.py's watch on the GPU (issue 24: is an evaluation read slow when the GPU ran
slower?): nvidia-smi's CSV lines as samples, and each evaluation's summary of them."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))


def test_the_gpu_watch_reads_nvidia_smis_lines_and_says_the_clocks_range():
    from paired_bench import GpuWatch

    watch = GpuWatch()
    for line in ["1980, 2619, 112.34, 41\n", "1755, 2619, 650.10, 55\n", "1980, 2619, 300.0, 50\n",
                 "[N/A], [N/A], [N/A], [N/A]\n", "Failed to initialize NVML\n"]:
        if (sample := watch.parse(line)) is not None:
            watch.samples.append(sample)
    assert watch.summary() == {"samples": 3, "sm_mhz_min": 1755, "sm_mhz_median": 1980, "sm_mhz_max": 1980,
                               "mem_mhz": [2619], "power_w_max": 650.1, "temp_c_max": 55}


def test_without_nvidia_smi_the_watch_says_nothing_rather_than_a_made_up_state():
    import shutil
    import time

    from paired_bench import GpuWatch

    with GpuWatch(every_ms=50) as watch:
        time.sleep(0.3)
    if shutil.which("nvidia-smi") is None:  # a machine without a GPU (CI): no state, and no failure
        assert watch.summary() == {}
    else:
        assert watch.summary() == {} or watch.summary()["sm_mhz_min"] > 0
