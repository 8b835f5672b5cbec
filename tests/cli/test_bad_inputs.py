"""Every command of `cuda-agent`, with the mistakes a user makes: never a traceback, a non-zero exit,
and for a mistake found by our checks one line that says what to do, before any work starts.

The commands are read from the typer app, so a new command fails `test_every_command_has_bad_inputs`
until its bad inputs are added to CASES. Issue 26 listed the tracebacks these replace."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from cuda_agent.cli import app

REPO = Path(__file__).resolve().parents[2]
TASK = str(REPO / "tests" / "hacks" / "tasks" / "sbr_small.py")
SOLUTION = str(REPO / "tests" / "hacks" / "cpu" / "honest_fused")
BUNDLED_SOLUTIONS = str(REPO / "benchmarks" / "solutions")   # scale_bias_relu_cpu/, _cuda/: names no task has
CPU_ONLY = not __import__("torch").cuda.is_available()

# (arguments, what the one line says); FILE is an existing file, DIR (and DIR.parquet) an existing folder, BAD_TOML an
# agent config with max_turns = "ten", BAD_JSON a file that is not JSON, BAD_RUN a run file with gpus: two
# (read before verl is imported, so this holds without the rl extra too).
# A case whose text starts with "error:" is one of our own checks: one line, exit status 2.
CASES: dict[tuple[str, ...], list[tuple[list[str], str]]] = {
    (): [(["--no-such-option"], "No such option")],
    ("eval",): [
        (["eval", "--task", TASK, "--solution", SOLUTION, "--device", "tpu"], "error: --device tpu: unknown device"),
        (["eval", "--task", TASK, "--solution", SOLUTION, "--device", "cuda"], "error: --device cuda:"),
        (["eval", "--task", TASK, "--solution", "no/such/solution"], "error: --solution no/such/solution"),
        (["eval", "--task", "FILE", "--solution", SOLUTION], "error: FILE: a task file must be a .py file"),
        (["eval", "--task", TASK, "--solution", SOLUTION, "--policy", "lax"], "error: --policy lax"),
        (["eval", "--task", TASK, "--solution", SOLUTION, "--trials", "0"], "Invalid value for '--trials'"),
        (["eval", "--task", TASK, "--solution", SOLUTION, "--timing-budget", "0"], "is not more than 0"),
    ],
    ("peaks",): [
        (["peaks", "--device", "tpu"], "error: --device tpu: unknown device; use --device cuda or --device cpu"),
        (["peaks", "--device", "cuda"], "error: --device cuda:"),
    ],
    ("workspace",): [
        (["workspace", TASK, "FILE"], "error: DEST FILE is a file, and a folder is needed here"),
        (["workspace", TASK, "/proc/ws"], "error: DEST /proc/ws: cannot write in /proc"),
        (["workspace", TASK, "ws", "--device", "tpu"], "error: --device tpu: unknown device"),
        (["workspace", "no_such_task", "ws"], "error: no task named 'no_such_task'"),
    ],
    ("workspace-compile",): [(["workspace-compile", "DIR"], "error: DIR/.cuda_agent/manifest.json: missing")],
    ("workspace-verify",): [(["workspace-verify", "DIR"], "missing or unreadable workspace manifest")],
    ("workspace-profile",): [(["workspace-profile", "DIR"], "missing or unreadable workspace manifest")],
    ("bench",): [
        (["bench", "--tasks", "examples", "--solutions", "DIR", "--out", "FILE"], "error: --out FILE is a file"),
        (["bench", "--tasks", "examples", "--solutions", "DIR", "--out", "b", "--device", "tpu"],
         "error: --device tpu: unknown device"),
        (["bench", "--tasks", "examples", "--solutions", "DIR", "--out", "b", "--device", "cpu"],
         "error: --solutions DIR: no solution for any of the 1 selected tasks: the folder is empty"),
        (["bench", "--tasks", "examples", "--solutions", BUNDLED_SOLUTIONS, "--out", "b", "--device", "cpu"],
         "looks like scale_bias_relu's solution under another name"),
        (["bench", "--tasks", "examples", "--out", "b"], "error: give exactly one of --solutions DIR"),
        (["bench", "--tasks", "examples", "--solutions", "DIR", "--out", "b", "--policy", "lax"], "error: --policy lax"),
        (["bench", "--tasks", "no/such/source", "--solutions", "DIR", "--out", "b", "--device", "cpu"],
         "error: no/such/source: no such file or folder"),
        (["bench", "--tasks", "examples", "--solutions", "DIR", "--out", "b", "--max-seconds", "-1"],
         "Invalid value for '--max-seconds'"),
    ],
    ("baselines",): [
        (["baselines", "--tasks", "examples", "--out", "DIR"], "error: --out DIR is a folder, and a file is needed"),
        (["baselines", "--tasks", "examples", "--out", "b.jsonl", "--device", "tpu"], "error: --device tpu"),
        (["baselines", "--tasks", "examples", "--out", "b.jsonl", "--workers", "0"], "Invalid value for '--workers'"),
        (["baselines", "--tasks", "examples", "--out", "b.jsonl", "--device", "cpu", "--published", "BAD_JSON"],
         "error: BAD_JSON: cannot read published timings"),
        (["baselines", "--tasks", "examples", "--out", "b.jsonl", "--budget", "0"], "is not more than 0"),
    ],
    ("demo",): [
        (["demo", "--out", "FILE"], "error: --out FILE is a file"),
        (["demo", "--device", "tpu"], "error: --device tpu: unknown device"),
    ],
    ("optimize",): [
        (["optimize", TASK, "--config", "BAD_TOML", "--policy", "replay:FILE"],
         "error: BAD_TOML: limits.max_turns: expected an integer, got 'ten'"),
        (["optimize", TASK, "--policy", "replay:FILE"], "error: FILE:1: not a JSON line"),
        (["optimize", TASK, "--policy", "replay:FILE", "--out", "FILE"], "error: --out FILE is a file"),
        (["optimize", TASK, "--policy", "replay:FILE", "--device", "tpu"], "error: --device tpu"),
        (["optimize", "--policy", "replay:FILE"], "error: give a TASK, or --tasks SOURCE for many"),
        (["optimize", "no_such_task.py", "--policy", "replay:FILE"], "error:"),
        (["optimize", TASK, "--policy", "gpt", "--max-turns", "0"], "Invalid value for '--max-turns'"),
        (["optimize", TASK, "--policy", "gpt", "--max-seconds", "0"], "is not more than 0"),
    ],
    ("train",): [
        (["train", "warmpu", "--config", "x.yaml"], "error: unknown stage 'warmpu'"),
        (["train", "warmup", "--config", "BAD_RUN"], "error: BAD_RUN: gpus: expected an integer, got 'two'"),
    ],
    ("tasks",): [(["tasks", "--no-such-option"], "No such option")],
    ("tasks", "list"): [(["tasks", "list", "no/such/source"], "error: no/such/source: no such file or folder")],
    ("tasks", "show"): [(["tasks", "show", "examples", "nope"], "error: no task named 'nope'")],
    ("synth",): [
        (["synth", "--out", "x.parquet", "--device", "cuda"], "error: --device cuda:"),
        (["synth", "--out", "x.parquet", "--device", "tpu"], "error: --device tpu: unknown device"),
        (["synth", "--out", "x.parquet", "--device", "cpu", "--seeds", "BAD_JSON"],
         "error: --seeds BAD_JSON: not a seed catalog (not valid JSON"),
        (["synth", "--out", "x.parquet", "--device", "cpu", "--seeds", "no_such.json"], "error: --seeds no_such.json"),
        (["synth", "--out", "DIR.parquet", "--device", "cpu"], "error: --out DIR.parquet is a folder"),
        (["synth", "--out", "/proc/x.jsonl", "--device", "cpu"], "error: --out /proc/x.jsonl: cannot write in /proc"),
        (["synth", "--out", "x.jsonl", "--device", "cpu", "--composer", "magic"], "error: --composer magic"),
        (["synth", "--out", "x.jsonl", "--device", "cpu", "--window", "1"], "error: --window '1'"),
        (["synth", "--out", "x.jsonl", "--device", "cpu", "--mix", "conv=x"], "error: --mix 'conv=x'"),
        (["synth", "--out", "x.jsonl", "--device", "cpu", "--kernelbench", "no_such.jsonl"],
         "error: --kernelbench no_such.jsonl: no such file"),
        (["synth", "--out", "x.jsonl", "--count", "0"], "Invalid value for '--count'"),
        (["synth", "--out", "x.jsonl", "--similarity", "2"], "Invalid value for '--similarity'"),
        (["synth", "--out", "x.jsonl", "--max-seconds", "-1"], "Invalid value for '--max-seconds'"),
        (["synth"], "error: give --out DATASET"),
    ],
    ("synth", "seeds"): [(["synth", "seeds", "--device", "tpu"], "error: --device tpu: unknown device")],
    ("cache",): [(["cache", "--no-such-option"], "No such option")],
    ("cache", "prune"): [(["cache", "prune", "--max-size", "lots"], "'lots' is not a size")],
}
CUDA_CASES = {"error: --device cuda:"}   # a GPU machine takes --device cuda


def commands() -> list[tuple[str, ...]]:
    """Every command path of the app, groups included (hidden ones too)."""
    found = []

    def walk(cmd, path):
        found.append(path)
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, (*path, name))

    walk(typer.main.get_command(app), ())
    return found


def test_every_command_has_bad_inputs():
    missing = [" ".join(p) for p in commands() if p not in CASES]
    assert not missing, f"add bad inputs for `cuda-agent {missing[0]}` (and {len(missing) - 1} more) to CASES"
    assert not [p for p in CASES if p not in commands()], "CASES names a command the app does not have"


@pytest.fixture
def place(tmp_path, monkeypatch):
    """A working folder with the files the cases name; a fake model endpoint is never reached."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "FILE").write_text("not a folder\n")
    (tmp_path / "DIR").mkdir()
    (tmp_path / "DIR.parquet").mkdir()
    (tmp_path / "BAD_TOML").write_text('[limits]\nmax_turns = "ten"\n')
    (tmp_path / "BAD_JSON").write_text("{not json\n")
    (tmp_path / "BAD_RUN").write_text("out: o\nmodel: m\ngpus: two\n")
    for var in ("CUDA_AGENT_DEVICE", "CUDA_AGENT_KERNELBENCH", "RAY_ADDRESS"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def run(args: list[str]):
    result = CliRunner().invoke(app, args)
    said = result.output + (result.stderr if result.stderr_bytes and result.stderr not in result.output else "")
    return result, said


@pytest.mark.parametrize("args, message", [case for cases in CASES.values() for case in cases],
                         ids=lambda v: " ".join(v)[:70] if isinstance(v, list) else None)
def test_a_bad_input_is_said_without_a_traceback(place, args, message):
    if message in CUDA_CASES and not CPU_ONLY:
        pytest.skip("this machine has a GPU: --device cuda is right here")
    t0 = time.monotonic()
    result, said = run(args)
    assert result.exception is None or isinstance(result.exception, SystemExit), said
    assert "Traceback" not in said and result.exit_code != 0, said
    assert message in " ".join(said.replace("│", " ").split()), said
    if message.startswith("error:"):
        lines = [line for line in said.splitlines() if line.strip()]
        assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error:"), said
    assert time.monotonic() - t0 < 20, "a mistake must be said before any work starts"


@pytest.mark.parametrize("args, module, extra", [
    (["bench", "--tasks", "examples", "--solutions", "DIR", "--out", "b"], "matplotlib", "pip install matplotlib"),
    (["synth", "--out", "x.parquet", "--device", "cpu"], "pyarrow", "pip install pyarrow"),
])
def test_a_missing_package_is_said_before_any_work(place, monkeypatch, args, module, extra):
    """The plain set-up installs both; an environment without them is told at once, not after the run."""
    monkeypatch.setitem(sys.modules, module, None)     # `import module` now fails
    result, said = run(args)
    assert result.exit_code == 2 and f"with {module}, which is not installed: {extra}" in said, said
    assert not (place / "b").exists() and not (place / "x.synth").exists()


def test_a_bug_of_ours_keeps_its_traceback(place, monkeypatch):
    """Only a user's mistake becomes one line: an exception of the program's own is not hidden."""
    import cuda_agent.cli.tasks as tasks_cli

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(tasks_cli, "load_tasks", broken)
    result = CliRunner().invoke(app, ["tasks", "list", "examples"])
    assert isinstance(result.exception, RuntimeError) and result.exit_code == 1
