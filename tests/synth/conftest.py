from __future__ import annotations

from pathlib import Path

import pytest

from cuda_agent.measure import TimingPlan
from cuda_agent.synth.filters import Window
from cuda_agent.synth.run import SynthConfig

KERNELBENCH_JSONL = Path(__file__).resolve().parents[3] / "shared" / "kernelbench" / "kernelbench.jsonl"
FAST_TIMING = {"min_runs": 3, "max_runs": 20, "budget_s": 0.05, "warmup_s": 0.01, "min_warmup": 1}
# Two transformers families keep the crawl and its check short; the full crawl takes every model type.
HF_FAMILIES = ("llama", "bert")


@pytest.fixture(scope="session")
def catalog(tmp_path_factory):
    """The crawled catalog checked on CPU (cached in the test home across sessions)."""
    from cuda_agent.home import subdir
    from cuda_agent.synth.seedcheck import build_catalog

    return build_catalog("cpu", tmp_path_factory.mktemp("seedcheck"), cache=subdir("synth") / "seeds-cpu.json",
                         families=HF_FAMILIES)


@pytest.fixture
def cpu_config(tmp_path: Path) -> SynthConfig:
    kb = KERNELBENCH_JSONL if KERNELBENCH_JSONL.exists() else None
    return SynthConfig(out=tmp_path / "ds.parquet", count=1, device="cpu", window=Window(0.02, 20.0),
                       kernelbench=kb, timing=TimingPlan(**FAST_TIMING), max_candidates=12, hf_families=HF_FAMILIES)
