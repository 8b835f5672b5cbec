"""rl.fill: the fill-the-kernel family. The format guard lets through expressions of v and nothing
that could change more than the one line; the split holds out constants and whole operators; the
correct answers pass the real harness (CPU backend) and a wrong one fails with its reason."""

from __future__ import annotations

import pytest

pytest.importorskip("verl", reason="verl is not installed: the rl tests need `pip install -e '.[rl]'` (verl 0.9.1)")

from cuda_agent.rl import fill, reward  # noqa: E402
from cuda_agent.rl.data import FILL, read_parquet  # noqa: E402
from cuda_agent.rl.evaluation import close_shared_services  # noqa: E402

FAST = {"timing_budget_s": 0.1, "min_runs": 5, "build_workers": 0, "correctness_trials": 3}


@pytest.fixture(scope="module", autouse=True)
def services():
    yield
    close_shared_services()


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


def test_the_harness_judges_the_reply():
    """The correct expression of a held-out task is correct (reward >= 1); a plausible mistake (the
    sign of elu's negative branch) fails correctness; a reply outside the format never reaches the
    harness. The shuffled control keeps the true verdict beside the score it gives."""
    item = next(it for it in fill.items("val", "cpu") if it.op.name == "elu")
    row = fill.fill_row(item, 0, "cpu")
    args = (FILL, row["reward_model"]["ground_truth"], row["extra_info"])

    def judge(reply, **kw):
        return reward.score(args[0], reply, args[1], args[2], **FAST, **kw)

    good = judge(item.answer)
    assert good["correct"] == 1.0 and good["score"] >= 1.0 and good["true_score"] == good["score"], good
    wrong = judge(item.answer.replace("(expf(v) - 1.f)", "(1.f - expf(v))"))
    assert wrong["score"] == -1.0 and wrong["stage"] == "correctness", wrong
    bad = judge("I think the answer is x[i]")
    assert bad["stage"] == "parse" and bad["parsed"] == 0.0
    shuffled = judge(item.answer, shuffle=True)
    assert shuffled["true_score"] == good["score"] and shuffled["score"] in {good["score"], wrong["score"], -1.0}


def test_rft_may_show_only_some_operators(tmp_path):
    from cuda_agent.rl.stages import TrainError, load_run_config

    sft = read_parquet(fill.write_fill_sft(tmp_path / "sft.parquet", "cpu", ops=["affine", "tanh"], copies=2))
    assert len(sft) == 2 * 2 * 16 and {r["op"] for r in sft} == {"affine", "tanh"}
    run = tmp_path / "run.yaml"
    run.write_text("out: out\nmodel: m\nfill: {rft_ops: [affine, elu]}\n")
    assert load_run_config(run).fill.rft_ops == ["affine", "elu"]
    for bad, said in (("[affine, softsign]", "unknown: softsign"), ("[]", "empty")):
        run.write_text(f"out: out\nmodel: m\nfill: {{rft_ops: {bad}}}\n")
        with pytest.raises(TrainError, match=said):
            load_run_config(run)
