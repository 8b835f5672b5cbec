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


def test_config_overrides_parse_as_the_fields_types_and_an_unknown_field_says_which_exist():
    import pytest

    from paired_bench import config_of

    config = config_of("cpu", 1.5, ["window_s=0.2", "graphs=false"], ["sanity_speedup=0", "quiet_host=no"])
    assert (config.sanity_speedup, config.quiet_host, config.timing.window_s, config.timing.graphs,
            config.timing.budget_s) == (0.0, False, 0.2, False, 1.5)
    with pytest.raises(SystemExit, match="no such field 'sanity'.*sanity_speedup"):
        config_of("cpu", 1.0, [], ["sanity=0"])
    with pytest.raises(SystemExit, match="--config timing=x"):   # not a scalar: not settable this way
        config_of("cpu", 1.0, [], ["timing=x"])


def test_an_evaluation_timed_twice_sets_its_first_run_beside_the_second():
    from types import SimpleNamespace

    from paired_bench import first_run, table

    twice = SimpleNamespace(details={"first_solution_timing": {"median_ms": 0.0203},
                                     "first_paired": {"ratios": {"eager": {"value": 3.42}, "compile": {"value": 0.88}}}})
    assert first_run(twice) == {"first_solution_ms": 0.0203, "first_vs_eager": 3.42, "first_vs_compile": 0.88,
                                "first_split_ms": {}}
    assert first_run(SimpleNamespace(details={})) == {}
    row = {"eval": 1, "seconds": 6.0, "reward": 2, "vs_eager": 3.64, "se_eager": 0.002, "vs_compile": 0.94,
           "se_compile": 0.002, "rounds": 6, "window": 6, "stopped": "target", "method": "graph of 14",
           "unpaired_vs_eager": 3.6, "solution_ms": 0.0190, "eager_ms": 0.0693, "compile_ms": 0.0179, "timing_s": 0.6,
           **first_run(twice)}
    text = table([row])
    assert "| 1 | 0.02030 | 0.01900 | -6.40 | 3.420 | 3.640 | 0.880 | 0.940 |" in text
    assert "run 2 / run 1" not in table([{k: v for k, v in row.items() if not k.startswith("first_")}])


def test_each_run_shows_whether_the_host_floor_or_the_off_stream_charge_lifted_a_side_above_its_gpu_time():
    from paired_bench import lift_table, table

    def split(device, floor, off, wall=1.2):
        return {"calls": 70, "device": 1.0, "over": 9.0, "device_median": device, "host_floor": floor,
                "offstream": off, "sample_median": max(device, floor) + off, "wall_median": wall}
    row = {"eval": 3, "first_split_ms": {"solution": split(0.266, 0.02, 0.0), "compile": split(0.251, 0.271, 0.0)},
           "split_ms": {"solution": split(0.266, 0.02, 0.0), "compile": split(0.251, 0.02, 0.0)}}
    lines = lift_table([row])
    assert "| 3 | 1 | 266.0 / 20.0 / 0.0 / 266.0 / 1200, +0.0 | 251.0 / 271.0 / 0.0 / 271.0 / 1200, +8.0 |" in lines
    assert "| 3 | 2 | 266.0 / 20.0 / 0.0 / 266.0 / 1200, +0.0 | 251.0 / 20.0 / 0.0 / 251.0 / 1200, +0.0 |" in lines
    once = lift_table([{"eval": 1, "split_ms": {"solution": split(0.266, 0.3, 0.0)}}])
    assert once[-1] == "| 1 | 1 | 266.0 / 300.0 / 0.0 / 300.0 / 1200, +12.8 |"
    assert lift_table([{"eval": 1, "split_ms": {"solution": {"calls": 1, "device": 1.0, "over": 1.0}}}]) == []
    # a refused evaluation keeps its row: its reason, the watch's figures and what its run saw
    failed = {"eval": 2, "failed": "profile: the harness's own clock saw 0.5007 ms", "split_ms": {"solution": split(
        0.264, 0.02, 0.0, wall=1.9)}, "watch": {"reported_ms": 0.2643, "seen_ms": 0.5007, "overhead_ms": 1.1,
                                                 "tolerance_ms": 0.19, "ok": False}}
    good = {"eval": 1, "seconds": 6.0, "reward": 2, "vs_eager": 3.64, "se_eager": 0.002, "vs_compile": 0.94,
            "se_compile": 0.002, "rounds": 6, "window": 6, "stopped": "target", "method": "graph of 14",
            "unpaired_vs_eager": 3.6, "solution_ms": 0.0190, "eager_ms": 0.0693, "compile_ms": 0.0179, "timing_s": 0.6}
    text = table([good, failed])
    assert "| 2 | profile: the harness's own clock saw 0.5007 ms | 0.2643 / 0.5007 / 1.1 / 0.19 |" in text
    assert "| 2 | 1 | 264.0 / 20.0 / 0.0 / 264.0 / 1900, +0.0 |" in text
