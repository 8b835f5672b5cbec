"""The crawl beyond activations: torch's convolution variants, recurrent cells and losses; the
building blocks of transformers' models from small configs. A block that does not build or run is
dropped with its reason, never a crash."""
from __future__ import annotations

import pytest

from cuda_agent.synth.crawl_torch import crawl_torch_blocks


def test_torch_crawl_finds_conv_variants_recurrent_cells_and_losses():
    seeds, dropped = crawl_torch_blocks()
    by_name = {s.name: s for s in seeds}
    assert {"Conv2dGrouped", "Conv1dDilated", "ConvTranspose2dGrouped", "ConvTranspose3dOutputPadding",
            "LSTMCell", "GRUCell", "RNNCell", "LSTM", "GRU2Layer", "MSELoss", "CrossEntropyLoss",
            "TripletMarginLoss", "KLDivLoss"} <= set(by_name)
    assert "argmax" in by_name["NLLLoss"].call  # class indices, found by trying target forms
    assert {by_name[n].category for n in ("LSTMCell", "GRU", "MSELoss", "Conv2dGrouped")} == {
        "recurrent", "loss", "conv"}
    assert all(s.terminal for s in seeds if s.category == "loss")
    reasons = {d.name: d.reason for d in dropped}
    assert "CTCLoss" in reasons and all(reasons.values())


@pytest.mark.slow
def test_transformers_blocks_are_built_from_small_configs_and_copies_are_dropped():
    pytest.importorskip("transformers")
    from cuda_agent.synth.crawl_transformers import crawl_blocks

    seeds, dropped = crawl_blocks(("llama", "bert", "mistral", "no_such_model"))
    by_name = {s.name: s for s in seeds}
    assert {"hf.LlamaAttention", "hf.LlamaMLP", "hf.LlamaRMSNorm", "hf.LlamaDecoderLayer",
            "hf.BertEmbeddings", "hf.BertPooler"} <= set(by_name)
    assert {by_name[n].category for n in ("hf.LlamaAttention", "hf.LlamaMLP", "hf.LlamaRMSNorm",
                                          "hf.BertEmbeddings", "hf.BertPooler")} == {
        "attention", "gemm", "norm", "embedding", "pool"}
    assert by_name["hf.BertPooler"].out_layout == "NF"
    reasons = {d.name: d.reason for d in dropped}
    assert reasons["hf.MistralRMSNorm"] == "same source as hf.LlamaRMSNorm"
    assert "hf.BertCrossAttention" in reasons  # needs the encoder's states: no call form fits
    assert "no such model type" in reasons["no_such_model"]


def test_the_crawl_keeps_transformers_config_dumps_out_of_the_terminal(tmp_path, capfd):
    """On the H100 machine the crawl printed 1,300 lines of transformers' messages (Falcon's config
    dumped 30 times, at ERROR level, for a head_dim its config does not take): they go to the
    crawl's log, counted, and the terminal keeps what is ours."""
    pytest.importorskip("transformers")
    import logging
    from collections import Counter

    from cuda_agent.synth.crawl import quiet
    from cuda_agent.synth.crawl_transformers import crawl_blocks

    hf = logging.getLogger("transformers")
    before = [(h, h.level) for h in hf.handlers]
    counts: Counter = Counter()
    with quiet(tmp_path / "crawl.log", counts):
        crawl_blocks(("falcon",))
        print("printed by a crawled module")
    terminal = capfd.readouterr()
    assert "FalconConfig" not in terminal.err + terminal.out and "printed" not in terminal.out
    log = (tmp_path / "crawl.log").read_text()
    assert "Can't set head_dim" in log and "printed by a crawled module" in log
    assert counts["transformers"] >= counts["transformers_errors"] > 0
    assert [(h, h.level) for h in hf.handlers] == before  # after the crawl, transformers logs as it did


def test_a_seed_whose_call_draws_random_numbers_is_dropped():
    """A config that leaves a dropout on (SeedOss's residual_dropout), a router's jitter, a layer that draws by
    design: each would be rejected at run time, after a size search. The crawl's trial drops it."""
    from cuda_agent.synth.crawl_torch import trial
    from cuda_agent.synth.seeds import Seed

    drawn = Seed(name="Noisy", category="activation", source="torch", call="{x} + 1e-9 * torch.randn_like({x})",
                 layout="NCHW")
    why, _ = trial(drawn)
    assert why is not None and "draws random numbers" in why
    plain = Seed(name="Plain", category="activation", source="torch", call="torch.tanh({x})", layout="NCHW")
    assert trial(plain)[0] is None
    off = Seed(name="Off", category="activation", source="torch", call="F.dropout({x}, 0.0)", layout="NCHW")
    assert trial(off)[0] is None   # a dropout of zero draws nothing


def test_the_crawl_is_offline_even_where_huggingface_hub_was_imported_first(monkeypatch):
    """A version check imports transformers before the crawl: the variable alone came too late, and on a machine
    without a network each block that wants a checkpoint tried the hub five times with back-off (23 s a try).
    The flag huggingface_hub already read is set too; a user's explicit HF_HUB_OFFLINE=0 is kept."""
    import huggingface_hub  # noqa: F401  (imported before the crawl, as the version check does)
    from huggingface_hub import constants, is_offline_mode

    from cuda_agent.synth.crawl_transformers import _offline

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    _offline()
    assert not is_offline_mode()   # the user's say
    monkeypatch.delenv("HF_HUB_OFFLINE")
    _offline()
    assert is_offline_mode() and constants.HF_HUB_OFFLINE is True
