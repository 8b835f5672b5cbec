"""rl.data.fill: the fill-the-kernel family. The format guard lets through expressions of v and nothing
that could change more than the one line; the split holds out constants and whole operators. That
the correct answers pass the real harness (CPU backend) and a wrong one fails with its reason is
judged through the reward's service, in test_reward.py."""

from __future__ import annotations

import pytest

pytest.importorskip("verl", reason="verl is not installed: the rl tests need `pip install -e '.[rl]'` (verl 0.9.1)")

from cuda_agent.rl.data import fill  # noqa: E402
from cuda_agent.rl.data.rows import FILL, read_parquet  # noqa: E402


@pytest.mark.parametrize("reply, expr", [
    ("fminf(fmaxf(v, 0.f), 1.f)", "fminf(fmaxf(v, 0.f), 1.f)"),
    ("y[i] = v > 0.f ? v : 0.1f * v;", "v > 0.f ? v : 0.1f * v"),
    ("```c\n2.0f * tanhf(v)\n```\nThis scales tanh.", "2.0f * tanhf(v)"),
    ("`1.f / (1.f + expf(-v))`", "1.f / (1.f + expf(-v))"),
    ("return .5e-1f*v;", ".5e-1f*v"),
])
def test_the_guard_reads_the_expression_whatever_its_wrapping(reply, expr):
    assert fill.expression(reply)[0] == expr


@pytest.mark.parametrize("reply, why", [
    ("", "no expression"),
    ("system(\"id\")", "'system'"),
    ("x[i] * 2.f", "'x'"),
    ("v; } void f() { v", "';"),
    ("fmaxf(v, 0.f", "parentheses"),
    ("v) + (v", "parentheses"),
    ("2.0f * 3.0f", "does not use v"),
    ("v /* */ + 1", "comment"),
    ("v // ;", "comment"),
    ("#define v 1", "'#define"),
    ("v" + " + v" * 60, "longer than"),
    ("__builtin_trap() + v", "'__builtin_trap'"),
])
def test_the_guard_refuses_anything_beyond_an_expression_of_v(reply, why):
    expr, reason = fill.expression(reply)
    assert expr is None and why in reason, reason


def test_held_out_constants_and_operators_are_never_trained_on():
    train, val = fill.items("train", "cpu"), fill.items("val", "cpu")
    assert len(train) == 176 and len(val) == 73
    seen = {(it.op.name, it.values) for it in train}
    assert not any((it.op.name, it.values) in seen for it in val)
    assert {it.op.name for it in val if not it.op.seen} == {"hardsigmoid", "softsign", "celu"}
    assert not any(not it.op.seen for it in train)
    assert len({it.task('cpu').sha256 for it in val}) == len(val)   # no two held-out prompts alike
    assert not {it.answer for it in val} & {it.answer for it in train}


def test_every_answer_passes_the_guard_and_names_its_constants():
    for it in fill.items("train", "cpu") + fill.items("val", "cpu"):
        assert fill.expression(it.answer)[0] == it.answer
        for value in it.values:
            assert repr(abs(value)) in it.answer or value == 1.0, (it.op.name, it.values, it.answer)


def test_data_and_sft_rows(tmp_path):
    train, val = fill.write_fill_data(tmp_path, "cpu", seed=3)
    rows, vrows = read_parquet(train), read_parquet(val)
    assert len(rows) == 176 and len(vrows) == 73 and rows[0]["data_source"] == FILL
    assert rows[0]["agent_name"] == "single_turn_agent" and rows[0]["prompt"][0]["role"] == "system"
    sft = read_parquet(fill.write_fill_sft(tmp_path / "sft.parquet", "cpu"))
    assert len(sft) == 176 and sft[0]["messages"][-1]["role"] == "assistant"
    assert fill.expression(sft[0]["messages"][-1]["content"])[0] == sft[0]["messages"][-1]["content"]


def test_rft_may_show_only_some_operators(tmp_path):
    from cuda_agent.rl.driver.stages import TrainError, load_run_config

    sft = read_parquet(fill.write_fill_sft(tmp_path / "sft.parquet", "cpu", ops=["affine", "tanh"], copies=2))
    assert len(sft) == 2 * 2 * 16 and {r["op"] for r in sft} == {"affine", "tanh"}
    run = tmp_path / "run.yaml"
    run.write_text("out: out\nmodel: m\nfill: {rft_ops: [affine, elu]}\n")
    assert load_run_config(run).fill.rft_ops == ["affine", "elu"]
    for bad, said in (("[affine, softsign]", "unknown: softsign"), ("[]", "empty")):
        run.write_text(f"out: out\nmodel: m\nfill: {{rft_ops: {bad}}}\n")
        with pytest.raises(TrainError, match=said):
            load_run_config(run)


# --- tier 2: the expression and a choice that changes only speed -----------------------------------


@pytest.mark.parametrize("reply, parsed", [
    ("2.0f * tanhf(v)\nept=4", ("2.0f * tanhf(v)", 4)),
    ("```c\ny[i + k] = v > 0.f ? v : 0.1f * v;\nept = 8\n```\nEight a thread.", ("v > 0.f ? v : 0.1f * v", 8)),
    ("fabsf(v)\n\n`EPT=2`", ("fabsf(v)", 2)),
    ("v * v\nept=1;", ("v * v", 1)),
])
def test_the_tier2_guard_reads_the_expression_and_the_choice(reply, parsed):
    assert fill.tier2_reply(reply)[0] == parsed


@pytest.mark.parametrize("reply, why", [
    ("2.0f * tanhf(v)", "second line must be ept=N"),
    ("2.0f * tanhf(v)\nept=3", "not 'ept=3'"),
    ("2.0f * tanhf(v)\nept=16", "not 'ept=16'"),
    ("2.0f * tanhf(v)\nept=4; system(\"id\")", "second line must be"),
    ("2.0f * tanhf(v)\nept=EPT", "second line must be"),
    ("2.0f * tanhf(v)\nthreads=256", "second line must be"),
    ("ept=4\n2.0f * tanhf(v)", "'ept'"),            # the order is fixed: the expression first
    ("x[i] * 2.f\nept=4", "'x'"),                   # the first line is tier 1's guard
])
def test_the_tier2_guard_refuses_anything_but_an_expression_and_a_listed_choice(reply, why):
    parsed, reason = fill.tier2_reply(reply)
    assert parsed is None and why in reason, reason


def test_tier2_rows_and_examples_carry_the_tier_and_the_default_choice(tmp_path):
    train, val = fill.write_fill_data(tmp_path, "cuda", seed=1, tier=2)
    rows, vrows = read_parquet(train), read_parquet(val)
    assert len(rows) == 176 and len(vrows) == 73
    assert {r["extra_info"]["tier"] for r in rows + vrows} == {2}
    assert "ept=N" in rows[0]["prompt"][-1]["content"] and "ept=N" in rows[0]["prompt"][0]["content"]
    big = [it.size for it in fill.items("train", "cuda", tier=2)]
    assert min(b * f for b, f in big) >= 4 * min(b * f for b, f in fill.SIZES["cuda"])   # long enough to time
    sft = read_parquet(fill.write_fill_sft(tmp_path / "sft.parquet", "cpu", tier=2))
    reply = sft[0]["messages"][-1]["content"]
    assert sft[0]["tier"] == 2 and reply.endswith(f"\nept={fill.DEFAULT_EPT}")
    assert fill.tier2_reply(reply)[0] == (reply.split("\n")[0], fill.DEFAULT_EPT)
    one = read_parquet(fill.write_fill_data(tmp_path / "t1", "cpu")[0])
    assert {r["extra_info"]["tier"] for r in one} == {1} and "ept" not in one[0]["prompt"][-1]["content"]


def test_the_tier2_choice_reaches_the_kernel_and_tier1_keeps_its_own():
    item = fill.items("val", "cuda", tier=2)[0]
    info = fill.fill_row(item, 0, "cuda")["extra_info"]
    for ept in fill.EPT_CHOICES:
        files, _ = fill.reply_files(f"{item.answer}\nept={ept}", info)
        assert f"constexpr int EPT = {ept};" in files["kernels/sanity.cu"] and item.answer in files["kernels/sanity.cu"]
        assert "@" not in files["kernels/sanity.cu"]
    assert fill.reply_files(item.answer, info)[0] is None   # tier 2 asks for the choice
    tier1 = fill.fill_row(fill.items("val", "cuda")[0], 0, "cuda")["extra_info"]
    files, _ = fill.reply_files(item.answer, tier1)
    assert "EPT" not in files["kernels/sanity.cu"] and f"y[i] = {item.answer};" in files["kernels/sanity.cu"]


def test_a_run_file_selects_the_tier(tmp_path):
    from cuda_agent.rl.driver.stages import TrainError, load_run_config

    run = tmp_path / "run.yaml"
    run.write_text("out: out\nmodel: m\nfill: {tier: 2}\n")
    assert load_run_config(run).fill.tier == 2
    run.write_text("out: out\nmodel: m\n")
    assert load_run_config(run).fill.tier == 1
    run.write_text("out: out\nmodel: m\nfill: {tier: 3}\n")
    with pytest.raises(TrainError, match="fill.tier is 3"):
        load_run_config(run)


def test_tier2_times_every_reply_and_trains_on_tier2_rows(tmp_path, tiny_model, monkeypatch):
    """`fill: {tier: 2}` in the run file: the fill stage's reward profiles (reward up to 3), its rows and
    fill_rft's examples are tier 2's, and the journal records the tier."""
    from typer.testing import CliRunner

    from cuda_agent.cli import app
    from cuda_agent.journal import read_rows
    from cuda_agent.rl.driver import launch

    monkeypatch.setattr(launch, "run_logged", lambda cmd, *a, **k: 0)   # verl itself is not run
    run = tmp_path / "run.yaml"
    run.write_text(f"out: out\nmodel: {tiny_model}\nplatform: cpu\nfill: {{tier: 2}}\n")
    result = CliRunner().invoke(app, ["train", "fill", "--config", str(run),
                                      f"fill:actor_rollout_ref.model.path={tiny_model}"])
    started = next(r for r in read_rows(tmp_path / "out" / "stages.jsonl") if r["event"] == "started")
    assert started["inputs"]["tier"] == 2, result.output
    assert "reward.custom_reward_function.reward_kwargs.profile=true" in started["overrides"]
    rows = read_parquet(tmp_path / "out" / "data" / "fill" / "train.parquet")
    assert {r["extra_info"]["tier"] for r in rows} == {2}
    run.write_text(f"out: out1\nmodel: {tiny_model}\nplatform: cpu\n")
    CliRunner().invoke(app, ["train", "fill", "--config", str(run), f"fill:actor_rollout_ref.model.path={tiny_model}"])
    started = next(r for r in read_rows(tmp_path / "out1" / "stages.jsonl") if r["event"] == "started")
    assert started["inputs"]["tier"] == 1 and not any("profile=true" in o for o in started["overrides"])


def test_the_evaluation_counts_each_choice():
    from cuda_agent.rl.tools.fill_eval import choices

    assert choices(["v\nept=4", "```\nv * v\nept=4\n```", "v\nept=8", "v", "x\nept=2"]) == {"4": 2, "8": 1, "none": 2}
