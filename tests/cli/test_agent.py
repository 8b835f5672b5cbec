"""The optimize and demo commands as a user types them (without evaluations: the model changes nothing)."""

from __future__ import annotations

import json
from contextlib import nullcontext

import pytest
import typer
from typer.testing import CliRunner

from cuda_agent.cli.agent import demo_command, optimize_command

from llm.fakes import ChatServer, reply

app = typer.Typer()
app.command("optimize")(optimize_command)
app.command("demo")(demo_command)


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(app, list(args), env=env)


@pytest.fixture
def one_service(service, monkeypatch):
    """The module's evaluation service stands in for the one each command would start: a Ray start
    is seconds, and here the model changes nothing, so nothing is evaluated."""
    import cuda_agent.cli.agent as cli_agent

    monkeypatch.setattr(cli_agent, "EvalService", lambda settings: nullcontext(service))


def test_optimize_against_an_endpoint_prints_the_report_as_json(tmp_path, monkeypatch, one_service):
    monkeypatch.setenv("CUDA_AGENT_MODEL", "test-model")
    # nothing verified: a reply without a tool call gets three format reminders before the run ends
    with ChatServer([reply("", ("bash", {"command": "ls"}))] + [reply("nothing to do")] * 4) as server:
        r = invoke("optimize", "scale_bias_relu", "--base-url", server.url, "--device", "cpu",
                   "--out", str(tmp_path / "out"), "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)   # stdout alone: Ray may log a warning on stderr when the service starts it
    assert (report["status"], report["turns"], report["correct"], report["model"]) == \
        ("no_tool_call", 5, False, "test-model")
    assert server.requests[0]["model"] == "test-model"


def test_many_tasks_get_a_folder_each_and_a_summary(tmp_path, one_service):
    with ChatServer([reply("nothing to do")] * 4) as server:   # the first reply and three format reminders
        r = invoke("optimize", "--tasks", "examples", "--limit", "1", "--model", "m", "--base-url", server.url,
                   "--device", "cpu", "--out", str(tmp_path / "many"), "--quiet")
    assert r.exit_code == 0, r.output
    assert "scale_bias_relu: nothing verified" in r.output
    assert json.loads((tmp_path / "many" / "summary.json").read_text())["tasks"] == 1
    assert (tmp_path / "many" / "scale_bias_relu" / "report.md").exists()


def test_a_missing_endpoint_is_a_clear_error(tmp_path, monkeypatch):
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "CUDA_AGENT_MODEL"):
        monkeypatch.delenv(var, raising=False)
    r = invoke("optimize", "scale_bias_relu", "--model", "m", "--out", str(tmp_path / "o"))
    assert r.exit_code == 2 and "no model endpoint configured" in r.output
    assert not (tmp_path / "o").exists(), "nothing is created before the model is known to be reachable"


def test_an_occupied_output_folder_needs_resume_or_force(tmp_path, one_service):
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "x").write_text("")
    with ChatServer([]) as server:   # an endpoint that is up: a dead one is said first
        r = invoke("optimize", "scale_bias_relu", "--model", "m", "--base-url", server.url,
                   "--device", "cpu", "--out", str(tmp_path / "o"))
    assert r.exit_code == 2 and "--resume" in r.output and "--force" in r.output


def test_a_refused_endpoint_is_one_line_before_anything_starts(tmp_path, monkeypatch):
    import socket
    import time

    for var in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    r = invoke("optimize", "scale_bias_relu", "--model", "m", "--base-url", f"http://127.0.0.1:{port}/v1",
               "--device", "cpu", "--out", str(tmp_path / "o"))
    assert time.monotonic() - start < 10, "the evaluation service was started before the endpoint was tried"
    assert r.exit_code == 2 and not (tmp_path / "o").exists()
    assert r.output.startswith("error: model 'm' at http://127.0.0.1:") and "cannot connect" in r.output
    assert "Traceback" not in r.output


def test_the_live_view_of_one_task_given_by_its_path_has_one_row_and_fits_80_columns(tmp_path, one_service):
    """The README's `optimize TASK.py`: no second row keyed by the path stuck at "waiting"."""
    from cuda_agent.tasks import EXAMPLES_DIR

    with ChatServer([reply("", ("bash", {"command": "ls"})), reply("nothing to do")]) as server:
        r = invoke("optimize", str(EXAMPLES_DIR / "scale_bias_relu.py"), "--model", "m", "--base-url", server.url,
                   "--device", "cpu", "--out", str(tmp_path / "out"), "--config", str(_no_reminders(tmp_path)),
                   env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    view = r.output[:r.output.index("scale_bias_relu: nothing verified")]   # the view's last frame, then the report
    view = "\n".join(line for line in view.splitlines() if line[:1] in "╭│╰")    # not Ray's warning
    assert "waiting" not in view and "/2 finished" not in view and "scale_bias_relu.py" not in view
    assert "│ task           scale_bias_relu" in view and "│ status         done" in view
    assert all(len(line) <= 80 for line in view.splitlines())


def _no_reminders(tmp_path):
    config = tmp_path / "agent.toml"
    config.write_text("[model]\nformat_reminders = 0\n")
    return config
