"""The whole crawl: the curated table, torch's modules and functions, torch's convolution variants,
recurrent cells and losses, and transformers' activations and model blocks, as one unchecked
catalog with the operators that were dropped and why (seedcheck.py then runs each seed in a child)."""

from __future__ import annotations

from dataclasses import asdict

from cuda_agent.synth.crawl_torch import crawl_torch_blocks
from cuda_agent.synth.crawl_transformers import crawl_activations, crawl_blocks
from cuda_agent.synth.seeds import CURATED, Catalog, _unique, crawl_functional, crawl_nn_modules, crawl_op_db


def crawl_catalog(families: tuple[str, ...] | None = None) -> Catalog:
    """Every seed the crawl finds (names unique, the curated table first); `families`: the
    transformers model types to take blocks from (None: all it registers; () : none)."""
    curated_ctors = {s.ctor for s in CURATED}
    hf_blocks, hf_dropped = crawl_blocks(families) if families != () else ([], [])  # first: it sets offline mode
    torch_blocks, dropped = crawl_torch_blocks()
    crawled = [s for s in [*crawl_nn_modules(), *torch_blocks] if s.ctor not in curated_ctors]
    seeds = _unique([*CURATED, *crawled, *crawl_functional(), *crawl_op_db(), *crawl_activations(), *hf_blocks])
    return Catalog(seeds, [asdict(d) for d in [*dropped, *hf_dropped]])
