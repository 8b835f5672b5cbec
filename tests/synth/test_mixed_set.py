"""CI builds a small set with a target mix on the CPU backend: the ACCEPTED set meets the mix, and
its summary puts it beside KernelBench."""
from __future__ import annotations

import time
from collections import Counter

import pytest

from cuda_agent.synth.categories import CORE
from cuda_agent.synth.mix import Mix
from cuda_agent.synth.pipeline import synthesize
from cuda_agent.synth.report import write_report

# The default mix (close to KernelBench levels 1-3) at four tasks: two conv, one gemm, one attention.
SMALL_MIX = Mix()
COUNT = 4


@pytest.mark.slow
def test_a_small_cpu_set_meets_its_mix_and_its_summary_sits_beside_kernelbench(catalog, cpu_config,
                                                                               kernelbench_jsonl):
    cpu_config.count, cpu_config.mix, cpu_config.max_candidates = COUNT, SMALL_MIX, 40
    cpu_config.kernelbench = kernelbench_jsonl
    start = time.time()
    rows, _, run = synthesize(cpu_config)
    records = sorted(run.journal.records.values(), key=lambda r: r["index"])
    assert Counter(r["task_class"] for r in rows) == SMALL_MIX.quotas(COUNT), [(r["filter"], r.get("want"), r.get("reason"))
                                                                           for r in records]
    assert sum(r["task_class"] in CORE for r in rows) / len(rows) >= SMALL_MIX.min_core
    assert all(1 <= len(r["ops"]) <= SMALL_MIX.max_ops for r in rows)
    report = write_report(records, rows, cpu_config.state_dir / "summary.md", wall_s=time.time() - start,
                          kernelbench=kernelbench_jsonl, target=SMALL_MIX.normalized, device="cpu")
    text = report.read_text()
    assert "## Beside KernelBench" in text and "| | this set | KernelBench L1-3 | target |" in text
    conv = SMALL_MIX.quotas(COUNT)["conv"]  # read back from the code by the categorizer KernelBench is read with
    assert f"| class: conv | {100 * conv / COUNT:.0f}% ({conv}) |" in text and "| torch.compile speed-up" in text
