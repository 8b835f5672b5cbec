"""The tools on a real workspace (CPU layout), with the harness replaced by FakeEvaluator."""

from __future__ import annotations

import json
import time

import pytest

from .fakes import FAST_MODEL_NEW


def run(tools, name, **args):
    return tools.execute(name, json.dumps(args))


def test_read_file_numbers_lines_and_pages(tools, workspace):
    (workspace / "kernels" / "long.txt").write_text("".join(f"line {i}\n" for i in range(1, 1201)))
    whole = run(tools, "read_file", path="model.py").text
    assert whole.splitlines()[0] == "     1\timport torch"
    first = run(tools, "read_file", path="kernels/long.txt").text
    assert "   500\tline 500" in first and "line 501" not in first and "lines 1-500 of 1200" in first
    part = run(tools, "read_file", path="kernels/long.txt", start_line=1199, end_line=1300).text
    assert part.splitlines() == ["  1199\tline 1199", "  1200\tline 1200", "[lines 1199-1200 of 1200; pass "
                                 "start_line and end_line for others]"]
    assert run(tools, "read_file", path="kernels").text.splitlines() == ["long.txt", "relu.cpp", "relu_binding.cpp"]


def test_paths_outside_the_workspace_are_refused(tools, workspace, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("seed=42")
    (workspace / "kernels" / "link.txt").symlink_to(secret)
    for path in ("../secret.txt", str(secret), "kernels/link.txt"):
        obs = run(tools, "read_file", path=path)
        assert obs.text.startswith("Error:") and "outside the workspace" in obs.text, path
    assert "outside the workspace" in run(tools, "write_file", path="../x.py", content="").text
    assert not (tmp_path / "x.py").exists()


def test_protected_files_cannot_be_written(tools, workspace):
    original = (workspace / "model.py").read_text()
    (workspace / "kernels" / "alias.py").symlink_to(workspace / "model.py")
    for path in ("model.py", "./SKILL.md", "binding.cpp", "utils/verify.sh", "utils/new.sh",
                 ".cuda_agent/manifest.json", "kernels/alias.py"):
        obs = run(tools, "write_file", path=path, content="hacked")
        assert obs.text.startswith("Error:") and "protected" in obs.text, path
    assert "protected" in run(tools, "edit_file", path="model.py", old_str="torch", new_str="x").text
    assert (workspace / "model.py").read_text() == original


def test_edit_file_replaces_one_exact_occurrence(tools, workspace):
    f = workspace / "kernels" / "k.cpp"
    f.write_text("int a = 1;\nint b = 1;\n")
    missing = run(tools, "edit_file", path="kernels/k.cpp", old_str="int c", new_str="x").text
    assert missing.startswith("Error: old_str was not found")
    ambiguous = run(tools, "edit_file", path="kernels/k.cpp", old_str="= 1;", new_str="= 2;").text
    assert "occurs 2 times" in ambiguous and "lines 1, 2" in ambiguous
    assert f.read_text() == "int a = 1;\nint b = 1;\n"
    ok = run(tools, "edit_file", path="kernels/k.cpp", old_str="int b = 1;", new_str="int b = 2;")
    assert not ok.text.startswith("Error") and f.read_text() == "int a = 1;\nint b = 2;\n"


def test_write_file_creates_folders(tools, workspace):
    obs = run(tools, "write_file", path="kernels/sub/new.cu", content="a\nb")
    assert obs.text == "wrote kernels/sub/new.cu (2 lines)"
    assert (workspace / "kernels" / "sub" / "new.cu").read_text() == "a\nb"


def test_search_finds_lines_by_regex(tools):
    hits = run(tools, "search", pattern=r"extern \"C\"", path="kernels").text.splitlines()
    assert hits == ['kernels/relu.cpp:5: extern "C" void relu_launch(const float* x, float* y, long long n, int config) {',
                    'kernels/relu_binding.cpp:7: extern "C" void relu_launch(const float* x, float* y, long long n, int config);']
    assert run(tools, "search", pattern="no_such_thing").text.startswith("no match")
    assert "invalid regular expression" in run(tools, "search", pattern="(").text


def test_bash_runs_in_the_workspace_and_reports_the_exit_code(tools):
    obs = run(tools, "bash", command="ls model.py; echo $HOME; exit 3")
    lines = obs.text.splitlines()
    assert lines[0] == "model.py" and lines[1] == str(tools.root) and lines[-1] == "[exit code 3]"


def test_bash_output_keeps_head_and_tail(tools):
    text = run(tools, "bash", command="seq 1 100000").text
    assert text.startswith("1\n2\n3\n") and text.rstrip().endswith("99999\n100000\n[exit code 0]")
    assert "omitted from the middle of this output" in text
    assert len(text) < tools.limits.max_output_chars + 400


@pytest.mark.slow
def test_bash_timeout_stops_everything_the_command_started(tools, workspace):
    tools.limits = type(tools.limits)(**{**vars(tools.limits), "bash_timeout_s": 1})
    start = time.monotonic()
    obs = run(tools, "bash", command="(sleep 5; touch late.txt) & sleep 30")
    assert time.monotonic() - start < 5
    assert "timed out after 1 s" in obs.text
    time.sleep(5)
    assert not (workspace / "late.txt").exists(), "a background process outlived the command"


def test_malformed_arguments_come_back_as_observations(tools):
    bad_json = tools.execute("read_file", '{"path": "model.py"')
    assert bad_json.text.startswith("Error: the arguments of read_file are not valid JSON")
    assert "Error: there is no tool named 'cat'" in tools.execute("cat", "{}").text
    assert "missing: path" in tools.execute("read_file", "{}").text
    assert "unknown: lines" in run(tools, "read_file", path="model.py", lines=3).text
    assert "`start_line` must be an integer" in run(tools, "read_file", path="model.py", start_line="3").text
    assert "must be a JSON object" in tools.execute("bash", '["ls"]').text
    assert tools.execute("", '{"name": ').text.startswith("Error: there is no tool named ''")


def test_harness_failures_come_back_as_observations(tools):
    def broken(profile, keep):
        raise NotImplementedError("evaluate_workspace is not there yet")

    tools.evaluator.evaluate = broken
    obs = tools.execute("verify", "")
    assert obs.text.startswith("Error: the verify tool failed inside cuda-agent (NotImplementedError")
    assert "not caused by your code" in obs.text and "NotImplementedError" in obs.record["error"]


def test_workspace_commands_in_bash_go_to_the_harness(tools):
    for command in ("bash utils/compile.sh", "./utils/verify.sh", "sh utils/profile.sh "):
        tools.execute("bash", json.dumps({"command": command}))
    assert tools.evaluator.calls == ["compile", "verify", "profile"]


def test_only_verified_solutions_are_kept_and_only_better_ones_replace(tools, workspace):
    keeper = tools.keeper
    wrong = run(tools, "verify")
    assert "verify: FAILED at stage 'correctness'" in wrong.text and "nothing verified yet" in wrong.text
    assert keeper.best is None and not keeper.dir.exists()

    (workspace / "model_new.py").write_text(FAST_MODEL_NEW)
    (workspace / "kernels" / "fast.cpp").write_text("// v1")
    first = run(tools, "verify")
    assert "verify: PASSED" in first.text and "new best verified solution, kept: reward 1" in first.text
    assert (keeper.dir / "kernels" / "fast.cpp").read_text() == "// v1"

    profiled = run(tools, "profile")
    assert "speed-up: 3.00x vs eager, 1.50x vs torch.compile" in profiled.text
    assert "reward: 3 (faster_than_compile)" in profiled.text and keeper.best.action == "profile"

    # A slower version verifies, but the faster one stays the result; so does a broken one.
    tools.evaluator.speedup = 1.2
    (workspace / "kernels" / "fast.cpp").write_text("// v2, slower")
    assert "best verified solution: reward 3" in run(tools, "profile").text
    (workspace / "model_new.py").write_text("broken")
    run(tools, "verify")
    assert (keeper.dir / "kernels" / "fast.cpp").read_text() == "// v1"
    assert keeper.best.speedup_vs_compile == 1.5 and keeper.evaluations == 5
    state = json.loads(keeper.state.read_text())
    assert state["best"]["evaluation"] == 3 and len(state["profiled"]) == 2


def test_the_snapshot_holds_what_the_harness_evaluates_and_no_build_outputs(tools, workspace):
    (workspace / "model_new.py").write_text(FAST_MODEL_NEW)
    (workspace / "extra.cu").write_text("// a source at the root is part of the solution too")
    (workspace / "notes.txt").write_text("not a source")
    (workspace / "kernels" / "build").mkdir()
    (workspace / "kernels" / "build" / "x.o").write_text("obj")
    (workspace / "kernels" / "fast.so").write_text("so")
    run(tools, "verify")
    files = sorted(p.relative_to(tools.keeper.dir).as_posix() for p in tools.keeper.dir.rglob("*") if p.is_file())
    assert files == ["extra.cu", "kernels/relu.cpp", "kernels/relu_binding.cpp", "model_new.py"]
