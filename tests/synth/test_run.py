"""The whole pipeline on the CPU backend: a small dataset end to end, resumed, loadable."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import typer

from cuda_agent.cli.synth import synth_app
from cuda_agent.synth.pipeline import SynthError, synthesize
from cuda_agent.synth.run import Candidates, Run, SynthConfig
from cuda_agent.tasks import load_tasks

from .conftest import HF_FAMILIES

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "synth_bench.py"


def test_journal_survives_a_line_cut_by_a_kill(tmp_path: Path):
    path = tmp_path / "candidates.jsonl"
    path.write_text(json.dumps({"index": 0, "filter": "window"}) + "\n" + '{"index": 1, "filt')
    journal = Candidates(path)
    assert set(journal.records) == {0}  # candidate 1 is redone
    journal.append({"index": 1, "filter": "eager"})
    assert set(Candidates(path).records) == {0, 1}


def test_resume_skips_done_candidates(catalog, cpu_config):
    from cuda_agent.synth.compose import ProgramComposer

    from dataclasses import replace

    Candidates(cpu_config.state_dir / "candidates.jsonl").append({"index": 0, "filter": "window"})
    Candidates(cpu_config.state_dir / "candidates.jsonl").append({"index": 2, "filter": "eager"})
    run = Run(replace(cpu_config, mix=None), ProgramComposer(catalog.usable()))
    assert [run._claim() for _ in range(3)] == [1, 3, 4]
    # with a mix, each claim is the lowest index of its class's stream that has not run
    run = Run(cpu_config, ProgramComposer(catalog.usable()))
    claims = [run._claim() for _ in range(3)]
    assert not {0, 2} & set(claims)
    for n, index in enumerate(claims):
        lower = [j for j in range(index) if run.plan.class_at(j) == run.plan.class_at(index)]
        assert set(lower) <= {0, 2, *claims[:n]}, (index, lower)


def test_a_run_whose_journal_holds_the_set_writes_it_without_starting_a_service(catalog, cpu_config, monkeypatch):
    """A finished run resumed, or a set taken from a longer run's journal (the class streams do not depend on
    the count), needs no device: the rows come from the journal."""
    from cuda_agent.synth import run as run_module
    from cuda_agent.synth.compose import ProgramComposer

    journal = Candidates(cpu_config.state_dir / "candidates.jsonl")
    for i in range(3):
        journal.append({"index": i, "filter": "accepted", "name": f"t{i}", "task_class": "gemm", "fingerprint": str(i)})
    monkeypatch.setattr(run_module, "using", lambda *a, **k: pytest.fail("a service was started"))
    from dataclasses import replace

    run = Run(replace(cpu_config, mix=None, count=2), ProgramComposer(catalog.usable()))
    assert [r["name"] for r in run.run()] == ["t0", "t1"]
    run = Run(replace(cpu_config, mix=None, count=4), ProgramComposer(catalog.usable()))
    with pytest.raises(pytest.fail.Exception, match="service"):  # one task short: the run goes on, on a service
        run.run()


def _linear_task(features: int) -> str:
    return (f"import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def __init__(self):\n"
            f"        super().__init__()\n        self.linear = nn.Linear({features}, {features})\n"
            f"    def forward(self, x):\n        return self.linear(x)\n"
            f"def get_inputs():\n    return [torch.randn(2, {features})]\ndef get_init_inputs():\n    return []\n")


def test_a_resume_holds_tasks_an_older_memory_filter_let_in_to_the_weights_limit(catalog, cpu_config, monkeypatch):
    """A resume runs no accepted candidate again: the 6k set kept 58 nn.Bilinear tasks of 2-16 GiB accepted before
    the weights limit (a review, 2026-11-29). Those of an older memory filter are counted on the meta device in a
    worker child and refused where over; the others get the current version; the current version's are trusted."""
    from dataclasses import replace

    from cuda_agent.synth import run as run_module
    from cuda_agent.synth.compose import ProgramComposer
    from cuda_agent.synth.filters import FILTER_VERSIONS

    journal = Candidates(cpu_config.state_dir / "candidates.jsonl")
    old, now = {"memory": "1"}, dict(FILTER_VERSIONS)
    for i, (features, versions) in enumerate([(16, old), (1024, old), (1024, now), (16, None)]):
        journal.append({"index": i, "filter": "accepted", "name": f"t{i}", "task_class": "gemm", "fingerprint": str(i),
                        "code": _linear_task(features), **({"filter_versions": versions} if versions else {})})
    monkeypatch.setattr(run_module, "using", lambda *a, **k: pytest.fail("a service was started"))
    config = replace(cpu_config, mix=None, count=3, max_weights_bytes=1 << 20)   # 1 MiB: a 1024 x 1024 Linear is 4 MiB
    run = Run(config, ProgramComposer(catalog.usable()))
    assert [r["name"] for r in run.run()] == ["t0", "t2", "t3"]
    records = Candidates(cpu_config.state_dir / "candidates.jsonl").records
    assert records[1]["filter"] == "memory" and "4 MiB" in records[1]["reason"] and "found on resume" in records[1]["reason"]
    assert records[1]["weights_bytes"] == (1024 * 1024 + 1024) * 4
    assert records[0]["weights_bytes"] == (16 * 16 + 16) * 4 and records[0]["filter"] == "accepted"
    assert {records[i]["filter_versions"]["memory"] for i in (0, 1, 3)} == {FILTER_VERSIONS["memory"]}
    assert "weights_bytes" not in records[2]   # the current version's: trusted, not run again
    assert Run(config, ProgramComposer(catalog.usable())).recheck_weights() == 0   # once


@pytest.mark.long   # 22-50 s on 2 cores: `pytest -m long` (CI stays under 20 minutes)
def test_small_dataset_end_to_end_then_resumed_without_loss_or_duplicates(catalog, cpu_config, tmp_path):
    out = cpu_config.out
    cmd = typer.main.get_command(synth_app)
    args = ["--out", str(out), "--count", "1", "--device", "cpu", "--window", "0.02,20", "--quiet", "--json",
            "--max-candidates", "12", "--hf-families", ",".join(HF_FAMILIES)]
    if cpu_config.kernelbench is None:
        args += ["--kernelbench", "none"]
    cmd(args, standalone_mode=False)
    first = Candidates(cpu_config.state_dir / "candidates.jsonl").records
    assert sum(r["filter"] == "accepted" for r in first.values()) == 1
    # A second, longer run on the same OUT continues where the first stopped.
    cpu_config.count, cpu_config.jsonl = 2, True
    rows, files, run = synthesize(cpu_config)
    assert len(rows) == 2 and len({r["fingerprint"] for r in rows}) == 2
    lines = (cpu_config.state_dir / "candidates.jsonl").read_text().splitlines()
    indices = [json.loads(line)["index"] for line in lines]
    assert len(indices) == len(set(indices)) and set(first) <= set(indices)
    for path in files:
        ts = load_tasks(path)
        assert not ts.errors and len(ts.tasks) == 2
        meta = ts.tasks[0].metadata
        assert meta["composer"] == "program" and meta["eager_ms"] > 0 and meta["compile_ms"] > 0
        assert meta["filter_versions"]["compile"] and meta["ops"]
    assert (cpu_config.state_dir / "summary.md").exists()
    cpu_config.composer = "llm"
    try:
        synthesize(cpu_config)
        raise AssertionError("changing the composer on resume must be refused")
    except SynthError as e:
        assert "composer" in str(e)


def test_dataset_loads_with_hugging_face_datasets(tmp_path):
    import pytest

    datasets = pytest.importorskip("datasets")
    from cuda_agent.synth.pipeline import write_dataset

    from .test_filters import task

    path = write_dataset([{"name": "t0", "code": task("return x"), "ops": ["Linear"]}], tmp_path / "d.parquet")[0]
    ds = datasets.load_dataset("parquet", data_files=str(path))["train"]
    assert ds[0]["name"] == "t0" and ds[0]["ops"] == ["Linear"]


class HangingComposer:
    """Candidates whose forward never returns: whatever the machine's speed, they are in flight
    when the run's time is up."""

    def compose(self, index: int):
        from cuda_agent.synth.compose import Candidate

        from .test_filters import task

        code = task("while True:\n            x = x + 0\n        return x")
        return Candidate(index, f"hang_{index}", code, ["Linear"], ["gemm"], "program")


@pytest.mark.slow
def test_a_run_out_of_time_cancels_what_is_in_flight_and_a_resume_redoes_it(cpu_config, service):
    """At the deadline no candidate starts; at the hard stop (grace later) the ones in flight are
    killed and get no line in the journal, so the same command later runs them again."""
    cpu_config.grace_s = 2.0
    notes: list[str] = []
    start = time.time()
    run = Run(cpu_config, HangingComposer(), deadline=start + 2.0, note=notes.append)
    assert run.run(service) == []
    took = time.time() - start
    assert sorted(run.cancelled) == list(range(service.evaluators)) and run.stopped_at_limit
    assert not (cpu_config.state_dir / "candidates.jsonl").read_text()  # no verdict for a cancelled candidate
    assert took < 2.0 + 2.0 + 10.0, f"the run ended {took:.1f} s after it started"  # not the 120 s eager limit
    assert any(n.startswith("time limit") for n in notes) and any(n.startswith("first candidate") for n in notes)
    resumed = Run(cpu_config, HangingComposer())
    assert resumed._claim() == 0


@pytest.mark.slow
def test_the_bench_bounded_by_max_seconds_still_writes_its_summary_and_figures(catalog, cpu_config, tmp_path):
    """The H100 call of 2026-11-25 was killed at its limit and reported nothing; with --max-seconds
    the bench stops in time and writes the dataset, summary.md and bench.json, and the catalog it
    was given (--seeds) sits in the run's state folder to carry on."""
    import importlib.util

    from cuda_agent.home import subdir

    spec = importlib.util.spec_from_file_location("synth_bench", BENCH)
    bench_script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_script)
    out = tmp_path / "ops.parquet"
    seeds = subdir("synth") / "seeds-cpu.json"  # made by the `catalog` fixture
    bench = bench_script.main(["--device", "cpu", "--count", "2", "--window", "0.02,20", "--out", str(out),
                               "--hf-families", ",".join(HF_FAMILIES), "--seeds", str(seeds),
                               "--kernelbench", "none", "--max-seconds", "8", "--grace-seconds", "1"])
    state = tmp_path / "ops.synth"
    assert bench["stopped_at_limit"] and bench["wall_s"] < 8 + 1 + 12
    assert json.loads((state / "bench.json").read_text())["phases_s"]["catalog"] == bench["phases_s"]["catalog"]
    assert "## Benchmark" in (state / "summary.md").read_text() and out.exists()
    assert bench["catalog_from"].endswith("seeds-cpu.json") and (state / "seeds.json").exists()
    assert set(bench["phases_s"]) >= {"catalog", "service_start", "candidates", "service_close", "dataset"}


def test_a_saved_catalog_is_used_only_where_it_was_made_for(catalog, cpu_config, tmp_path):
    """A catalog crawled with another transformers is not used: its blocks may be missing or
    behave otherwise here. The run says so and makes its own (here: from the cache)."""
    from cuda_agent.home import subdir
    from cuda_agent.synth.pipeline import run_catalog

    saved = json.loads((subdir("synth") / "seeds-cpu.json").read_text())
    other = tmp_path / "seeds-other.json"
    other.write_text(json.dumps({**saved, "transformers": "5.17.0", "seeds": saved["seeds"][:3]}))
    cpu_config.seeds = other
    notes: list[str] = []
    got, source = run_catalog(cpu_config, note=notes.append)
    assert len(got.seeds) == len(saved["seeds"]) and source.startswith("the cache")
    assert notes and "transformers 5.17.0, here " in notes[0] and "crawled again" in notes[0]
    # A resume keeps the run's own catalog, and a fitting --seeds file is taken as it is.
    assert run_catalog(cpu_config)[1].startswith("the run's own")
    fresh = SynthConfig(**{**cpu_config.__dict__, "out": tmp_path / "b" / "ds.parquet",
                           "seeds": subdir("synth") / "seeds-cpu.json"})
    assert run_catalog(fresh)[1] == str(fresh.seeds)


def test_the_cli_with_no_time_left_writes_what_it_has_and_says_how_to_go_on(catalog, cpu_config, capsys):
    """--max-seconds 0: the catalog is read, no candidate starts (and no service), the dataset and
    the summary are written, and the run can be resumed."""
    cmd = typer.main.get_command(synth_app)
    cmd(["--out", str(cpu_config.out), "--count", "1", "--device", "cpu", "--quiet", "--json", "--kernelbench", "none",
         "--hf-families", ",".join(HF_FAMILIES), "--max-seconds", "0"], standalone_mode=False)
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["stopped_at_limit"] and summary["accepted"] == 0 and summary["cancelled"] == 0
    assert cpu_config.out.exists() and (cpu_config.state_dir / "summary.md").exists()
    assert json.loads((cpu_config.state_dir / "config.json").read_text())["max_seconds"] == 0


def test_a_resume_with_another_mix_is_refused_in_one_line(cpu_config):
    from dataclasses import replace

    from cuda_agent.synth.mix import Mix
    from cuda_agent.synth.pipeline import _check_resume

    _check_resume(cpu_config)   # the run starts with the default mix (kernelbench)
    _check_resume(replace(cpu_config, count=5))   # a resume may ask for more tasks
    for other, said in [(None, "free"), (Mix({"conv": 0.6, "norm": 0.4}), "conv=0.6,norm=0.4")]:
        with pytest.raises(SynthError) as refused:
            _check_resume(replace(cpu_config, mix=other))
        text = str(refused.value)
        assert "\n" not in text and f"started with --mix kernelbench, not --mix {said}" in text, text
        assert "resume with the same --mix, or write to another --out" in text


def test_a_resumed_run_keeps_the_timing_plan_it_started_with(cpu_config):
    """A set's figures are all timed alike: a resume under a newer default plan goes on with the run's own,
    and says so."""
    from dataclasses import replace

    from cuda_agent.synth.pipeline import _check_resume

    started = _check_resume(cpu_config)
    said = []
    newer = replace(cpu_config, timing=cpu_config.timing.with_budget(cpu_config.timing.budget_s * 3))
    resumed = _check_resume(newer, said.append)
    assert resumed.timing == started.timing != newer.timing
    assert len(said) == 1 and "with the timing plan it started with" in said[0]
    assert json.loads((cpu_config.state_dir / "config.json").read_text())["timing"] == started.timing.to_dict()


def test_retime_times_a_resumes_new_candidates_with_the_new_plan_and_keeps_the_old_ones(cpu_config):
    """--retime: the resume goes on with its own plan, says so, and config.json keeps the run's earlier
    plans oldest first, across later resumes with or without the flag."""
    from dataclasses import replace

    from cuda_agent.synth.pipeline import _check_resume

    first = _check_resume(cpu_config).timing
    second = first.with_budget(first.budget_s / 3)
    said = []
    resumed = _check_resume(replace(cpu_config, timing=second, retime=True), said.append)
    assert resumed.timing == second and resumed.timings_before == (first.to_dict(),)
    assert len(said) == 1 and f"plan {second.key()}" in said[0] and f"plan {first.key()}" in said[0]
    saved = json.loads((cpu_config.state_dir / "config.json").read_text())
    assert saved["timing"] == second.to_dict() and saved["timings_before"] == [first.to_dict()]
    assert "retime" not in saved   # what one call asked for, not the run's state
    # a later resume without the flag keeps the newest plan and the history
    again = _check_resume(cpu_config, said.append)
    assert again.timing == second and again.timings_before == (first.to_dict(),)
    third = first.with_budget(first.budget_s * 2)
    last = _check_resume(replace(cpu_config, timing=third, retime=True))
    assert last.timings_before == (first.to_dict(), second.to_dict())
    # the same plan again: nothing to retime, the history unchanged
    assert _check_resume(replace(cpu_config, timing=third, retime=True)).timings_before == last.timings_before


def test_a_timing_plans_key_names_equal_plans_alike():
    from cuda_agent.measure import TimingPlan

    plan = TimingPlan(budget_s=0.1)
    assert plan.key() == TimingPlan.from_dict(plan.to_dict()).key() == TimingPlan(budget_s=0.1).key()
    assert plan.key() != plan.with_budget(0.3).key() and len(plan.key()) == 10


def test_config_json_reads_back_as_the_config_it_was_written_from(cpu_config):
    from dataclasses import replace

    from cuda_agent.synth.filters import Window
    from cuda_agent.synth.pipeline import _config_json, config_from_json

    config = replace(cpu_config, window=cpu_config.resolved_window(), hf_families=("llama", "bert"),
                     seeds=cpu_config.out.parent / "seeds.json", timings_before=(cpu_config.timing.to_dict(),))
    back = config_from_json(json.loads(json.dumps(_config_json(config))))
    assert back == config
    assert config_from_json(_config_json(config), count=7, max_seconds=0.0) == replace(config, count=7, max_seconds=0.0)
    free = replace(cpu_config, mix=None, window=Window(0.5, 5.0))
    assert config_from_json(_config_json(free)) == free


def test_the_summary_counts_tasks_by_timing_plan_only_when_a_run_had_several():
    """A record that names no plan (accepted before plans were named) was timed with the run's first plan: a run
    that never retimed reads as one plan, whichever of its records name it."""
    from cuda_agent.measure import TimingPlan
    from cuda_agent.synth.report import summary_markdown

    def task(i, plan=None):
        rec = {"index": i, "filter": "accepted", "eager_ms": 2.0, "ops": ["Linear"], "categories": ["gemm"],
               "task_class": "gemm"}
        return {**rec, "timing_plan": plan.key()} if plan else rec

    old, new = TimingPlan(budget_s=0.3), TimingPlan(budget_s=0.1)
    never = [task(0), task(1), task(2, old)]
    assert "timing plan" not in summary_markdown(never, never, "t", timing_plans=[old])
    mixed = [task(0), task(1), task(2, new), task(3, new), task(4, new)]
    text = summary_markdown(mixed, mixed, "t", timing_plans=[old, new])
    assert (f"several timing plans, oldest first: plan {old.key()} (0.3 s of calls): 2, plan {new.key()} "
            f"(0.1 s of calls): 3 tasks") in text, text


def test_synth_take_writes_the_set_from_a_journal_and_nothing_when_the_journal_is_short(tmp_path):
    """benchmarks/synth_take.py on a copy of the committed 1,000-task run: the same set again from its
    journal, on a machine without its device; asked for more than the journal holds, it writes nothing."""
    import importlib.util
    import shutil

    pq = pytest.importorskip("pyarrow.parquet")
    root = Path(__file__).resolve().parents[2]
    state = tmp_path / "ops.synth"
    shutil.copytree(root / "benchmarks" / "synth_h100_1k" / "ops.synth", state)
    config = (state / "config.json").read_text()
    spec = importlib.util.spec_from_file_location("synth_take", root / "benchmarks" / "synth_take.py")
    take = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(take)
    out = tmp_path / "ops.parquet"
    assert take.main(["--out", str(out), "--count", "1300"]) == 1  # the journal has 1,169 accepted
    assert not out.exists() and (state / "config.json").read_text() == config
    assert take.main(["--out", str(out), "--count", "1000"]) == 0
    ours, committed = (pq.read_table(p).to_pylist() for p in (out, root / "benchmarks" / "synth_h100_1k" / "ops.parquet"))
    assert [r["name"] for r in ours] == [r["name"] for r in committed]
    assert (state / "config.json").read_text() == config
