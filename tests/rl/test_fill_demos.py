"""rl/driver/fill_demos and the stage fill_agentic_rft: scripted demonstrations of the fill family's multi-turn
form, played through cuda-agent's agent loop and judged by the REAL harness (CPU backend), some wrong
first and fixed after the failing verdict; the ones that pass become SFT rows whose loss covers the
replies only. verl itself is not run here (tests/rl/test_fill_demos_e2e.py runs it, `-m long`): its
command is the edge, standing in for a finished SFT run. The stage here runs one demonstration, wrong
first (two verifications: each costs the harness's process start-ups, seconds on a loaded CPU); the
e2e test runs one of each kind."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("verl", reason="verl is not installed: the rl tests need `pip install -e '.[rl]'` (verl 0.9.1)")

from omegaconf import OmegaConf  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from cuda_agent.agent.trajectory import read_records  # noqa: E402
from cuda_agent.cli import app  # noqa: E402
from cuda_agent.journal import read_rows  # noqa: E402
from cuda_agent.rl.data import fill, fill_agent  # noqa: E402
from cuda_agent.rl.data.rft import first_pass  # noqa: E402
from cuda_agent.rl.driver import launch  # noqa: E402
from cuda_agent.rl.driver.fill_demos import MISTAKES, Demo, Demonstrator, collect, mistakes, plan  # noqa: E402



def test_the_plan_is_seeded_keeps_to_rft_ops_and_writes_a_share_of_mistakes_first():
    demos = plan(60, "cpu", seed=3, wrong_share=0.4)
    assert demos == plan(60, "cpu", seed=3, wrong_share=0.4) and demos != plan(60, "cpu", seed=4, wrong_share=0.4)
    assert 0.2 <= sum(d.mistake is not None for d in demos) / 60 <= 0.6
    assert {d.item.split for d in demos} == {"train"} and len({d.item for d in demos}) == 60
    assert {d.item.op.name for d in plan(20, "cpu", ops=["elu", "clamp"])} == {"elu", "clamp"}
    assert all(d.mistake is None for d in plan(10, "cpu", wrong_share=0.0))
    assert set(MISTAKES) == {op.name for op in fill.OPS if op.seen}


def test_every_mistake_is_a_different_expression_the_format_guard_accepts():
    for item in fill.items("train", "cpu"):
        kinds = [kind for kind, _ in mistakes(item)]
        assert len(kinds) == 3 and "constant" in kinds, item
        for kind, wrong in mistakes(item):
            assert wrong != item.answer and fill.expression(wrong)[0] == wrong, (item, kind, wrong)


def tool(content: str) -> dict:
    return {"role": "tool", "tool_call_id": "x", "content": content}


def test_the_demonstrator_edits_the_line_verifies_and_fixes_after_a_failed_verdict():
    item = next(it for it in fill.items("train", "cpu") if it.op.name == "clamp")
    kind, wrong = mistakes(item)[0]
    files = fill_agent.start_files(item, "cpu")
    policy = Demonstrator(Demo(item, 0, wrong, kind), files)
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    first = policy.query(messages, [])
    assert [c.name for c in first.tool_calls] == ["edit_file", "verify"]
    edit = json.loads(first.tool_calls[0].arguments)
    assert edit == {"path": "kernels/sanity.cpp", "old_str": "yr[c] = ???;", "new_str": f"yr[c] = {wrong};"}
    assert wrong in first.content
    messages += [first.message(), tool("edited"), tool("verify: FAILED at stage 'correctness': wrong output on "
                                                         "input set 1 of 6: output differs\nreward: -1 (failed)")]
    fix = policy.query(messages, [])
    assert json.loads(fix.tool_calls[0].arguments)["old_str"] == f"yr[c] = {wrong};"
    assert json.loads(fix.tool_calls[0].arguments)["new_str"] == f"yr[c] = {item.answer};"
    assert "verify FAILED at stage 'correctness': wrong output on input set 1 of 6." in fix.content
    messages += [fix.message(), tool("edited"), tool("verify: PASSED (correct)\nreward: 1 (correct)")]
    last = policy.query(messages, [])
    assert not last.tool_calls and "passed" in last.content
    right = Demonstrator(Demo(item, 1), files).query(messages[:2], [])
    assert json.loads(right.tool_calls[0].arguments)["new_str"] == f"yr[c] = {item.answer};"


@pytest.mark.parametrize("cpu", [False, True], ids=["one-gpu", "cpu-platform"])
def test_the_stage_is_verls_sft_trainer_on_our_parquet_with_its_hugging_face_export(cpu):
    cfg = launch.compose("fill_agentic_rft", (["+cpu=sft"] if cpu else []) + ["model.path=/m", "data.train_files=/d"])
    assert cfg.data.custom_cls.name == "ToolSchemaSFTDataset" and cfg.data.tools_key == "tools"
    assert "hf_model" in cfg.checkpoint.save_contents and cfg.data.truncation == "error"
    assert cfg.data.max_length >= 4096   # a demonstration is about 3,300 tokens with SmolLM2's tokenizer


def test_the_stage_refuses_an_actor_that_could_never_call_a_tool(plain_model, tmp_path):
    """Before any demonstration runs: SmolLM2 as converted without --tool-template."""
    run = tmp_path / "run.yaml"
    run.write_text(f"out: out\nmodel: {plain_model}\nplatform: cpu\ndevice: cpu\n")
    result = CliRunner().invoke(app, ["train", "fill_agentic_rft", "--config", str(run), "--quiet"])
    assert result.exit_code == 2 and "does not show tool calls" in result.output, result.output
    assert not (tmp_path / "out" / "fill_agentic_rft" / "demos").exists()


# --- the stage, its demonstrations judged by the harness -----------------------------------------


@pytest.fixture(scope="module")
def stage(tmp_path_factory, tool_model, agent_toml):
    """`cuda-agent train fill_agentic_rft` (one demonstration of an elu task, wrong first), then
    `fill_collect` from the journal; verl's command writes what a finished run leaves (the SFT's
    Hugging Face export: the tool model; fill_collect's runs folder: the demonstration's run)."""
    tmp = tmp_path_factory.mktemp("arft")
    run = tmp / "run.yaml"
    run.write_text(f"out: out\nmodel: {tool_model}\nplatform: cpu\ndevice: cpu\nagent_config: {agent_toml}\n"
                   "harness: {cpu_evaluators: 1, build_workers: 0}\nfill: {demos: 1, wrong_share: 1.0, rft_ops: [elu]}\n")

    def verl(cmd, env, stage_dir, *args, **kwargs):
        if stage_dir.name == "fill_agentic_rft":
            shutil.copytree(tool_model, stage_dir / "checkpoints" / "global_step_1" / "huggingface")
            (stage_dir / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("1")
        if stage_dir.name == "fill_collect":
            (stage_dir / "runs").mkdir(parents=True)
            shutil.copytree(next((tmp / "out" / "fill_agentic_rft" / "demos").iterdir()), stage_dir / "runs" / "r0")
        return 0

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(launch, "run_logged", verl)
        for stage in ("fill_agentic_rft", "fill_collect"):
            result = CliRunner().invoke(app, ["train", stage, "--config", str(run), "--quiet"])
            assert result.exit_code == 0, result.output
    rows = read_rows(tmp / "out" / "stages.jsonl")
    return tmp / "out", {(r["stage"], r["event"]): r for r in rows}


def verifications(trajectory: Path) -> list[tuple[int, bool, str]]:
    return [(r["turn"], r["harness"]["result"]["correct"], r["harness"]["result"]["stage"])
            for r in read_records(trajectory) if (r.get("harness") or {}).get("result")]


@pytest.mark.slow
def test_a_wrong_first_demonstration_fails_its_first_verification_and_passes_its_second(stage):
    out, journal = stage
    (folder,) = (out / "fill_agentic_rft" / "demos").iterdir()
    assert folder.name.startswith("000-elu-") and not folder.name.endswith("-right")
    wrong = folder / "trajectory.jsonl"
    assert verifications(wrong) == [(1, False, "correctness"), (2, True, "done")]
    assert first_pass(read_records(wrong)) == (2, 2)
    header = next(r for r in read_records(wrong) if r["type"] == "run")
    assert header["model"] == "fill-demonstrator" and header["task_origin"] == "fill:elu"
    assert not (folder / "workspace").exists()
    inputs = journal[("fill_agentic_rft", "finished")]["inputs"]
    assert inputs["demonstrations"] == 1 and inputs["wrong_first"] == 1 and inputs["kept"] == 1
    assert inputs["pass_at_turn"] == {"1": 0.0, "2": 1.0} and inputs["rft_ops"] == ["elu"]


@pytest.mark.slow
def test_a_finished_demonstration_is_not_run_again(stage, agent_toml):
    out, _ = stage
    demos = out / "fill_agentic_rft" / "demos"
    before = {p: p.stat().st_mtime_ns for p in demos.glob("*/trajectory.jsonl")}
    paths = collect(plan(1, "cpu", 0, 1, ["elu"], 1.0), demos, "cpu", agent_toml)   # no service is started
    assert {p: p.stat().st_mtime_ns for p in paths} == before


@pytest.mark.slow
def test_the_sft_rows_show_the_tool_calls_and_train_on_the_replies_only(stage, tool_model):
    """The stage's rows as verl's SFT dataset reads them, with the actor's template (cuda-agent's,
    as SmolLM2 gets it): the tool calls are in the text, the turn-by-turn rendering equals the whole
    (verl's check on), and the loss mask covers the assistant's turns and nothing else; the
    deliberate mistake (the first reply) is in the text, out of the loss: the fix is what is learned."""
    from cuda_agent.rl.workers.sft_dataset import ToolSchemaSFTDataset

    out, journal = stage
    data = journal[("fill_agentic_rft", "finished")]["inputs"]["data"]
    tok = AutoTokenizer.from_pretrained(tool_model)
    config = OmegaConf.create({"max_length": 4096, "truncation": "error", "ignore_input_ids_mismatch": False,
                               "messages_key": "messages", "tools_key": "tools"})
    dataset = ToolSchemaSFTDataset(data, tok, config)
    assert len(dataset) == 1
    for i in range(1):
        row = dataset[i]
        ids, mask = row["input_ids"][row["attention_mask"].bool()], row["loss_mask"][row["attention_mask"].bool()]
        messages = dataset.messages[i]
        assert tok.decode(ids.tolist()) == tok.apply_chat_template(messages, tools=dataset.tools[i], tokenize=False)
        trained = tok.decode(ids[mask.bool()].tolist())
        mistake, *learned = [m for m in messages if m["role"] == "assistant"]
        assert mistake["train"] is False and mistake["content"] in tok.decode(ids.tolist())
        assert mistake["content"] not in trained and all(m["content"] in trained for m in learned)
        calls = [c for m in learned for c in m.get("tool_calls") or []]
        assert trained.count("<tool_call>") == len(calls) == 2    # the fix: edit_file and verify
        assert '"name": "edit_file"' in trained and '"name": "verify"' in trained
        assert len(trained) < sum(len(m["content"]) for m in learned) + 400   # their calls and end-of-turn tokens
        assert "<tool_response>" not in trained and "verify: PASSED" not in trained and "# Skill" not in trained


@pytest.mark.slow
def test_fill_collect_runs_its_actor(stage):
    out, journal = stage
    actor = journal[("fill_agentic_rft", "finished")]["outputs"]["actor"]
    assert actor.endswith("fill_agentic_rft/checkpoints/global_step_1/huggingface")
    assert journal[("fill_collect", "started")]["inputs"]["actor"] == actor
    assert journal[("fill_collect", "finished")]["outputs"]["pass_at_turn"] == {"1": 0.0, "2": 1.0}
