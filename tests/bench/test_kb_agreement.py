"""benchmarks/kb_agreement.py and kb_driver.py on the CPU: KernelBench's side through a real driver
process on a fake checkout (kb_fake.py: the real eval function's signature and result object), so
the subprocess, its JSON, time-outs, crashes and stubbed imports are exercised for real; the
solution sources; the build-ahead and resume of the loop; the command end to end."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import time
from pathlib import Path

import pytest

from cuda_agent.bench.agreement import AGREE, DISAGREE, HACK, NO_VERDICT, classify
from cuda_agent.tasks import Task, load_tasks

from .kb_fake import make_checkout, solution

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
SMALL_TASK = (Path(__file__).resolve().parents[1] / "hacks" / "tasks" / "sbr_small.py").read_text()


def script(name: str):
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


ka = script("kb_agreement")
kbd = script("kb_driver")


@pytest.fixture
def checkout(tmp_path) -> Path:
    return make_checkout(tmp_path / "KernelBench")


def kb_for(checkout: Path, out: Path, **kw):
    return kbd.KernelBench(checkout, out, settings={"num_correct_trials": 5, "num_perf_trials": 100}, **kw)


def call(kb, tmp_path: Path, directive: str, mode: str = "eval") -> dict:
    sol = tmp_path / f"sol_{abs(hash(directive))}.py"
    sol.write_text(solution(directive))
    return kb.call(mode, tmp_path / "row" / mode, SMALL_TASK, sol)


def test_kernelbench_verdict_and_its_own_speed_up_come_back_through_the_driver(checkout, tmp_path):
    result = call(kb_for(checkout, tmp_path), tmp_path, "pass 6.0 2.0")
    s = kbd.kb_side(result)
    assert s["status"] == "pass" and s["speedup"] == pytest.approx(3.0) and s["ref_ms"] == 6.0
    assert result["metadata"]["trials_asked"] == 5 and result["metadata"]["perf_trials_asked"] == 100
    assert "litellm" in s["stubs"]  # imported by KernelBench's package for its LLM helpers, stubbed here
    assert result["kernelbench_file"].startswith(str(checkout.resolve()))


@pytest.mark.parametrize("directive, status, words", [
    ("mismatch 0.005", "fail", "Output mismatch (max difference 0.005)"),
    ("compile-error", "fail", "nvcc failed"),             # an exception object in the metadata, as str
    ("raise", "fail", "eval raised builtins.ValueError: boom"),
    ("crash", "fail", "the process died (exit -11)"),    # after KernelBench was imported: the solution's
    ("none", "error", "lock-file error"),
])
def test_each_way_kernelbench_can_end_is_a_row(checkout, tmp_path, directive, status, words):
    s = kbd.kb_side(call(kb_for(checkout, tmp_path), tmp_path, directive))
    assert s["status"] == status and words in s["reason"], s
    if directive.startswith("mismatch"):
        assert s["max_difference"] == 0.005


@pytest.mark.slow  # the limit must leave the driver time to import KernelBench on a loaded machine
def test_a_time_out_kills_the_driver_and_fails_the_solution(checkout, tmp_path):
    t0 = time.monotonic()
    s = kbd.kb_side(call(kb_for(checkout, tmp_path, timeout_s=8), tmp_path, "sleep"))
    assert time.monotonic() - t0 < 20   # the fake sleeps 120 s: it was killed
    assert s["status"] == "fail" and s["timed_out"] and "timed out after 8 s" in s["reason"]


def test_a_checkout_without_kernelbench_gives_no_verdict_with_the_log(tmp_path):
    (tmp_path / "empty" / "src").mkdir(parents=True)
    s = kbd.kb_side(call(kb_for(tmp_path / "empty", tmp_path), tmp_path, "pass 1 1"))
    assert s["status"] == "error" and "before KernelBench was imported" in s["reason"]
    assert "ModuleNotFoundError" in s["reason"]


def test_build_ahead_uses_kernelbench_build_compile_cache(checkout, tmp_path):
    kb = kb_for(checkout, tmp_path)
    assert kbd.kb_build_verdict(call(kb, tmp_path, "pass 1 1", "build")) is None
    assert (tmp_path / "row" / "build" / "build" / "built.txt").is_file()
    failed = kbd.kb_build_verdict(call(kb, tmp_path, "pass 1 1 build-fail", "build"))
    assert failed["status"] == "fail" and "nvcc failed" in failed["reason"]


# ---- solutions ----------------------------------------------------------------------------------

def test_hand_written_set_goes_to_kernelbench_as_load_inline_files(kernelbench_jsonl, tmp_path):
    items = ka.hand_written(load_tasks(str(kernelbench_jsonl)), tmp_path)
    assert len(items) == 15
    assert {i.key for i in items if i.note} == {"hand-written/20_LeakyReLU", "hand-written/22_Tanh",
                                                 "hand-written/28_HardSigmoid"}
    for item in items:
        text = item.kb_solution.read_text()
        compile(text, str(item.kb_solution), "exec")
        assert "_load_inline(" in text and "class ModelNew" in text and "PYBIND11_MODULE(TORCH_EXTENSION_NAME" in text
        assert re.search(r"name='(\w+)'", text)  # load_inline's name is the module's: an identifier
    gemm = next(i for i in items if i.key.endswith("76_Gemm_Add_ReLU"))
    assert "cublasSgemm" in gemm.kb_solution.read_text()


def test_a_workspace_with_local_headers_has_no_kernelbench_form(tmp_path):
    ws = tmp_path / "ws"
    (ws / "kernels").mkdir(parents=True)
    (ws / "model_new.py").write_text("import torch.nn as nn\nimport cuda_extension\n\n\nclass ModelNew(nn.Module):\n"
                                     "    pass\n")
    (ws / "kernels" / "k.cuh").write_text("#pragma once\n")
    (ws / "kernels" / "k.cu").write_text('#include "k.cuh"\n')
    item = ka._item("solutions/x", Task(name="x", code=SMALL_TASK, origin="t"), ws, tmp_path / "inline")
    assert item.kb_solution is None and "local headers (k.cuh)" in item.note


def test_cuda_l1_rows_are_judged_on_their_own_reference_the_first_of_each_level(tmp_path):
    tasks_file = tmp_path / "tasks.jsonl"
    tasks_file.write_text(json.dumps({"level": 1, "problem_id": 7, "name": "7_Named", "code": SMALL_TASK}) + "\n")
    rows = [{"level_id": "1", "task_id": "3", "ref_code": SMALL_TASK, "custom_code": "None"},
            {"level_id": "1", "task_id": "7", "ref_code": SMALL_TASK + "# v0\n", "custom_code": "# a\n"},
            {"level_id": "1", "task_id": "8", "ref_code": SMALL_TASK, "custom_code": "# b\n"},
            {"level_id": "2", "task_id": "1", "ref_code": SMALL_TASK, "custom_code": "# c\n"},
            {"level_id": "3", "task_id": "1", "ref_code": SMALL_TASK, "custom_code": "# d\n"}]
    corpus = tmp_path / "h100.json"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    items = ka.cuda_l1(corpus, load_tasks(str(tasks_file)), [1, 2], 1, tmp_path / "out")
    assert [i.key for i in items] == ["cuda-l1/h100/L1_7", "cuda-l1/h100/L2_1"]
    assert items[0].task.name == "7_Named" and items[0].task.code.endswith("# v0\n")
    assert items[1].task.name == "L2_1" and items[0].solution.read_text() == "# a\n"
    assert items[0].kb_solution == items[0].solution


def test_kernelbench_adversarial_kernels_are_read_from_the_checkout(checkout, tmp_path):
    folder = checkout / "src" / "kernelbench" / "unit_tests" / "test_kernels"
    folder.mkdir(parents=True)
    (folder / "zero_out_kernel.py").write_text("# kernel\n")
    tasks_file = tmp_path / "tasks.jsonl"
    tasks_file.write_text(json.dumps({"level": 1, "problem_id": 1, "name": "1_Square", "code": SMALL_TASK}) + "\n")
    [item] = ka.kb_adversarial(checkout, load_tasks(str(tasks_file)))
    assert item.key == "kb-adversarial/zero_out_kernel" and item.task.name == "1_Square"


# ---- the loop -----------------------------------------------------------------------------------

def items_of(tmp_path: Path, directives: dict[str, str]) -> list:
    task = Task(name="sbr_small", code=SMALL_TASK, origin="tests")
    out = []
    for key, directive in directives.items():
        path = tmp_path / "sols" / f"{key}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(solution(directive))
        out.append(ka.Item(key, task, path, path))
    return out


class FakeOurs:
    """Our side, canned per key; counts the calls."""

    def __init__(self, sides: dict[str, dict]):
        self.sides, self.calls = sides, []

    def __call__(self, item) -> dict:
        self.calls.append(item.key)
        return self.sides[item.key]


PASS = {"status": "pass", "reason": "correct", "speedup": 3.1, "ref_ms": 6.0}


@pytest.mark.slow  # four driver processes: 4-6 s on the shared 2-core machine
def test_rows_resume_and_a_side_without_verdict_is_redone(checkout, tmp_path):
    items = items_of(tmp_path, {"a": "pass 6.0 2.0", "b": "mismatch 0.5", "c": "pass 1.0 1.0"})
    ours = FakeOurs({"a": PASS, "b": {"status": "fail", "reason": "wrong"}, "c": {"status": "error", "reason": "x"}})
    out = tmp_path / "out"
    kb = kb_for(checkout, out)
    assert ka.run_rows(items, ours, kb, out, batch=2)
    assert ours.calls == ["a", "b", "c"]
    rows = ka.rows_of(out, items)
    assert [classify(r)[0] for r in rows] == [AGREE, AGREE, NO_VERDICT]
    assert rows[0]["kb"]["speedup"] == pytest.approx(3.0)
    ours.sides["c"] = PASS
    assert ka.run_rows(items, ours, kb, out)
    assert ours.calls == ["a", "b", "c", "c"]
    assert classify(ka.rows_of(out, items)[2])[0] == AGREE
    assert len((out / ka.RESULTS).read_text().splitlines()) == 4


def test_no_row_starts_after_the_deadline(checkout, tmp_path):
    items = items_of(tmp_path, {"a": "pass 1 1"})
    out = tmp_path / "out"
    assert not ka.run_rows(items, FakeOurs({"a": PASS}), kb_for(checkout, out), out, max_seconds=1e-9)
    assert not (out / ka.RESULTS).exists() or not (out / ka.RESULTS).read_text()


def test_builds_ahead_give_verdicts_without_a_second_run(checkout, tmp_path):
    items = items_of(tmp_path, {"a": "pass 1 1 build-fail", "b": "pass 2.0 1.0"})
    out = tmp_path / "out"
    ours = FakeOurs({"a": PASS, "b": PASS})
    static_fail = {"status": "fail", "stage": "static", "reason": "rule broken", "findings": [], "rules": []}
    prebuild = FakeOurs({"a": None, "b": static_fail})
    assert ka.run_rows(items, ours, kb_for(checkout, out), out, prebuild=prebuild, build_workers=2)
    assert ours.calls == ["a"] and sorted(prebuild.calls) == ["a", "b"]
    a, b = ka.rows_of(out, items)
    assert a["kb"]["reason"].startswith("compile failed (build_compile_cache)")
    assert not (out / "kb" / "a" / "eval.json").exists()   # KernelBench's verdict came from its build
    assert classify(a) == (DISAGREE, "build") and classify(b) == (DISAGREE, "policy")


@pytest.mark.slow  # imports torch and the harness, two runs of the command: about 5 s
def test_command_end_to_end_with_our_harness_on_cpu(checkout, tmp_path, capsys):
    tasks_file = tmp_path / "tasks.jsonl"
    tasks_file.write_text(json.dumps({"level": 1, "problem_id": 1, "name": "1_Sbr", "code": SMALL_TASK}) + "\n")
    sols = tmp_path / "solutions"
    sols.mkdir()
    (sols / "1_Sbr.py").write_text(  # the current stream moved: our static checks refuse it, the fake KernelBench passes it
        "# fake: pass 40.0 1.0\nimport torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
        "    def __init__(self, *args):\n        super().__init__()\n        self.side = torch.cuda.Stream()\n\n"
        "    def forward(self, x, scale, bias):\n        torch.cuda.set_stream(self.side)\n"
        "        return torch.relu(x * scale + bias)\n")
    out = tmp_path / "out"
    argv = ["--kernelbench", str(checkout), "--out", str(out), "--solutions", str(sols), "--tasks", str(tasks_file),
            "--device", "cpu", "--build-workers", "2"]
    assert ka.main(argv) == 0
    printed = capsys.readouterr().out
    assert f"| {HACK} | 1 |" in printed and "excessive speed-up flagged" in printed
    assert (out / "agreement.md").read_text() in printed
    meta = json.loads((out / "meta.json").read_text())
    assert "(the pinned commit)" in meta["KernelBench"]
    assert ka.main(argv) == 0 and len((out / ka.RESULTS).read_text().splitlines()) == 1  # resumed: nothing to do


def test_wheels_that_do_not_install_leave_the_drivers_stand_in(tmp_path, capsys):
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "broken-1.0-py3-none-any.whl").write_bytes(b"not a zip")
    assert ka.install_wheels(tmp_path / "wheels", tmp_path / "site") is None
    assert "did not install" in capsys.readouterr().err
    (tmp_path / "none").mkdir()
    assert ka.install_wheels(tmp_path / "none", tmp_path / "site2") == tmp_path / "site2"   # nothing to install


@pytest.mark.slow  # three runs of the command with the harness imported: about 6 s
def test_shards_judge_each_solution_once_and_their_rows_are_collected_into_one_table(checkout, tmp_path, capsys):
    """One run a GPU: `--shard K/N` judges every N-th solution; `--collect ... --report` puts the shards' rows
    in the main folder and writes the table over every solution, judging nothing itself."""
    side_stream = ("# fake: pass 40.0 1.0\nimport torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
                   "    def __init__(self, *args):\n        super().__init__()\n        self.side = torch.cuda.Stream()\n\n"
                   "    def forward(self, x, scale, bias):\n        torch.cuda.set_stream(self.side)\n"
                   "        return torch.relu(x * scale + bias)\n")
    tasks_file = tmp_path / "tasks.jsonl"
    sols = tmp_path / "solutions"
    sols.mkdir()
    names = [f"{i}_Sbr" for i in (1, 2, 3)]
    tasks_file.write_text("".join(json.dumps({"level": 1, "problem_id": i + 1, "name": n, "code": SMALL_TASK}) + "\n"
                                  for i, n in enumerate(names)))
    for n in names:
        (sols / f"{n}.py").write_text(side_stream)
    base = ["--kernelbench", str(checkout), "--solutions", str(sols), "--tasks", str(tasks_file), "--device", "cpu",
            "--build-workers", "0"]
    shards = [tmp_path / f"s{k}" for k in (0, 1)]
    for k, shard in enumerate(shards):
        assert ka.main(base + ["--out", str(shard), "--shard", f"{k}/2"]) == 0
    judged = [sorted(ka.finished(s / ka.RESULTS)) for s in shards]
    assert sum(len(j) for j in judged) == 3 and not set(judged[0]) & set(judged[1])
    capsys.readouterr()
    out = tmp_path / "out"
    assert ka.main(base + ["--out", str(out), "--collect", *map(str, shards), "--report"]) == 0
    printed = capsys.readouterr().out
    assert "3 rows collected from 2 shards" in printed and "3 of 3 rows" in printed and "not finished" not in printed
    assert f"| {HACK} | 3 |" in (out / "agreement.md").read_text()
    assert ka.collect(out, shards) == 0  # collected again: nothing new
    with pytest.raises(SystemExit):
        ka.parse(base + ["--out", str(out), "--shard", "2/2"])
