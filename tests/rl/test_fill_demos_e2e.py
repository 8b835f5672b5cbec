"""The multi-turn form from a model whose own chat template shows no tools, for real on the CPU (verl's
CPU platform, the tiny model given cuda-agent's tool template as SmolLM2 gets it): fill_agentic_rft
collects two demonstrations through the harness (one right first, one wrong first), fine-tunes on
them (verl's SFT, 2 steps), and fill_collect runs its actor in the agent loop on two held-out tasks;
pass after turn k is read back from the journal and by fill_eval. A random policy never passes: this
shows the wiring, not learning."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("verl", reason="verl is not installed: the rl tests need `pip install -e '.[rl]'` (verl 0.9.1)")

from transformers import AutoTokenizer  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from cuda_agent.agent.trajectory import read_records  # noqa: E402
from cuda_agent.cli import app  # noqa: E402
from cuda_agent.journal import read_rows  # noqa: E402
from cuda_agent.rl.data.rft import trajectory_files  # noqa: E402
from cuda_agent.rl.rollout.chat_template import TOOL_TEMPLATE  # noqa: E402
from cuda_agent.rl.tools.fill_eval import main as fill_eval  # noqa: E402


@pytest.mark.slow
@pytest.mark.long
def test_fill_agentic_rft_then_fill_collect_on_the_cpu(tmp_path, tool_model, agent_toml):
    run = tmp_path / "run.yaml"
    run.write_text(f"out: {tmp_path / 'run'}\nmodel: {tool_model}\nplatform: cpu\ndevice: cpu\nseed: 1\n"
                   f"agent_config: {agent_toml}\nharness: {{cpu_evaluators: 2, build_workers: 0}}\n"
                   "fill: {demos: 2, wrong_share: 0.5, rft_ops: [elu]}\n")
    for args in (["fill_agentic_rft", "fill_agentic_rft:trainer.total_training_steps=2"],
                 ["fill_collect", "fill_collect:data.val_max_samples=2", "fill_collect:data.train_batch_size=1",
                  "fill_collect:actor_rollout_ref.rollout.val_kwargs.n=1", "fill_collect:data.max_response_length=256"]):
        result = CliRunner().invoke(app, ["train", args[0], "--config", str(run), "--quiet", *args[1:]])
        assert result.exit_code == 0, result.output
    journal = {(r["stage"], r["event"]): r for r in read_rows(tmp_path / "run" / "stages.jsonl")}
    arft = journal[("fill_agentic_rft", "finished")]
    assert arft["inputs"]["demonstrations"] == 2 and arft["inputs"]["wrong_first"] == 1 and arft["inputs"]["kept"] == 2
    assert arft["inputs"]["pass_at_turn"] == {"1": 0.5, "2": 1.0} and arft["steps"] == 2
    actor = arft["outputs"]["actor"]
    assert AutoTokenizer.from_pretrained(actor).chat_template == TOOL_TEMPLATE   # carried through verl's export

    collect = journal[("fill_collect", "finished")]
    assert journal[("fill_collect", "started")]["inputs"]["actor"] == actor
    runs = [read_records(p) for p in trajectory_files([collect["outputs"]["runs"]])]
    assert len(runs) == collect["outputs"]["trajectories"] == 2
    assert all(next(r for r in rs if r["type"] == "run")["model"] == "verl-rollout" for rs in runs)
    assert set(collect["outputs"]["pass_at_turn"]) >= {"1"} and 0.0 <= collect["outputs"]["pass"] <= 1.0
    assert fill_eval(["--runs", collect["outputs"]["runs"], "--out", str(tmp_path / "turns.json")]) == 0
    turns = json.loads((tmp_path / "turns.json").read_text())
    assert turns["pass_at_turn"] == collect["outputs"]["pass_at_turn"] and turns["runs"] == 2
