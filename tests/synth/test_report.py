from __future__ import annotations

from cuda_agent.synth.report import funnel, time_breakdown, write_report


def records():
    rows = [{"index": i, "filter": "window", "reason": "eager 500 ms outside [1, 100]", "seconds": {"eager_run": 1.0}}
            for i in range(3)]
    rows += [{"index": 3 + i, "filter": "accepted", "ops": ["Conv2d", "ReLU"][: i + 1], "categories": ["conv"],
              "structure": "chain", "eager_ms": 5.0 + i, "compile_ms": 4.0, "compile_speedup": (5.0 + i) / 4.0,
              "kernelbench_similarity": 0.3, "seconds": {"compile": 10.0, "eager_run": 0.5}} for i in range(2)]
    return rows


def test_funnel_counts_each_filter_in_order():
    rows = dict((f, (n, left)) for f, n, left in funnel(records()))
    assert rows["window"] == (3, 2) and rows["compile"] == (0, 2) and rows["compose"] == (0, 5)


def test_the_time_no_stage_holds_is_its_own_row():
    """A candidate's total beyond its stages (the service's dispatch, the channel, the worker between its laps) was
    0.3 s a size step on an H200 and appeared nowhere; it is `unlapped` now."""
    rows = [{"seconds": {"compile": 2.0, "build": 0.5, "total": 3.25}}, {"seconds": {"compile": 1.0, "total": 1.0}},
            {"seconds": {"build": 1.0}}]
    assert time_breakdown(rows) == {"compile": 3.0, "build": 1.5, "unlapped": 0.75}


def test_report_has_counts_distributions_and_plots(tmp_path):
    recs = records()
    path = write_report(recs, [r for r in recs if r["filter"] == "accepted"], tmp_path / "summary.md", wall_s=60)
    text = path.read_text()
    assert "| window | 3 | 2 |" in text and "compile speed-up" in text and "120 accepted tasks per hour" in text
    assert (tmp_path / "synth_distributions.png").stat().st_size > 1000
    assert (tmp_path / "synth_filters.png").exists()


def test_summary_puts_the_set_beside_kernelbench_with_the_same_categorizer(tmp_path, kernelbench_jsonl):
    from .test_filters import task

    recs = records()
    accepted = [{**r, "code": task("return torch.relu(self.linear(x))")} for r in recs if r["filter"] == "accepted"]
    text = write_report(recs, accepted, tmp_path / "summary.md", kernelbench=kernelbench_jsonl,
                        target={"gemm": 1.0}, device="cpu").read_text()
    assert "| | this set | KernelBench L1-3 | target |" in text
    assert "| class: gemm | 100% (2) |" in text and "| core (attention, conv or gemm) | 100% (2) |" in text
    assert "(cpu vs H100)" in text and "| ops (from code): 2 | 100% (2) |" in text


def test_a_resumed_run_reports_the_rate_of_its_own_accepted_tasks(tmp_path):
    """On a resume, `accepted` holds the earlier run's tasks too: the rate counts this run's alone."""
    recs = records()
    accepted = [r for r in recs if r["filter"] == "accepted"]
    text = write_report(recs, accepted, tmp_path / "summary.md", wall_s=60, accepted_in_run=1).read_text()
    assert "(1 accepted in this run, which resumed an earlier one): 60 accepted tasks per hour" in text


def test_a_set_smaller_than_the_accepted_candidates_says_how_many_it_holds(tmp_path):
    """With a mix, a journal may hold more accepted candidates than the set takes (a class over its quota, or
    a set taken from a longer run's journal): the first line counts the journal's and says what the set holds."""
    from cuda_agent.synth.report import summary_markdown

    recs = records()
    accepted = [r for r in recs if r["filter"] == "accepted"]
    assert "5 candidates, 2 accepted (40.0%)." in summary_markdown(recs, accepted, "t")
    assert "5 candidates, 2 accepted (40.0%); the set holds 1 of them" in summary_markdown(recs, accepted[:1], "t")
