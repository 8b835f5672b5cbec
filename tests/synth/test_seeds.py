from __future__ import annotations

from cuda_agent.synth.compose import emit
from cuda_agent.synth.crawl import crawl_catalog
from cuda_agent.synth.execute import Executor
from cuda_agent.synth.seedcheck import check_seed, single_seed_program
from cuda_agent.synth.seeds import CURATED, STOCHASTIC_NAMES, Seed
from cuda_agent.tasks.validate import validate_source


def test_crawl_finds_torch_modules_and_functional_ops_beyond_the_curated_table():
    seeds = crawl_catalog(families=()).seeds
    names = {s.name for s in seeds}
    assert {"Conv2d", "Linear", "BatchNorm2d", "MultiheadAttention", "Softmax"} <= names
    assert {"Mish", "Hardswish", "F.gelu"} <= names  # from the crawl
    assert len(names) == len(seeds) > len(CURATED)
    assert {s.source for s in seeds} >= {"torch.nn", "torch.nn.functional", "torch"}


def test_no_stochastic_operator_is_a_seed():
    for s in crawl_catalog(families=()).seeds:
        text = f"{s.name} {s.ctor} {s.call}".lower()
        assert not any(word in text for word in STOCHASTIC_NAMES), s


def test_every_curated_seed_emits_a_valid_task():
    for seed in CURATED:
        validate_source(emit(single_seed_program(seed)), seed.name)


def test_checked_catalog_keeps_working_seeds_and_explains_failures(catalog):
    usable = {s.name for s in catalog.usable()}
    assert {"Conv2d", "ConvTranspose3d", "GroupNorm", "MultiheadAttention", "Bilinear"} <= usable
    failed = {s.name: s.note for s in catalog.seeds if s.checked is False}
    assert "GLU" in failed and "keep" in failed["GLU"]  # halves a dim: not shape-preserving
    assert set(catalog.counts("category")) >= {"conv", "norm", "activation", "pool", "attention", "reduction"}


def test_a_seed_that_crashes_the_process_is_contained(tmp_path):
    crash = Seed("Abort", "elementwise", "torch", "__import__('os').abort() or {x}", "any")
    executor = Executor(tmp_path / "w")
    try:
        ok, why = check_seed(executor, crash, "cpu")
        assert not ok and "crashed" in why
        assert check_seed(executor, next(s for s in CURATED if s.name == "Conv1d"), "cpu") == (True, "")
    finally:
        executor.clean()
