"""The cuda_agent agent loop in-process: its reward, its parsing of the policy's tokens, its token
budget, its append-only history, and its choice of harness. The whole loop inside verl's Ray worker
with the real harness is in test_agent_loop_worker.py."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path

import pytest

pytest.importorskip("verl", reason="verl is not installed: the rl tests need `pip install -e '.[rl]'` (verl 0.9.1)")

import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402
from verl.experimental.agent_loop.agent_loop import DictConfigWrap  # noqa: E402
from verl.utils.dataset.rl_dataset import RLHFDataset  # noqa: E402

from cuda_agent.agent.config import load_config  # noqa: E402
from cuda_agent.agent.trajectory import read_messages  # noqa: E402
from cuda_agent.harness import EvalResult, TimingPlan  # noqa: E402
from cuda_agent.harness.reward import milestone  # noqa: E402
from cuda_agent.rl.rollout import agent_loop as al  # noqa: E402
from cuda_agent.agent.evaluator import WorkspaceEvaluator  # noqa: E402
from cuda_agent.rl.rollout.evaluation import close_shared_services, make_evaluator_factory, shared_service  # noqa: E402
from cuda_agent.rl.rollout.token_model import parse_reply  # noqa: E402
from cuda_agent.rl.rollout.token_trajectory import HistoryRewritten, TokenTrajectory  # noqa: E402
from cuda_agent.service import PRIORITY_REWARD, ServiceError, ServiceSettings  # noqa: E402
from cuda_agent.tasks import EXAMPLES_DIR  # noqa: E402
from scripted_server import LOG_PROB, ScriptedServer, template_reply  # noqa: E402

TASK_FILE = EXAMPLES_DIR / "scale_bias_relu.py"
RECORDED = [m for m in read_messages(EXAMPLES_DIR / "trajectories" / "scale_bias_relu.cpu.jsonl")
            if m["role"] == "assistant"]


@pytest.fixture(scope="module")
def tok(tiny_model):
    return AutoTokenizer.from_pretrained(tiny_model)


@pytest.fixture(scope="module", autouse=True)
def _services_closed_after_the_module():
    """The live loops start this process's evaluation service (and a local Ray): closed at the end,
    so the next module can start a Ray of its own."""
    yield
    close_shared_services()


def make_loop(cls, tok, server, *, prompt_length=4096, response_length=8192, max_turns=None, **options):
    """A loop as verl's worker builds one (call it inside the event loop that will run it)."""
    cfg = OmegaConf.create({"actor_rollout_ref": {"rollout": {
        "prompt_length": prompt_length, "response_length": response_length,
        "multi_turn": {"max_assistant_turns": max_turns}}}, "data": {"apply_chat_template_kwargs": {}}})
    return cls(trainer_config=DictConfigWrap(cfg), server_manager=server, tokenizer=tok, processor=None,
               dataset_cls=RLHFDataset, data_config=DictConfigWrap(cfg.data), hf_model_type="qwen2", **options)


def run_live(tok, server, tmp_path, agent_toml, sampling=None, **limits):
    async def go():
        loop = make_loop(al.CudaAgentLoop, tok, server, device="cpu", agent_config=str(agent_toml),
                         runs_dir=str(tmp_path / "runs"), **limits)
        return await loop.run(sampling or {"temperature": 1.0, "logprobs": True}, raw_prompt=[],
                              extra_info={"task_path": str(TASK_FILE), "index": 0})
    return asyncio.run(go())


def result(correct: bool, eager: float | None = None, compile: float | None = None, **extra) -> dict:
    m = milestone(correct, eager, compile)
    return EvalResult(task="t", reward=m.reward, correct=correct, stage="done" if correct else "correctness",
                      reason=m.detail, milestone=m.name, speedup_vs_eager=eager, speedup_vs_compile=compile,
                      **extra).to_dict()


# --- the reward -----------------------------------------------------------------------------------


def test_the_reward_is_the_best_verified_milestone():
    assert al.best_verdict([]) == al.Verdict(-1.0, "failed", False)
    assert al.best_verdict([result(False)]).reward == -1
    assert al.best_verdict([result(False), result(True)]) == al.Verdict(1.0, "correct", True)
    assert al.best_verdict([result(True, 1.2, 0.9)]) == al.Verdict(2.0, "faster_than_eager", True)
    assert al.best_verdict([result(True, 1.2, 1.1), result(True, 1.2, 0.9)]) == \
        al.Verdict(3.0, "faster_than_compile", True)


def test_a_harness_error_or_a_timeout_is_never_a_positive_reward():
    harness_error = result(True, 3.0, 3.0, fault="harness")  # even one that claims success
    timeout = EvalResult(task="t", reward=-1.0, correct=False, stage="run",
                         reason="timed out after 60s (infinite loop or far too slow?)").to_dict()
    assert al.best_verdict([harness_error, timeout]) == al.Verdict(-1.0, "failed", False)
    assert al.best_verdict([harness_error, result(True)]).reward == 1


def test_the_replay_reward_counts_the_final_profile_only_when_the_live_loop_would():
    records = [{"type": "message", "harness": {"action": "verify", "result": result(True)}},
               {"type": "message", "harness": {"action": "compile", "build": {}}},
               {"type": "final_evaluation", "harness": {"action": "profile", "result": result(True, 2.0, 2.0)}}]
    assert al.best_verdict(al.recorded_results(records, final_profile=False)).reward == 1
    assert al.best_verdict(al.recorded_results(records, final_profile=True)).reward == 3


# --- the policy's tokens --------------------------------------------------------------------------


def test_a_reply_is_read_from_its_own_tokens(tok):
    text = 'Building.\n<tool_call>\n{"name": "compile", "arguments": {}}\n</tool_call><|im_end|>'
    content, calls = parse_reply(tok, tok.encode(text, add_special_tokens=False))
    assert content == "Building." and [(c.name, c.arguments) for c in calls] == [("compile", "{}")]
    content, calls = parse_reply(tok, tok.encode('<tool_call>\n{"name": "bash", "argu', add_special_tokens=False))
    assert content == "" and calls[0].name == "" and calls[0].arguments.startswith('{"name": "bash"')  # cut off


def test_tool_results_that_would_overflow_the_budget_end_the_trajectory(tiny_model, tok, tmp_path, agent_toml,
                                                                      loop_service):
    first = template_reply(tok, RECORDED[0], al.TOOL_SCHEMAS)   # ls -R and read model.py: long results
    out = run_live(tok, ScriptedServer(str(tiny_model), {"scale_bias_relu": [first]}), tmp_path, agent_toml,
                   response_length=200)
    assert out.extra_fields["status"] == "max_context" and out.reward_score == -1
    assert out.response_ids == tok.encode(first, add_special_tokens=False)  # the reply, not the results
    assert out.response_mask == [1] * len(out.response_ids) and set(out.response_logprobs) == {LOG_PROB}
    assert out.extra_fields["min_global_steps"] == out.extra_fields["max_global_steps"] == 7


def test_a_reply_longer_than_the_room_left_is_cut_at_the_response_length(tiny_model, tok, tmp_path, agent_toml,
                                                                         loop_service):
    long = template_reply(tok, RECORDED[2], al.TOOL_SCHEMAS)   # writes a kernel: about 900 tokens
    out = run_live(tok, ScriptedServer(str(tiny_model), {"scale_bias_relu": [long]}), tmp_path, agent_toml,
                   response_length=120)
    assert len(out.response_ids) == 120 and out.response_mask == [1] * 120
    assert out.extra_fields["status"] == "max_context"
    messages = read_messages(Path(out.extra_fields["run_dir"]) / "trajectory.jsonl")
    assert messages[-1]["role"] == "tool" and messages[-1]["content"].startswith("Error:")  # the cut call, answered


def test_the_hf_servers_tokens_and_log_probs_reach_the_trainer_as_sampled(tiny_model, tok, tmp_path, agent_toml,
                                                                          loop_service):
    from verl.workers.config import HFModelConfig, RolloutConfig

    from cuda_agent.rl.rollout.hf_server import HFTokenServer

    config = RolloutConfig(name="hf", prompt_length=4096, response_length=48, dtype="float32",
                           tensor_model_parallel_size=1)
    server = HFTokenServer(config, HFModelConfig(path=str(tiny_model)), device="cpu")
    asyncio.run(server.launch_server())

    class Client:  # LLMServerClient's signature over the plain server
        async def generate(self, request_id, *, prompt_ids, sampling_params, **kw):
            return await server.generate(prompt_ids, sampling_params, request_id)

    out = run_live(tok, Client(), tmp_path, agent_toml, response_length=48,
                   sampling={"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True, "ignore_eos": True,
                             "seed": 0})
    # noise (a call in it could only fail): one reply, cut at the budget, ends the session
    assert out.extra_fields["status"] in ("done", "max_context") and out.reward_score == -1
    assert len(out.response_ids) == 48 and out.response_mask == [1] * 48
    with torch.no_grad():
        logits = server.model(torch.tensor([out.prompt_ids + out.response_ids])).logits[0, len(out.prompt_ids) - 1:-1]
    expected = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(out.response_ids)[:, None]).squeeze(-1)
    assert torch.allclose(torch.tensor(out.response_logprobs), expected, atol=1e-3)


def test_a_rewritten_history_is_refused(tok):
    messages = [{"role": "system", "content": "You write kernels."}, {"role": "user", "content": "Make it fast."}]
    reply = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]}

    async def go():
        t = TokenTrajectory(make_loop(al.ReplayAgentLoop, tok, None), al.TOOL_SCHEMAS, 8192, log_probs=False)
        await t.start(messages)
        await t.add_reply(t.reply_tokens(reply), None, reply)
        grown = messages + [reply, {"role": "tool", "tool_call_id": "c1", "content": "x" * 400}]
        assert await t.add_context(grown)
        shortened = copy.deepcopy(grown) + [reply]
        shortened[3]["content"] = "x[... removed ...]x"   # what the agent's compaction does to old outputs
        with pytest.raises(HistoryRewritten, match="message 3 changed"):
            await t.add_context(shortened)

    asyncio.run(go())


def test_rl_limits_never_compact_and_use_verls_token_budget():
    rollout = OmegaConf.create({"prompt_length": 1000, "response_length": 3000,
                                "multi_turn": {"max_assistant_turns": 8}})
    config = al.rl_config(load_config(), rollout, final_profile=False)
    assert config.limits.max_context_tokens == 4000 and config.limits.max_turns == 8
    assert config.limits.compact_at > 1 and config.run.final_profile is False
    assert config.model.format_reminders == 0, "a reply without a tool call ends a trajectory: the policy's choice"
    rollout.multi_turn.max_assistant_turns = None
    assert al.rl_config(load_config(), rollout, True).limits.max_turns == load_config().limits.max_turns


# --- the row, the options, the harness ------------------------------------------------------------


def test_the_loops_are_registered_by_name_and_in_the_shipped_yaml():
    from importlib.resources import files

    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    assert _agent_loop_registry["cuda_agent"]["_target_"] == "cuda_agent.rl.rollout.agent_loop.CudaAgentLoop"
    assert _agent_loop_registry["cuda_agent_replay"]["_target_"] == "cuda_agent.rl.rollout.agent_loop.ReplayAgentLoop"
    shipped = OmegaConf.load(files("cuda_agent.rl.rollout") / "agent_loops.yaml")
    assert {e.name: e._target_ for e in shipped} == {k: _agent_loop_registry[k]["_target_"]
                                                     for k in ("cuda_agent", "cuda_agent_replay")}
    for entry in shipped:  # every option the shipped file sets is one the loops know
        al.LoopSettings.from_options({k: v for k, v in entry.items() if k not in ("name", "_target_")})


def test_importing_the_loops_keeps_the_options_a_yaml_registered(monkeypatch):
    # verl's worker registers the YAML's entries first; hydra imports our module while building the
    # first loop. A re-registration there must not drop the YAML's options for the next trajectories.
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    yaml_entry = OmegaConf.create({"name": "cuda_agent", "_target_": "cuda_agent.rl.rollout.agent_loop.CudaAgentLoop",
                                   "runs_dir": "/somewhere"})
    monkeypatch.setitem(_agent_loop_registry, "cuda_agent", yaml_entry)
    al.register_default("cuda_agent", al.CudaAgentLoop)
    assert _agent_loop_registry["cuda_agent"] is yaml_entry


def test_a_row_names_its_task_by_code_or_by_path():
    code = TASK_FILE.read_text()
    assert al.task_from_row({"task": {"name": "sbr", "code": code, "level": 1}}).level == 1
    assert al.task_from_row({"task_path": str(TASK_FILE)}).code == code
    assert al.task_from_row({"task_path": "examples", "task_name": "scale_bias_relu"}).code == code
    with pytest.raises(ValueError, match="extra_info.task = "):
        al.task_from_row({"index": 3})
    with pytest.raises(ValueError, match="missing class Model"):
        al.task_from_row({"task": {"name": "broken", "code": "x = 1\n"}})


def test_unknown_loop_options_are_refused():
    with pytest.raises(ValueError, match="unknown option.*evaluater"):
        al.LoopSettings.from_options({"evaluater": "local"})
    with pytest.raises(ValueError, match="use one of service"):
        al.LoopSettings.from_options({"evaluator": "remote"})


def test_the_service_evaluator_asks_at_reward_priority(tmp_path):
    class Service:
        def evaluate_workspace(self, workspace, config, *, priority, keep):
            self.asked = (workspace, config.profile, priority, keep)
            return "verdict"

    svc = Service()
    ev = WorkspaceEvaluator(tmp_path, "cpu", TimingPlan(), svc, PRIORITY_REWARD)
    assert ev.evaluate(profile=True, keep=tmp_path / "keep") == "verdict"
    assert svc.asked == (tmp_path, True, PRIORITY_REWARD, tmp_path / "keep")
    with pytest.raises(ValueError, match="through the evaluation service"):
        make_evaluator_factory("local", "cpu")


def test_both_reward_routes_time_by_one_plan(tok, monkeypatch, tmp_path):
    """The agent loop's verify and profile time by the plan the single-turn reward times by (they
    once timed by TimingPlan()'s 2 s against the reward's 0.5 s, and cached their baselines apart)."""
    from contextlib import contextmanager

    from cuda_agent.rl.rollout.evaluation import RL_TIMING
    from cuda_agent.rl.workers import reward

    class Opened(Exception):
        pass

    seen = {}

    @contextmanager
    def open_run(task, out, device, config, evaluator, timing=None):
        seen["timing"] = timing
        raise Opened
        yield

    monkeypatch.setattr(al, "open_run", open_run)
    monkeypatch.setattr(al, "make_evaluator_factory", lambda *args: None)

    async def go():
        loop = make_loop(al.CudaAgentLoop, tok, None, device="cpu")
        with pytest.raises(Opened):
            loop._work(al.task_from_row({"task_path": str(TASK_FILE)}), tmp_path / "run", None)

    asyncio.run(go())
    single_turn = reward.RewardSettings.from_kwargs({"device": "cpu"}).eval_config("cpu")
    assert seen["timing"] == single_turn.timing == RL_TIMING
    assert al.LoopSettings.from_options({"timing": {"budget_s": 0.25}}).timing == TimingPlan(
        **{**RL_TIMING.to_dict(), "budget_s": 0.25})


def test_the_service_refuses_to_wait_for_a_gpu_the_trainer_holds(monkeypatch):
    import ray

    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "available_resources", lambda: {"GPU": 0.0, "CPU": 4.0})
    with pytest.raises(ServiceError, match="trainer.n_gpus_per_node"):
        shared_service(ServiceSettings(device="cuda"))


def test_the_replay_needs_a_trajectory(tok):
    async def go():
        return await make_loop(al.ReplayAgentLoop, tok, None).run({}, raw_prompt=[], extra_info={"index": 5})

    with pytest.raises(ValueError, match="extra_info.trajectory"):
        asyncio.run(go())
