"""Permission isolation: what a model's shell command can reach when the agent runs as root."""

from __future__ import annotations

import json
import os

import pytest

from cuda_agent.agent.sandbox_user import CommandRunner, prepare_workspace, tool_user
from cuda_agent.home import home
from cuda_agent.workspace import read_manifest

from .conftest import root_only

pytestmark = root_only


@pytest.fixture
def isolated(task, tmp_path):
    """A workspace handed to the tool user, in a folder that user can enter."""
    from cuda_agent.workspace import create_workspace

    base = tmp_path / "shared"
    base.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(base, 0o755)
    ws = create_workspace(task, base / "ws", "cpu").path
    user = tool_user()
    prepare_workspace(ws, user, set(read_manifest(ws)[0].protected))
    return ws, CommandRunner(ws, user)


def sh(runner, command):
    r = runner.run(command, timeout=20)
    return r.text(), r.exit_code


def test_commands_run_as_an_unprivileged_user(isolated):
    ws, runner = isolated
    out, code = sh(runner, "id -u; echo $HOME")
    assert code == 0 and out.split() == [str(runner.user.uid), str(ws)]
    assert runner.user.uid != 0


def test_the_tool_user_can_write_kernels_but_not_protected_files(isolated):
    ws, runner = isolated
    before = {p: (ws / p).read_bytes() for p in ("model.py", "binding.cpp", "utils/verify.sh", ".cuda_agent/manifest.json")}
    out, code = sh(runner, "echo ok > kernels/mine.cu && echo ok > model_new.py && echo ok > notes.txt && echo done")
    assert out.strip() == "done"
    for attack in ("echo x >> model.py", "rm -f model.py", "mv binding.cpp b.cpp", "echo x > utils/verify.sh",
                   "rm -rf utils", "echo '{}' > .cuda_agent/manifest.json", "chmod 666 model.py"):
        sh(runner, attack)
    assert {p: (ws / p).read_bytes() for p in before} == before


def test_the_harness_key_is_out_of_reach(isolated):
    ws, runner = isolated
    key = home() / "workspace.key"
    assert key.exists()
    out, code = sh(runner, f"cat {key}")
    assert code != 0 and "Permission denied" in out


def test_secrets_are_not_in_the_environment(isolated, monkeypatch):
    ws, _ = isolated
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    runner = CommandRunner(ws, tool_user())
    out, _ = sh(runner, "env")
    assert "sk-secret" not in out and "CUDA_AGENT_HOME" not in out


def test_commands_have_no_network(isolated):
    _, runner = isolated
    assert runner.describe().endswith("no network")
    out, _ = sh(runner, "cat /proc/net/dev | tail -n +3 | awk '{print $1}'")
    assert out.split() == ["lo:"]


def test_optimize_isolates_the_tools_of_a_real_run(task, tmp_path, fast_config):
    """End to end with isolation on: the run's report says how, and the model's writes are the tool user's."""
    from cuda_agent.agent.config import override
    from cuda_agent.agent.run import optimize

    from .fakes import FAST_MODEL_NEW, ChatServer, FakeEvaluator, reply

    config = override(fast_config, run={"isolation": True})
    script = [reply("", ("write_file", {"path": "model_new.py", "content": FAST_MODEL_NEW}),
                    ("bash", {"command": "echo more >> model_new.py && stat -c %U model_new.py"})),
              reply("done")]
    out = tmp_path / "out"   # under pytest's private tmp: the workspace goes to a shared folder, linked
    with ChatServer(script) as server:
        result = optimize(task, model="m", base_url=server.url, device="cpu", out=out, config=config,
                          evaluator=lambda ws, device: FakeEvaluator(ws))
    assert result.isolation.startswith("user cuda-agent-tool, no network")
    assert (out / "workspace").is_symlink()
    records = [json.loads(line) for line in (out / "trajectory.jsonl").read_text().splitlines()]
    bash_result = [r for r in records if r["type"] == "message" and r["message"]["role"] == "tool"][1]
    assert bash_result["message"]["content"].splitlines()[0] == "cuda-agent-tool"
