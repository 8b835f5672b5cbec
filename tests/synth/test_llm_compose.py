"""The LLM composer against a real local HTTP server that answers from a script."""
from __future__ import annotations

import pytest

from agent.fakes import ChatServer, error, reply
from cuda_agent.agent.config import load_config, override
from cuda_agent.llm import Endpoint, OpenAIModel
from cuda_agent.synth.compose import ComposeError
from cuda_agent.synth.llm_compose import LLMComposer
from cuda_agent.synth.run import Run

from .test_filters import task

GOOD = "Here it is:\n```python\n" + task("return torch.tanh(self.linear(x))") + "```\n"


def model_for(server: ChatServer) -> OpenAIModel:
    settings = override(load_config(), model={"backoff_s": 0.01, "backoff_max_s": 0.02, "timeout_s": 2.0,
                                              "max_retries": 1}).model
    return OpenAIModel(Endpoint.resolve("test-model", server.url, "k"), settings)


def test_a_good_reply_becomes_a_candidate_with_the_chosen_seeds(catalog):
    with ChatServer([reply(GOOD)]) as server:
        composer = LLMComposer(model_for(server), catalog.usable(), run_seed=3)
        cand = composer.compose(4)
    assert cand.code.startswith("import torch") and cand.composer == "llm"
    assert cand.ops == [s.name for s in composer.choose(4)]
    prompt = server.requests[0]["messages"][1]["content"]
    assert all(op in prompt for op in cand.ops) and "get_init_inputs" in prompt


@pytest.mark.parametrize("bad", [
    reply("I cannot help with that."),
    reply("```python\nclass Model(nn.Module:\n    pass\n```"),
    reply("```python\nimport torch\nclass Model:\n    def forward(self, x):\n        return x\n```"),
    reply(""),
    error(500, "overloaded"),
])
def test_malformed_replies_and_endpoint_errors_are_invalid_candidates(catalog, bad):
    with ChatServer([bad, bad]) as server:
        composer = LLMComposer(model_for(server), catalog.usable())
        with pytest.raises(ComposeError):
            composer.compose(0)
    assert composer.usage["invalid"] + composer.usage["errors"] == 1


@pytest.mark.slow
def test_a_run_counts_invalid_replies_and_never_crashes(catalog, cpu_config):
    script = [reply("no code"), reply("```python\nx = (\n```"), error(400, "bad request")]
    with ChatServer(script) as server:
        cpu_config.composer, cpu_config.max_candidates = "llm", 3
        run = Run(cpu_config, LLMComposer(model_for(server), catalog.usable()))
        assert run.run() == []
    records = run.journal.records
    assert sorted(records) == [0, 1, 2] and {r["filter"] for r in records.values()} == {"compose"}
    assert "refused" in records[2]["reason"]
