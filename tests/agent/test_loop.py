"""The loop end to end against a real HTTP server speaking the OpenAI chat API, with the harness
replaced by FakeEvaluator: tool calls, malformed calls, rate limits, timeouts, budgets, resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from cuda_agent.agent.config import override
from cuda_agent.agent.run import optimize
from cuda_agent.agent.trajectory import read_messages, read_records

from .fakes import FAST_MODEL_NEW, ChatServer, FakeEvaluator, error, reply, slow

TESTS = Path(__file__).resolve().parent.parent
WRITE_FAST = ("write_file", {"path": "model_new.py", "content": FAST_MODEL_NEW})


def run(task, tmp_path, config, script, **kwargs):
    out = tmp_path / "out"
    with ChatServer(script) as server:
        result = optimize(task, model="test-model", base_url=server.url, device="cpu", out=out, config=config,
                          evaluator=lambda ws, device, timing: FakeEvaluator(ws), **kwargs)
    return result, server, out


def test_a_scripted_run_ends_with_the_verified_solution(task, tmp_path, fast_config):
    config = override(fast_config, model={"timeout_s": 0.5})
    script = [
        error(429, "slow down"),
        reply("Reading.", ("read_file", {"path": "model.py"}), ("bash", {"command": "ls kernels"})),
        slow(3.0, reply("this answer comes too late")),
        reply("", ("write_file", '{"path": "model_new.py", "content": ')),          # malformed arguments
        reply("Fixed.", WRITE_FAST, ("verify", {})),
        reply('Now timing it.\n<tool_call>{"name": "profile", "arguments": {}}</tool_call>'),  # as text
        reply("Done: 1.5x faster than torch.compile."),
    ]
    result, server, out = run(task, tmp_path, config, script)

    assert (result.status, result.turns, result.correct, result.reward) == ("done", 5, True, 3.0)
    assert (result.speedup_vs_eager, result.speedup_vs_compile) == (3.0, 1.5)
    assert (result.tokens, result.prompt_tokens) == (600, 500)
    assert len(server.requests) == 7, "the 429 and the timeout were each retried once"
    report = json.loads((out / "report.json").read_text())
    for key in ("reward", "correct", "speedup_vs_eager", "speedup_vs_compile", "turns", "tokens", "seconds"):
        assert key in report
    assert "verified: reward 3 (faster_than_compile)" in (out / "report.md").read_text()
    assert (out / "solution" / "model_new.py").read_text() == FAST_MODEL_NEW

    messages = read_messages(out / "trajectory.jsonl")
    assert [m["role"] for m in messages[:2]] == ["system", "user"]
    assert messages[0]["content"].startswith("# Skill: make `scale_bias_relu` fast")
    calls = {c["id"]: c["function"]["name"] for m in messages for c in m.get("tool_calls", [])}
    answers = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
    assert set(calls) == set(answers), "every tool call has its result"
    assert list(calls.values()) == ["read_file", "bash", "write_file", "write_file", "verify", "profile"]
    malformed = answers[[i for i, n in calls.items() if n == "write_file"][0]]
    assert malformed.startswith("Error: the arguments of write_file are not valid JSON")
    harness = [r["harness"] for r in read_records(out / "trajectory.jsonl") if r.get("harness")]
    assert [(h["action"], h["reward"]) for h in harness] == [("verify", 1.0), ("profile", 3.0)]
    assert read_records(out / "trajectory.jsonl")[-1]["type"] == "end"


def test_the_turn_budget_ends_the_run_and_the_last_state_is_profiled(task, tmp_path, fast_config):
    config = override(fast_config, limits={"max_turns": 2})
    script = [reply("", WRITE_FAST), reply("", ("bash", {"command": "true"})), reply("never asked")]
    result, server, out = run(task, tmp_path, config, script)
    assert (result.status, result.turns) == ("max_turns", 2)
    assert len(server.requests) == 2
    # The model never called verify or profile; the final profile found its solution anyway.
    assert (result.correct, result.reward) == (True, 3.0)
    assert [r["type"] for r in read_records(out / "trajectory.jsonl")][-2:] == ["final_evaluation", "end"]


def test_the_last_turns_are_announced(task, tmp_path, fast_config):
    config = override(fast_config, limits={"max_turns": 3, "turns_left_warning": 2})
    script = [reply("", ("bash", {"command": "true"}))] * 3
    _, server, _ = run(task, tmp_path, config, script)
    last_tool_outputs = [r["messages"][-1]["content"] for r in server.requests[1:]]
    assert ["turns left" in t for t in last_tool_outputs] == [True, True]
    assert "(Note: 1 turns left." in last_tool_outputs[-1]


def test_old_tool_outputs_are_shortened_when_the_context_fills(task, tmp_path, fast_config):
    config = override(fast_config, limits={"max_context_tokens": 12000, "compact_at": 0.6, "keep_recent_outputs": 1},
                      model={"format_reminders": 0})   # it ends unverified: no reminder, as before they came
    big = ("bash", {"command": "seq 1 3000"})
    script = [reply("", big, prompt_tokens=0), reply("", big, prompt_tokens=0), reply("", big, prompt_tokens=0),
              reply("done", prompt_tokens=0)]
    result, server, out = run(task, tmp_path, config, script)
    assert result.status == "done"
    last = [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "tool"]
    assert "removed to save context" in last[0] and len(last[0]) < 1000
    assert "removed to save context" not in last[-1] and last[-1].startswith("1\n2\n3")
    recorded = [m["content"] for m in read_messages(out / "trajectory.jsonl") if m["role"] == "tool"]
    assert all("removed to save context" not in t for t in recorded), "the trajectory keeps whole outputs"


def test_a_failing_endpoint_ends_the_run_but_keeps_the_best(task, tmp_path, fast_config):
    script = [reply("", WRITE_FAST, ("verify", {}))]            # then: 500s, more than the retries
    result, server, out = run(task, tmp_path, fast_config, script)
    assert result.status == "model_error"
    assert "server error (500), still after 4 attempts" in result.error
    assert result.correct and (out / "solution" / "model_new.py").exists()
    assert json.loads((out / "report.json").read_text())["status"] == "model_error"


def test_a_run_killed_while_waiting_for_the_model_resumes(task, tmp_path, fast_config):
    out = tmp_path / "out"
    script = [reply("", WRITE_FAST), reply("", ("verify", {})), slow(60, reply("killed before this")),
              reply("", ("profile", {})), reply("Done.")]
    with ChatServer(script) as server:
        child = _start_child(out, url=server.url)
        _wait(lambda: len(server.requests) == 3, child)
        child.send_signal(signal.SIGKILL)
        child.wait()
        assert not (out / "report.json").exists()
        result = optimize(task, model="test-model", base_url=server.url, device="cpu", out=out,
                          config=fast_config, resume=True, evaluator=lambda ws, device, timing: FakeEvaluator(ws))
    assert (result.status, result.turns, result.reward) == ("done", 4, 3.0)
    resumed_request = server.requests[3]["messages"]
    assert [m["role"] for m in resumed_request] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert "verify: PASSED" in resumed_request[-1]["content"]
    assert [r["type"] for r in read_records(out / "trajectory.jsonl")].count("resume") == 1


def test_a_run_killed_inside_a_tool_resumes_with_that_call_answered(task, tmp_path, fast_config):
    recorded, _, _ = run(task, tmp_path, fast_config, [reply("", ("compile", {})), reply("", WRITE_FAST),
                                                       reply("", ("profile", {})), reply("Done.")])
    policy = f"replay:{recorded.out}/trajectory.jsonl"
    out = tmp_path / "replayed"
    child = _start_child(out, policy=policy, delay=60)        # the harness hangs in compile
    _wait(lambda: (out / "trajectory.jsonl").exists() and
          '"compile"' in (out / "trajectory.jsonl").read_text(), child)
    time.sleep(0.5)
    child.send_signal(signal.SIGKILL)
    child.wait()
    result = optimize(task, policy=policy, device="cpu", out=out, config=fast_config, resume=True,
                      evaluator=lambda ws, device, timing: FakeEvaluator(ws))
    assert (result.status, result.turns, result.reward) == ("done", 4, 3.0)
    compile_answer = [m for m in read_messages(out / "trajectory.jsonl") if m["role"] == "tool"][0]
    assert compile_answer["content"].startswith("The session was interrupted before this tool call finished")


def _start_child(out: Path, **kwargs) -> subprocess.Popen:
    code = (f"import sys; sys.path.insert(0, {str(TESTS)!r}); from agent.fakes import child_run; "
            f"child_run({str(out)!r}, **{kwargs!r})")
    return subprocess.Popen([sys.executable, "-c", code], env=os.environ.copy())


def _wait(condition, child: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert child.poll() is None, "the child run ended before it could be killed"
        assert time.monotonic() < deadline, "the child run did not get there in time"
        time.sleep(0.05)


def test_many_tasks_run_side_by_side_and_a_bad_one_does_not_stop_the_others(task, tmp_path, fast_config):
    from cuda_agent.agent.run import optimize_many
    from cuda_agent.tasks import Task

    other = Task("other", task.code, "test")
    (tmp_path / "many" / "other").mkdir(parents=True)
    (tmp_path / "many" / "other" / "something").write_text("")   # a folder in use: that task cannot start
    with ChatServer([reply("", WRITE_FAST, ("profile", {})), reply("done")]) as server:
        results = optimize_many([task, other], out=tmp_path / "many", parallel=2, model="m", base_url=server.url,
                                device="cpu", config=fast_config, evaluator=lambda ws, device, timing: FakeEvaluator(ws))
    assert [(r.task, r.status, r.reward) for r in results] == [("scale_bias_relu", "done", 3.0), ("other", "error", -1.0)]
    assert "is not empty" in results[1].error
    summary = json.loads((tmp_path / "many" / "summary.json").read_text())
    assert (summary["tasks"], summary["verified"]) == (2, 1)
    assert "| scale_bias_relu | done | 3 | 3.00x | 1.50x |" in (tmp_path / "many" / "summary.md").read_text()


def test_a_reply_without_a_tool_call_gets_a_format_reminder_and_the_run_goes_on(task, tmp_path, fast_config):
    script = [reply("I would fuse the three operations into one kernel."),     # prose, no call
              reply("", WRITE_FAST, ("verify", {})), reply("Done: verified.")]
    result, server, out = run(task, tmp_path, fast_config, script)
    assert (result.status, result.turns, result.correct) == ("done", 3, True)
    reminder = server.requests[1]["messages"][-1]
    assert reminder["role"] == "user" and reminder["content"].startswith("Your reply has no tool call")
    assert "tool calling" in reminder["content"] and '`read_file` with the arguments {"path": "model.py"}' in \
        reminder["content"] and "After 3 more replies without a tool call the session ends." in reminder["content"]
    records = [r for r in read_records(out / "trajectory.jsonl") if r.get("type") == "message"]
    assert [r["message"]["role"] for r in records if r.get("reminder")] == ["user"]
    # once the harness has judged the work, a reply without a tool call is the model's end
    assert len(server.requests) == 3 and server.requests[-1]["messages"][-1]["role"] == "tool"


def test_a_model_that_never_calls_a_tool_ends_after_the_reminders_and_is_told_the_text_protocol(
        task, tmp_path, fast_config):
    script = [reply("I think the kernel should be fast.")] * 4 + [reply("never asked")]
    result, server, out = run(task, tmp_path, fast_config, script)
    assert (result.status, result.turns, result.reward) == ("no_tool_call", 4, -1.0)
    assert len(server.requests) == 4, "three reminders, then the fourth reply ends the run"
    reminders = [r["messages"][-1]["content"] for r in server.requests[1:]]
    assert [t.splitlines()[-1][-40:] for t in reminders] == [
        f"After {n} more replies without a tool call the session ends."[-40:] for n in (3, 2, 1)]
    assert result.error == ("the model replied 4 times without a tool call, through 3 format reminders; the agent "
                            "expects native tool calls (the endpoint's tool-calling API), and none ever came: if "
                            "the server or the model has no tool calling, pass --tool-protocol text")
    assert "| status | no_tool_call (the model kept replying without a tool call) |" in (out / "report.md").read_text()


def test_the_text_protocols_reminder_shows_its_block_and_names_the_protocol(task, tmp_path, fast_config):
    config = override(fast_config, model={"protocol": "text", "format_reminders": 1})
    script = [reply("Let me look at the model."), reply("```python\nprint(open('model.py').read())\n```")]
    result, server, _ = run(task, tmp_path, config, script)
    assert (result.status, result.turns) == ("no_tool_call", 2)
    reminder = server.requests[1]["messages"][-1]
    assert reminder["role"] == "user" and 'writing a block like this in your reply:\n<tool_call>\n' \
        '{"name": "read_file", "arguments": {"path": "model.py"}}\n</tool_call>' in reminder["content"]
    assert "expects <tool_call> blocks in the reply's text (--tool-protocol text)" in result.error
    assert "--tool-protocol text" not in result.error.split("(--tool-protocol text)")[1]


def test_a_model_that_answers_in_the_reminded_format_goes_on(task, tmp_path, fast_config):
    config = override(fast_config, model={"protocol": "text"})
    block = '<tool_call>\n{"name": "%s", "arguments": %s}\n</tool_call>'
    script = [reply("Sure."),
              reply(block % ("write_file", json.dumps({"path": "model_new.py", "content": FAST_MODEL_NEW}))
                    + block % ("profile", "{}")),
              reply("Done.")]
    result, server, _ = run(task, tmp_path, config, script)
    assert (result.status, result.turns, result.reward) == ("done", 3, 3.0)


def test_an_unreachable_endpoint_ends_the_run_at_once_with_one_line(task, tmp_path, fast_config):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = override(fast_config, model={"max_retries": 6, "backoff_s": 2.0})
    start = time.monotonic()
    result = optimize(task, model="m", base_url=f"http://127.0.0.1:{port}/v1", device="cpu", out=tmp_path / "out",
                      config=config, evaluator=lambda ws, device, timing: FakeEvaluator(ws))
    assert time.monotonic() - start < 30, "the refused connection was retried"
    assert (result.status, result.turns) == ("model_error", 0)
    assert "cannot connect" in result.error and "--base-url" in result.error and "\n" not in result.error


class Recorder:
    """A progress view that keeps every update."""

    def __init__(self):
        self.updates: list[tuple[str, dict]] = []

    def update(self, task: str, **fields) -> None:
        self.updates.append((task, fields))


def test_timeouts_are_retried_and_shown_in_the_live_view_and_the_trajectory(task, tmp_path, fast_config):
    config = override(fast_config, model={"timeout_s": 0.5})
    progress = Recorder()
    script = [slow(3.0, reply("too late")), reply("", WRITE_FAST, ("verify", {})), reply("Done.")]
    result, _, out = run(task, tmp_path, config, script, progress=progress)
    assert result.status == "done"
    shown = [f["action"] for t, f in progress.updates if str(f.get("action", "")).startswith("model:")]
    assert len(shown) == 1 and shown[0].startswith("model: no answer within 0.5 s (timeout_s); retry 1 of 3 in ")
    assert {t for t, _ in progress.updates} == {"scale_bias_relu"}, "one row, keyed by the task's name"
    first_reply = next(r for r in read_records(out / "trajectory.jsonl")
                       if r.get("type") == "message" and r["message"]["role"] == "assistant")
    assert first_reply["retries"] == shown
