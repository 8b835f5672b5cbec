"""The replay policy, and the bundled demo trajectories it plays."""

from __future__ import annotations

import json

import pytest

from cuda_agent.agent.replay import END_OF_RECORDING, ReplayModel
from cuda_agent.agent.run import DEMO_TRAJECTORIES, optimize
from cuda_agent.agent.tools import SCHEMAS
from cuda_agent.agent.trajectory import read_messages

from .fakes import FAST_MODEL_NEW, ChatServer, FakeEvaluator, reply


def test_a_replay_reissues_the_recorded_tool_calls_without_a_model(task, tmp_path, fast_config):
    script = [reply("look", ("bash", {"command": "ls"}), ("read_file", {"path": "model.py"})),
              reply("", ("write_file", {"path": "model_new.py", "content": FAST_MODEL_NEW}), ("profile", {})),
              reply("done")]
    with ChatServer(script) as server:
        recorded = optimize(task, model="m", base_url=server.url, device="cpu", out=tmp_path / "a",
                            config=fast_config, evaluator=lambda ws, device, timing: FakeEvaluator(ws))
    evaluator = FakeEvaluator(tmp_path / "b" / "workspace")
    replayed = optimize(task, policy=f"replay:{tmp_path}/a/trajectory.jsonl", device="cpu", out=tmp_path / "b",
                        config=fast_config, evaluator=lambda ws, device, timing: evaluator)
    calls = lambda out: [(c["function"]["name"], c["function"]["arguments"])  # noqa: E731
                         for m in read_messages(out / "trajectory.jsonl") for c in m.get("tool_calls", [])]
    assert calls(tmp_path / "b") == calls(tmp_path / "a")
    assert evaluator.calls == ["profile"]
    assert (replayed.status, replayed.turns, replayed.reward, replayed.tokens) == ("done", 3, recorded.reward, 0)
    assert replayed.model == "replay:trajectory.jsonl"


def test_a_replay_that_runs_out_ends_the_run(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"role": "assistant", "content": "hi",
                                "tool_calls": [{"id": "1", "function": {"name": "bash", "arguments": {"command": "ls"}}}]}) + "\n")
    model = ReplayModel(path)
    first = model.query([], [])
    assert [(c.name, json.loads(c.arguments)) for c in first.tool_calls] == [("bash", {"command": "ls"})]
    assert model.query([{"role": "assistant", "content": "hi"}], []).content == END_OF_RECORDING


def test_a_replay_needs_assistant_messages(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text('{"type": "run"}\n')
    with pytest.raises(ValueError, match="no assistant messages to replay"):
        ReplayModel(path)


@pytest.mark.parametrize("device", ["cpu", "cuda"], ids=["cpu_layout", "gpu_layout"])
def test_the_bundled_demo_trajectories_call_the_tools_correctly(device):
    messages = read_messages(DEMO_TRAJECTORIES / f"scale_bias_relu.{device}.jsonl")
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in SCHEMAS}
    names = []
    for m in messages:
        assert m["role"] == "assistant"
        for call in m.get("tool_calls", []):
            name, args = call["function"]["name"], json.loads(call["function"]["arguments"])
            assert set(schemas[name]["required"]) <= set(args) <= set(schemas[name]["properties"])
            names.append(name)
    assert names[-3:] == ["write_file", "verify", "profile"] and "compile" in names
    assert not messages[-1].get("tool_calls"), "the recording ends with a final message"
    ext = "cu" if device == "cuda" else "cpp"
    written = [json.loads(c["function"]["arguments"])["path"] for m in messages for c in m.get("tool_calls", [])
               if c["function"]["name"] == "write_file"]
    assert written == [f"kernels/scale_bias_relu.{ext}", "kernels/scale_bias_relu_binding.cpp", "model_new.py"]
