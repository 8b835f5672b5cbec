"""The CPU-CI proof of the cuda_agent agent loop: verl's own `AgentLoopWorker`, as a Ray actor, runs
our loop (loaded from an agent_loops YAML, as a trainer loads it) on a batch of two rows, with the
tiny model's tokenizer, a scripted policy server (the edge: it stands in for the GPU server) and the
REAL harness on the CPU backend.

Row 0 replays the assistant side of the bundled CPU run of scale_bias_relu (look around, write a
fused kernel, compile, write ModelNew, verify, finish), each reply as the tokens a model following
the chat template would emit; the harness really builds and verifies it (through the evaluation
service, as in production), so the reward is a real 1.
Row 1 gives up at once: -1. One rollout (about a minute, most of it the harness's build and verify)
serves every test here."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl", reason="verl is not installed: the rl tests need `pip install -e '.[rl]'` (verl 0.9.1)")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from cuda_agent.agent.trajectory import read_messages  # noqa: E402
from cuda_agent.home import private_ray_tmp  # noqa: E402
from cuda_agent.rl.rollout import agent_loop as al  # noqa: E402
from cuda_agent.rl.rollout.token_trajectory import for_template  # noqa: E402
from cuda_agent.tasks import EXAMPLES_DIR  # noqa: E402
from scripted_server import GLOBAL_STEPS, LOG_PROB, ScriptedServer, template_reply  # noqa: E402
from test_agent_loop import make_loop  # noqa: E402

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
TASK_FILE = EXAMPLES_DIR / "scale_bias_relu.py"
GIVE_UP = "I cannot make this faster.<|im_end|>"


def recorded_turns() -> list[dict]:
    """The bundled CPU run's assistant turns, without its profile (verify gives the reward; profiling on
    a busy CPU would only add a minute)."""
    turns = [m for m in read_messages(EXAMPLES_DIR / "trajectories" / "scale_bias_relu.cpu.jsonl")
             if m["role"] == "assistant"]
    assert [c["function"]["name"] for c in turns[5]["tool_calls"]] == ["profile"]
    return turns[:5] + turns[6:]


TURNS = recorded_turns()
CALLS = sum(len(m.get("tool_calls") or []) for m in TURNS)


def trainer_config(model: Path, loops_yaml: Path):
    import verl
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None):
        return compose(config_name="ppo_trainer", overrides=[
            f"actor_rollout_ref.model.path={model}", "actor_rollout_ref.rollout.name=hf",
            "data.max_prompt_length=4096", "data.max_response_length=8192",
            "actor_rollout_ref.rollout.calculate_log_probs=True", "actor_rollout_ref.rollout.agent.num_workers=1",
            f"actor_rollout_ref.rollout.agent.agent_loop_config_path={loops_yaml}",
            "actor_rollout_ref.rollout.agent.default_agent_loop=cuda_agent",
            "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=10"])


@dataclass
class Rollout:
    tok: Any
    scripts: dict[str, list[str]]
    out: Any        # the DataProto verl's worker returned
    runs: Path      # the runs_dir the YAML set
    journal: Path   # the evaluation service's journal


@pytest.fixture(scope="module")
def rollout(tiny_model, agent_toml, tmp_path_factory):
    import ray
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.protocol import DataProto

    tok = AutoTokenizer.from_pretrained(tiny_model)
    scripts = {"scale_bias_relu": [template_reply(tok, m, al.TOOL_SCHEMAS) for m in TURNS], "give_up": [GIVE_UP]}
    tmp = tmp_path_factory.mktemp("worker")
    loops_yaml = tmp / "agent_loops.yaml"
    loops_yaml.write_text(f"""- name: cuda_agent
  _target_: cuda_agent.rl.rollout.agent_loop.CudaAgentLoop
  evaluator: service
  service: {{journal: {tmp / 'service.jsonl'}}}
  device: cpu
  agent_config: {agent_toml}
  runs_dir: {tmp / 'runs'}
""")
    rows = [{"task_path": str(TASK_FILE), "index": 0},
            {"task": {"name": "give_up", "code": TASK_FILE.read_text()}, "index": 1}]
    batch = DataProto.from_dict(tensors={"dummy": torch.zeros(2, 1)}, non_tensors={
        "raw_prompt": np.array([[{"role": "user", "content": "(the loop builds its own)"}]] * 2, dtype=object),
        "extra_info": np.array(rows, dtype=object), "index": np.arange(2),
        "data_source": np.array(["cuda_agent"] * 2, dtype=object)})
    assert not ray.is_initialized(), "an earlier test left a Ray runtime up: this test needs its own (runtime_env)"
    private = private_ray_tmp()   # its sessions out of the sandbox users' reach, as every Ray of ours
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, _temp_dir=str(private / "ray"),
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}})
    try:
        start = time.perf_counter()
        worker = ray.remote(AgentLoopWorker).remote(trainer_config(tiny_model, loops_yaml),
                                                    ScriptedServer(str(tiny_model), scripts))
        out = ray.get(worker.generate_sequences.remote(batch), timeout=900)
        print(f"rollout of 2 rows in verl's AgentLoopWorker: {time.perf_counter() - start:.0f} s")
    finally:
        ray.shutdown()
        shutil.rmtree(private, ignore_errors=True)
    return Rollout(tok, scripts, out, tmp / "runs", tmp / "service.jsonl")


def unpadded(out, row: int) -> dict[str, list]:
    """Row `row` of the batch without verl's padding (prompt left-padded, response right-padded)."""
    p = out.batch["prompts"].shape[1]
    attention = out.batch["attention_mask"][row].bool()
    keep = attention[p:]
    return {"prompt_ids": out.batch["prompts"][row][attention[:p]].tolist(),
            "response_ids": out.batch["responses"][row][keep].tolist(),
            "response_mask": out.batch["response_mask"][row][keep].tolist(),
            "response_logprobs": out.batch["rollout_log_probs"][row][keep].tolist()}


def spans(ids: list[int], mask: list[int]) -> list[tuple[int, list[int]]]:
    """Runs of equal mask: (mask, ids)."""
    runs: list[tuple[int, list[int]]] = []
    for t, m in zip(ids, mask):
        if runs and runs[-1][0] == m:
            runs[-1][1].append(t)
        else:
            runs.append((m, [t]))
    return runs


def test_each_trajectory_carries_the_reward_its_harness_verdicts_earned(rollout):
    out = rollout.out
    scores = out.batch["rm_scores"]
    assert scores.sum(1).tolist() == [1.0, -1.0]
    last = out.batch["attention_mask"][:, out.batch["prompts"].shape[1]:].sum(1) - 1
    assert all(scores[i].nonzero().flatten().tolist() == [last[i].item()] for i in range(2))  # on the last token
    nt = out.non_tensor_batch
    assert list(nt["milestone"]) == ["correct", "failed"] and list(nt["status"]) == ["done", "done"]
    assert list(nt["min_global_steps"]) == list(nt["max_global_steps"]) == [GLOBAL_STEPS] * 2
    assert list(nt["__num_turns__"]) == [1 + len(TURNS) + CALLS, 2]   # task, replies, tool results | task, reply
    runs = {Path(d).parent for d in nt["run_dir"]}
    assert runs == {rollout.runs}   # every trajectory got the YAML's options, not only the first
    solution = Path(nt["run_dir"][0]) / "solution" / "kernels"
    assert sorted(p.name for p in solution.iterdir()) == ["scale_bias_relu.cpp", "scale_bias_relu_binding.cpp"]


def test_the_harness_ran_through_the_evaluation_service_at_reward_priority(rollout):
    from cuda_agent.service import PRIORITY_REWARD

    rows = [json.loads(line) for line in rollout.journal.read_text().splitlines()]
    requests = [r for r in rows if r["event"] == "request"]
    verdicts = [r for r in rows if r["event"] == "verdict"]
    assert [(r["task"], r["priority"]) for r in requests] == [("scale_bias_relu", PRIORITY_REWARD)]  # the verify
    assert [v["result"]["milestone"] for v in verdicts] == ["correct"]


def test_the_tokens_decode_to_the_chat_template_rendering_of_the_recorded_messages(rollout):
    tok, out = rollout.tok, rollout.out
    row = unpadded(out, 0)
    messages = read_messages(Path(out.non_tensor_batch["run_dir"][0]) / "trajectory.jsonl")
    assert [m["role"] for m in messages][:3] == ["system", "user", "assistant"]
    assert len(messages) == 2 + len(TURNS) + CALLS
    rendering = tok.apply_chat_template([for_template(m) for m in messages], tools=al.TOOL_SCHEMAS, tokenize=False)
    # the template closes the last turn with "<|im_end|>\n"; the policy's last token is that <|im_end|>
    assert tok.decode(row["prompt_ids"] + row["response_ids"]) + "\n" == rendering


def test_exactly_the_tool_observations_are_masked_out(rollout):
    tok, scripts, out = rollout.tok, rollout.scripts, rollout.out
    row = unpadded(out, 0)
    messages = read_messages(Path(out.non_tensor_batch["run_dir"][0]) / "trajectory.jsonl")
    groups, current = [], []
    for m in messages[3:]:
        if m["role"] == "tool":
            current.append(m["content"])
        elif current:
            groups.append(current)
            current = []
    runs = spans(row["response_ids"], row["response_mask"])
    policy = [tok.decode(ids) for m, ids in runs if m == 1]
    observed = [tok.decode(ids) for m, ids in runs if m == 0]
    assert policy == scripts["scale_bias_relu"]   # every reply as sampled, nothing else
    assert observed == ["\n<|im_start|>user\n" + "\n".join(f"<tool_response>\n{c}\n</tool_response>" for c in g)
                        + "<|im_end|>\n<|im_start|>assistant\n" for g in groups]
    assert len(groups) == len(TURNS) - 1


def test_rollout_log_probs_are_the_servers_on_the_policys_tokens_only(rollout):
    out = rollout.out
    row = unpadded(out, 0)
    assert {lp for lp, m in zip(row["response_logprobs"], row["response_mask"]) if m} == {LOG_PROB}
    assert {lp for lp, m in zip(row["response_logprobs"], row["response_mask"]) if not m} == {0.0}


def test_the_replay_gives_the_live_tokens_masks_and_reward(rollout):
    tok, out = rollout.tok, rollout.out

    async def replay(row: int):
        loop = make_loop(al.ReplayAgentLoop, tok, None)
        trajectory = Path(out.non_tensor_batch["run_dir"][row]) / "trajectory.jsonl"
        return await loop.run({}, raw_prompt=[], extra_info={"trajectory": str(trajectory), "index": row})

    for row in (0, 1):
        live, replayed = unpadded(out, row), asyncio.run(replay(row))
        assert replayed.prompt_ids == live["prompt_ids"]
        assert replayed.response_ids == live["response_ids"]
        assert replayed.response_mask == live["response_mask"]
        assert replayed.reward_score == out.batch["rm_scores"][row].sum().item()
        assert replayed.num_turns == out.non_tensor_batch["__num_turns__"][row]


def test_gae_on_the_live_batch_never_reads_the_critics_values_on_observations(rollout):
    from verl.trainer.ppo.core_algos import compute_gae_advantage_return

    out = rollout.out
    mask = out.batch["response_mask"].float()
    values = torch.rand(mask.shape, generator=torch.Generator().manual_seed(0))
    other = torch.where(mask.bool(), values, torch.full_like(values, 50.0))
    a, _ = compute_gae_advantage_return(out.batch["rm_scores"], values, mask, 1.0, 0.95)
    b, _ = compute_gae_advantage_return(out.batch["rm_scores"], other, mask, 1.0, 0.95)
    assert torch.allclose(a[mask.bool()], b[mask.bool()])
