"""rl.data.fill_agent: the fill family in cuda-agent's agent loop. Its rows start the workspace at the
family's kernel with `???` for the expression and tell the policy so; a run records when it first
passed. The live test runs verl's agent loop in-process with a scripted policy (the edge: it stands
in for the GPU server) and the REAL harness on the CPU backend: wrong on turn 1, right on turn 2
after reading the verdict."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("verl", reason="verl is not installed: the rl tests need `pip install -e '.[rl]'` (verl 0.9.1)")

from transformers import AutoTokenizer  # noqa: E402

from cuda_agent.agent.trajectory import read_records  # noqa: E402
from cuda_agent.rl.data import fill, fill_agent  # noqa: E402
from cuda_agent.rl.data.rft import first_pass, pass_at_turns  # noqa: E402
from cuda_agent.rl.data.rows import AGENTIC, FILL, read_parquet  # noqa: E402
from cuda_agent.rl.rollout import agent_loop as al  # noqa: E402
from cuda_agent.rl.rollout.evaluation import close_shared_services  # noqa: E402
from scripted_server import ScriptedServer, template_reply  # noqa: E402
from test_agent_loop import make_loop  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def _services_closed_after_the_module():
    yield
    close_shared_services()


def verdict(turn: int, correct: bool, action: str = "verify", harness_error: bool = False) -> dict:
    result = {"correct": correct, "reward": 1.0 if correct else -1.0, "fault": "harness" if harness_error else None}
    return {"type": "message", "turn": turn, "message": {"role": "tool", "content": "..."},
            "harness": {"action": action, "result": result}}


def test_a_run_records_the_turn_and_the_try_it_first_passed():
    compile_only = {"type": "message", "turn": 1, "message": {"role": "tool"}, "harness": {"action": "compile",
                                                                                          "build": {"ok": True}}}
    runs = [[verdict(1, True)],                                              # turn 1, first try
            [compile_only, verdict(1, False), verdict(2, False), verdict(2, True)],   # turn 2, third try
            [verdict(1, True, harness_error=True), verdict(3, True)],        # a harness error never counts
            [verdict(1, False)], []]
    assert [first_pass(r) for r in runs] == [(1, 1), (2, 3), (3, 2), None, None]
    summary = pass_at_turns(runs)
    assert summary["runs"] == 5 and summary["pass"] == 0.6
    assert summary["pass_at_turn"] == {"1": 0.2, "2": 0.4, "3": 0.6}
    assert summary["pass_at_attempt"] == {"1": 0.2, "2": 0.4, "3": 0.6}
    assert pass_at_turns([]) == {"runs": 0, "pass": 0.0, "pass_at_turn": {"1": 0.0}, "pass_at_attempt": {"1": 0.0}}


@pytest.mark.parametrize("tier", [1, 2])
def test_agent_rows_start_at_the_kernel_with_the_hole_and_say_where_it_is(tier):
    item = fill.items("val", "cpu", tier)[0]
    row = fill_agent.agent_row(item, 0, "cpu")
    info = row["extra_info"]
    assert row["agent_name"] == AGENTIC and row["data_source"] == FILL and info["tier"] == tier
    files = json.loads(info["start_files"])
    assert set(files) == {"model_new.py", "kernels/sanity.cpp", "kernels/sanity.h", "kernels/sanity_binding.cpp"}
    assert files["kernels/sanity.cpp"].count("???") == 1 and "@" not in files["kernels/sanity.cpp"]
    task = info["task"]["name"]
    message = info["task_prompt"].format(task_name=task, device="cpu")
    assert row["prompt"][-1]["content"] == message and f"Make `{task}` fast" in message
    assert "kernels/sanity.cpp" in message and "???" in message and "verify" in message
    assert ("EPT" in message) == (tier == 2) and ("EPT = 1;" in files["kernels/sanity.cpp"]) == (tier == 2)
    assert row["prompt"][0]["content"].startswith(f"# Skill: make `{task}` fast")   # the agent's own system prompt


def edit(n: int, old: str, new: str) -> dict:
    return {"id": f"call_{n}", "type": "function",
            "function": {"name": "edit_file", "arguments": json.dumps({"path": "kernels/sanity.cpp", "old_str": old,
                                                                       "new_str": new})}}


def verify(n: int) -> dict:
    return {"id": f"call_{n}", "type": "function", "function": {"name": "verify", "arguments": "{}"}}


@pytest.mark.slow
def test_the_agent_loop_records_a_fail_on_turn_1_and_a_pass_on_turn_2(tiny_model, agent_toml, tmp_path, loop_service):
    """A held-out fill task as an agentic row: the policy fills the hole wrongly (elu's negative branch
    with its sign flipped) and verifies; reads the verdict, fixes the expression and verifies again;
    then stops. The harness fails turn 1 and passes turn 2; the loop's reward is 1, and its record
    says the first pass came on turn 2, at the second verification."""
    item = next(it for it in fill.items("val", "cpu") if it.op.name == "elu")
    row = fill_agent.agent_row(item, 0, "cpu", agent_toml)
    task = row["extra_info"]["task"]["name"]
    wrong = item.answer.replace("(expf(v) - 1.f)", "(1.f - expf(v))")
    tok = AutoTokenizer.from_pretrained(tiny_model)
    turns = [{"role": "assistant", "content": "Filling the expression.", "tool_calls": [edit(1, "???", wrong), verify(2)]},
             {"role": "assistant", "content": "The sign was wrong.", "tool_calls": [edit(3, wrong, item.answer), verify(4)]},
             {"role": "assistant", "content": "Verified."}]
    server = ScriptedServer(str(tiny_model), {task: [template_reply(tok, m, al.TOOL_SCHEMAS) for m in turns]})

    async def go():
        loop = make_loop(al.CudaAgentLoop, tok, server, prompt_length=4096, response_length=4096, device="cpu",
                         agent_config=str(agent_toml), runs_dir=str(tmp_path / "runs"), keep_workspace=True)
        return await loop.run({"temperature": 1.0, "logprobs": True}, raw_prompt=[], extra_info=row["extra_info"])

    out = asyncio.run(go())
    extra = out.extra_fields
    assert out.reward_score == 1.0 and extra["milestone"] in ("correct", "faster_than_eager", "faster_than_compile")
    assert extra["first_pass_turn"] == 2 and extra["evaluations"] == 2, extra
    assert extra["reward_extra_info"]["pass_turn1"] == 0.0 and extra["reward_extra_info"]["correct"] == 1.0
    records = read_records(f"{extra['run_dir']}/trajectory.jsonl")
    results = [(r["turn"], r["harness"]["result"]["correct"]) for r in records if r.get("harness", {}).get("result")]
    assert results == [(1, False), (2, True)]
    assert first_pass(records) == (2, 2)
    user = next(r["message"]["content"] for r in records if r.get("message", {}).get("role") == "user")
    assert "???" in user and "kernels/sanity.cpp" in user               # the row's task message, not the config's
    kernels = sorted(p.name for p in (tmp_path / "runs").glob("*/workspace/kernels/*"))
    assert kernels == ["sanity.cpp", "sanity.h", "sanity_binding.cpp"]   # the example kernel made way for the row's
    summary = fill_agent.runs_summary([tmp_path / "runs"])
    assert summary["pass_at_turn"] == {"1": 0.0, "2": 1.0} and summary["seen_ops"]["runs"] == 1


def synthetic_run(folder, task: str, passes_on: int | None) -> None:
    """A trajectory.jsonl as the agent loop writes one: verify fails until turn `passes_on`."""
    folder.mkdir(parents=True)
    records = [{"type": "run", "task": task, "task_sha256": "0" * 64, "task_origin": "fill:elu"},
               {"type": "message", "turn": 0, "message": {"role": "system", "content": "S"}},
               {"type": "message", "turn": 0, "message": {"role": "user", "content": "U"}}]
    for turn in (1, 2):
        records += [{"type": "message", "turn": turn, "message": {"role": "assistant", "content": "",
                                                                  "tool_calls": [verify(turn)]}},
                    verdict(turn, passes_on == turn)]
    (folder / "trajectory.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.mark.slow
def test_fill_collect_measures_the_held_out_tasks_and_fill_agentic_trains_on_the_training_ones(
        tmp_path, tiny_model, monkeypatch):
    """`cuda-agent train fill_collect`: the named actor, frozen (verl's validation pass alone), on the
    held-out agent rows, with the short conversation's limits; the stage's outputs hold pass after turn
    k. `fill_agentic`: PPO on the training rows from the actor named, validated on the held-out ones.
    (verl itself is not run: its runs folder is written as the agent loop writes one.)"""
    from typer.testing import CliRunner

    from cuda_agent.cli import app
    from cuda_agent.journal import read_rows
    from cuda_agent.rl.driver import launch

    def verl(cmd, env, stage_dir, *args, **kwargs):
        if stage_dir.name == "fill_collect":
            for i, turn in enumerate((1, 2, None)):
                synthetic_run(stage_dir / "runs" / f"r{i}", f"fill_elu_{i}", turn)
        return 0

    monkeypatch.setattr(launch, "run_logged", verl)
    run = tmp_path / "run.yaml"
    run.write_text(f"out: out\nmodel: {tiny_model}\nplatform: cpu\n")
    result = CliRunner().invoke(app, ["train", "fill_collect", "--config", str(run),
                                      f"fill_collect:actor_rollout_ref.model.path={tiny_model}"])
    assert result.exit_code == 0, result.output
    rows = read_rows(tmp_path / "out" / "stages.jsonl")
    started = next(r for r in rows if r["event"] == "started" and r["stage"] == "fill_collect")
    done = next(r for r in rows if r["event"] == "finished" and r["stage"] == "fill_collect")
    assert "trainer.val_only=true" in started["overrides"] and started["inputs"]["actor"] == str(tiny_model)
    assert "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=6" in started["overrides"]
    val = read_parquet(started["inputs"]["tasks"])
    assert len(val) == 73 and {r["extra_info"]["split"] for r in val} == {"val"}
    assert done["outputs"]["pass_at_turn"] == {"1": round(1 / 3, 4), "2": round(2 / 3, 4)}
    from cuda_agent.rl.tools.fill_eval import main

    assert main(["--runs", done["outputs"]["runs"], "--out", str(tmp_path / "turns.json")]) == 0
    turns = json.loads((tmp_path / "turns.json").read_text())
    assert turns["pass_at_turn"] == done["outputs"]["pass_at_turn"] and turns["seen_ops"]["runs"] == 3
    assert turns["unseen_ops"]["runs"] == 0

    CliRunner().invoke(app, ["train", "fill_agentic", "--config", str(run),
                             f"fill_agentic:actor_rollout_ref.model.path={tiny_model}"])
    started = next(r for r in read_rows(tmp_path / "out" / "stages.jsonl")
                   if r["event"] == "started" and r["stage"] == "fill_agentic")
    assert started["inputs"]["actor"] == str(tiny_model) and "trainer.val_only=true" not in started["overrides"]
    assert len(read_parquet(started["inputs"]["tasks"])) == 176
    assert any(o.startswith("data.val_files=") and o.endswith("fill_agent/val.parquet") for o in started["overrides"])
