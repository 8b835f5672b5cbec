"""cuda_agent.bench.agreement: classifying a (task, solution) judged by us and by KernelBench, the
named hacks, the causes of a disagreement and the table's arithmetic."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cuda_agent.bench import agreement as ag
from cuda_agent.harness import EvalResult, check_solution

HARNESS = Path(ag.__file__).resolve().parents[1] / "harness"


def side(status: str, reason: str = "", **kw) -> dict:
    return {"status": status, "reason": reason, **kw}


def row(ours: dict, kb: dict, key: str = "k") -> dict:
    return {"key": key, "task": "t", "ours": ours, "kb": kb}


def test_same_verdict_agrees_either_way():
    assert ag.classify(row(side("pass"), side("pass")))[0] == ag.AGREE
    assert ag.classify(row(side("fail", "wrong"), side("fail", "Output mismatch")))[0] == ag.AGREE


def test_a_side_without_verdict_is_no_verdict_whoever_it_is():
    assert ag.classify(row(side("error", "harness error"), side("pass"))) == (ag.NO_VERDICT, "ours")
    assert ag.classify(row(side("fail"), side("error"))) == (ag.NO_VERDICT, "KernelBench")


@pytest.mark.parametrize("reason, hack", [
    ("the output of input set 3 of 6 changed after forward returned, while later calls ran", "deferred"),
    ("wrong output on input set 6 of 6: ... results replayed for inputs that look like ones seen before", "replayed"),
    ("output of the last timed call is wrong (x): results cached across calls, work skipped", "timed calls"),
    ("input 0 was modified in place by forward (inputs must stay unchanged)", "in place"),
    ("forward worked on the CPU (aten::mul on a host tensor)", "host compute"),
])
def test_kernelbench_pass_and_our_run_time_hack_reason_is_a_named_hack(reason, hack):
    cls, note = ag.classify(row(side("fail", reason, stage="correctness"), side("pass")))
    assert cls == ag.HACK and hack in note


def verdict(source: str) -> dict:
    """Our side for a solution the relaxed static checks refuse, from the real checker's findings."""
    report = check_solution({"model_new.py": source}, "relaxed")
    assert not report.ok
    return ag.our_side(EvalResult(task="t", reward=-1, correct=False, stage="static",
                                  reason=f"rule broken: {report.reason}", findings=report.findings))


STREAM = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def __init__(self):\n"
          "        super().__init__()\n        self.side = torch.cuda.Stream()\n\n    def forward(self, x):\n"
          "        torch.cuda.set_stream(self.side)\n        return torch.tanh(x)\n")
CPP_STREAM = ('import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n\n'
              'src = """#include <torch/extension.h>\ntorch::Tensor f(torch::Tensor x) {\n  cudaStream_t s;\n'
              '  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);\n  return x;\n}\n"""\n'
              'm = load_inline(name="m", cpp_sources="torch::Tensor f(torch::Tensor x);", cuda_sources=src, '
              'functions=["f"])\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return m.f(x)\n')
PATCH = ("import torch\nimport torch.nn as nn\n\ntorch.allclose = lambda *a, **k: True\n\n\n"
         "class ModelNew(nn.Module):\n"
         "    def forward(self, x):\n        return x\n")
COMPILED = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def __init__(self):\n"
            "        super().__init__()\n        self.f = torch.compile(torch.tanh)\n\n    def forward(self, x):\n"
            "        return self.f(x)\n")


@pytest.mark.parametrize("source, hack", [(STREAM, ag.SIDE_STREAM_NAME), (CPP_STREAM, ag.SIDE_STREAM_NAME),
                                          (PATCH, "monkey-patching")])
def test_side_streams_and_monkey_patching_refused_statically_are_named_hacks(source, hack):
    assert ag.classify(row(verdict(source), side("pass"))) == (ag.HACK, hack)


def test_a_construct_we_refuse_but_cannot_call_a_hack_is_a_policy_disagreement():
    assert ag.classify(row(verdict(COMPILED), side("pass"))) == (ag.DISAGREE, "policy")


def _joined_literals(text: str) -> str:
    """Source text with adjacent string literals joined ("a "\\n "b" -> "a b"), as Python joins them."""
    return re.sub(r'"\s*\n\s*[rbf]*"', "", text)


def test_every_named_hack_phrase_is_written_by_the_harness():
    source = "\n".join(_joined_literals(p.read_text()) for p in HARNESS.rglob("*.py"))
    for name, phrases in ag.NAMED_HACKS:
        for phrase in phrases:
            assert phrase in source, f"{name}: the harness no longer writes {phrase!r}"


@pytest.mark.parametrize("ours, kb, cause", [
    (side("pass"), side("fail", "Output mismatch", max_difference=0.003, compiled=True), "tolerance"),
    (side("pass"), side("fail", "timed out after 300 s", timed_out=True), "time limit"),
    (side("pass"), side("fail", "compile failed", compiled=False), "build"),
    (side("pass", init="state_dict"), side("fail", "Output mismatch", max_difference=0.5, compiled=True), "weights"),
    (side("pass", init="same_seed"), side("fail", "Output mismatch", max_difference=0.5, compiled=True), "unexplained"),
    (side("fail", "the solution timed out after 300s", stage="correctness"), side("pass"), "time limit"),
    (side("fail", "build failed: x", stage="build"), side("pass"), "build"),
    (side("fail", "wrong output on input set 2 of 6: differs", stage="correctness"), side("pass"), "unexplained"),
])
def test_disagreements_get_their_known_cause_or_unexplained(ours, kb, cause):
    assert ag.classify(row(ours, kb)) == (ag.DISAGREE, cause)


def timed(ours_speedup: float, kb_speedup: float, ref_ours: float, ref_kb: float, key: str = "k") -> dict:
    return row(side("pass", speedup=ours_speedup, ref_ms=ref_ours),
               side("pass", speedup=kb_speedup, ref_ms=ref_kb), key)


def test_speed_ups_are_compared_on_rows_both_pass_with_a_reference_of_a_millisecond_or_more():
    rows = [timed(2.0, 2.0, 4.0, 4.1), timed(1.1, 1.0, 2.0, 2.0), timed(1.0, 1.25, 1.5, 1.5),
            timed(3.0, 1.0, 0.5, 2.0),                      # the smaller measurement is under 1 ms: not compared
            row(side("pass", speedup=1.0, ref_ms=5.0), side("fail", "x")),
            row(side("fail", "x"), side("fail", "y"))]
    s = ag.summarize(rows)
    assert s.ratios == pytest.approx([1.0, 1.1, 0.8])
    assert s.within == 2 and s.short == 1
    assert s.counts == {ag.AGREE: 5, ag.HACK: 0, ag.DISAGREE: 1, ag.NO_VERDICT: 0}


def test_within_ten_percent_counts_the_bounds():
    s = ag.summarize([timed(1.1, 1.0, 2, 2), timed(0.9, 1.0, 2, 2), timed(1.1001, 1.0, 2, 2)])
    assert s.within == 2


def test_table_has_the_counts_causes_hacks_and_one_line_per_row():
    rows = [timed(2.0, 2.0, 4.0, 4.0, "a"),
            row(verdict(STREAM), side("pass", speedup=50.0, ref_ms=4.0), "b"),
            row(side("pass", speedup=1.0, ref_ms=3.0), side("fail", "Output mismatch | x", max_difference=0.004), "c")]
    md = ag.markdown(rows, {"KernelBench": "423217d9"})
    assert "- KernelBench: 423217d9" in md
    assert f"| {ag.AGREE} | 1 |" in md and f"| {ag.HACK} | 1 |" in md and f"| {ag.DISAGREE} | 1 |" in md
    assert "| tolerance | 1 |" in md and ag.SIDE_STREAM_NAME in md
    assert "1 rows, 1 within 10%" in md and "median 1.000" in md
    lines = [line for line in md.splitlines() if re.match(r"\| \d+ \|", line)]
    assert len(lines) == 3 and "mismatch \\| x" in lines[2]
    assert ag.summary_line(rows) == (f"{ag.AGREE} 1; {ag.HACK} 1; {ag.DISAGREE} 1 (tolerance 1); {ag.NO_VERDICT} 0; "
                                     "speed-ups compared 1, within 10% 1")
