"""The verdict's one constructor of a failure, its typed fault, its one rendering, and its lines as
a journal writes them (old lines included)."""

from __future__ import annotations

from cuda_agent.harness import EvalConfig, EvalResult, RewardSchedule, TimingStats, headline


def test_a_failed_verdict_takes_the_failure_reward_and_the_policy_of_its_config():
    config = EvalConfig(device="cuda", policy="relaxed", reward=RewardSchedule(failed=-2.0))
    r = EvalResult.failed("t", "build", "build failed: x.cu:3: error", config)
    assert (r.reward, r.correct, r.milestone, r.stage) == (-2.0, False, "failed", "build")
    assert (r.device, r.policy, r.fault, r.harness_error) == ("cuda", "relaxed", None, False)
    assert EvalResult.failed("t", "run", "x", EvalConfig(), device="cpu").device == "cpu"


def test_a_harness_error_is_a_typed_fault_and_survives_a_journal_line():
    r = EvalResult.failed("t", "run", "harness error: the evaluator died twice", EvalConfig(), fault="harness",
                          flags=["retried"])
    assert r.harness_error and r.flags == ["retried"]
    line = r.to_dict()
    assert EvalResult.written_harness_error(line) and EvalResult.from_dict(line).harness_error


def test_a_harness_error_written_as_a_flag_before_the_fault_existed_is_still_one():
    old = {k: v for k, v in EvalResult.failed("t", "run", "x", EvalConfig()).to_dict().items() if k != "fault"}
    old["flags"] = ["harness_error", "retried"]
    assert EvalResult.written_harness_error(old)
    back = EvalResult.from_dict(old)
    assert back.harness_error and back.flags == ["retried"]
    assert not EvalResult.written_harness_error({"flags": ["retried"]})


def test_a_verdict_is_rendered_in_one_place():
    stats = TimingStats.from_samples([2.0, 2.0, 2.0])
    r = EvalResult(task="t", reward=3.0, correct=True, stage="done", reason="ok", milestone="faster_than_compile",
                   speedup_vs_eager=3.0, speedup_vs_compile=1.5, eager=stats, compile=stats, solution=stats,
                   max_abs_error=0.0)
    text = r.render("profile")
    assert text.splitlines()[0] == "profile: PASSED (correct, max abs error 0)"
    assert "speed-up: 3.00x vs eager, 1.50x vs torch.compile" in text and "reward: 3 (faster_than_compile)" in text
    assert r.headline() == headline(3.0, "faster_than_compile", 3.0, 1.5) == \
        "reward 3 (faster_than_compile), 3.00x vs eager, 1.50x vs torch.compile"
    assert headline(1.0, "correct", None, None) == "reward 1 (correct), not profiled"
    failed = EvalResult.failed("t", "run", "harness error: gone", EvalConfig(), fault="harness").render("verify")
    assert failed.startswith("verify: FAILED at stage 'run': harness error: gone") and "fault: harness" in failed


def test_a_verdict_says_when_modelnew_kept_its_own_weights():
    r = EvalResult(task="t", reward=1.0, correct=True, stage="done", reason="ok", policy="relaxed", init="same_seed",
                   details={"weights": "the reference's state_dict could not be copied in (bn.running_mean: ...)"})
    assert "weights: ModelNew as constructed after the reference's seed" in r.render("verify")
    assert "bn.running_mean" in r.render("verify")
    assert "weights:" not in EvalResult(task="t", reward=1.0, correct=True, stage="done", reason="ok",
                                        init="state_dict").render("verify")


def _paired(**kw):
    from cuda_agent.measure import PairedTiming, Ratio

    fields = dict(method="graph", stopped="target", target_se=0.005, rounds=12, window=4, warmup_rounds=5,
                  settled=True, ratios={"eager": Ratio(3.0, 0.004, 12, 2.9, 3.1), "compile": Ratio(1.5, 0.003, 12, 1.4, 1.6)},
                  graph_calls=16)
    return PairedTiming(**{**fields, **kw})


def test_a_verdict_says_how_its_speed_ups_were_measured():
    """Each speed-up's standard error, the rounds and windows, the method and what ended the run;
    the cached baselines beside the paired medians where there were any (the drift check)."""
    stats = TimingStats.from_samples([2.0, 2.0, 2.0], window_medians=[2.0, 2.0])
    r = EvalResult(task="t", reward=3.0, correct=True, stage="done", reason="ok", milestone="faster_than_compile",
                   speedup_vs_eager=3.0, speedup_vs_compile=1.5, eager=stats, compile=stats, solution=stats,
                   paired=_paired(cached_ms={"eager": 2.5}))
    line = r.timing_line()
    assert line == ("paired (graph): ±0.4% vs eager, ±0.3% vs torch.compile; 12 rounds of 4 replays of a graph of 16 "
                    "calls a window, target ±0.5% met; cached: eager 2.5 ms (0.80x now)")
    assert line in r.render("profile")
    budget = EvalResult(task="t", reward=1.0, correct=True, stage="done", reason="ok",
                        paired=_paired(method="per_call", graph_calls=0, stopped="budget"))
    assert "of 4 calls a window, ended by its budget" in budget.timing_line()
    assert EvalResult(task="t", reward=1.0, correct=True, stage="done", reason="ok").timing_line() == ""


def test_the_paired_record_round_trips_and_old_lines_have_none():
    r = EvalResult(task="t", reward=3.0, correct=True, stage="done", reason="ok", paired=_paired())
    back = EvalResult.from_dict(r.to_dict())
    assert back.paired == r.paired and back.to_dict()["paired"]["met"] is True
    old = {k: v for k, v in r.to_dict().items() if k != "paired"}
    assert EvalResult.from_dict(old).paired is None
