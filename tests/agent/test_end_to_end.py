"""The bundled demo through the real harness: a replayed run ends in a verified solution, on the CPU
backend here and on CUDA on the device; a run killed mid-way resumes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from cuda_agent.cli.agent import demo_command
from cuda_agent.agent.run import DEMO_TASK, DEMO_TRAJECTORIES, demo, optimize
from cuda_agent.agent.trajectory import read_records

from .test_loop import _wait

pytestmark = [pytest.mark.harness, pytest.mark.slow]


@pytest.mark.long   # 98-105 s of CI's 20 minutes: README's main command (`cuda-agent demo`) is this run, tried from a
#                    fresh clone before every landing; the CUDA demo below runs on the device; `pytest -m long` here
def test_the_demo_command_ends_verified_on_cpu_and_prints_json(tmp_path):
    r = CliRunner().invoke(_app(), ["--json", "--device", "cpu", "--out", str(tmp_path / "demo")])
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)   # stdout is the JSON alone (Ray may warn on stderr)
    assert report["correct"] and report["task"] == "scale_bias_relu" and report["reward"] >= 1, report
    solution = tmp_path / "demo" / "solution"
    assert sorted(p.name for p in (solution / "kernels").iterdir()) == ["scale_bias_relu.cpp",
                                                                      "scale_bias_relu_binding.cpp"]
    actions = [r["harness"]["action"] for r in read_records(tmp_path / "demo" / "trajectory.jsonl") if r.get("harness")]
    assert actions == ["compile", "verify", "profile"]


@pytest.mark.long   # 22-50 s on 2 cores: `pytest -m long` (CI stays under 20 minutes)
def test_a_replay_killed_mid_way_resumes_to_a_verified_solution(tmp_path):
    out = tmp_path / "run"
    policy = f"replay:{DEMO_TRAJECTORIES / 'scale_bias_relu.cpu.jsonl'}"
    code = ("from cuda_agent.agent.run import optimize; "
            f"optimize({str(DEMO_TASK)!r}, policy={policy!r}, device='cpu', out={str(out)!r})")
    child = subprocess.Popen([sys.executable, "-c", code])
    _wait(lambda: (out / "trajectory.jsonl").exists() and '"compile"' in (out / "trajectory.jsonl").read_text(),
          child, timeout=120)
    child.send_signal(signal.SIGKILL)
    child.wait()
    result = optimize(DEMO_TASK, policy=policy, device="cpu", out=out, resume=True)
    assert result.correct and result.status == "done", result.error or result.best


@pytest.mark.cuda
def test_the_demo_replay_ends_verified_on_cuda(tmp_path):
    result = demo(device="cuda", out=tmp_path / "demo")
    assert result.correct and result.reward >= 2, result.error or result.best   # at least faster than eager


def _app():
    import typer

    app = typer.Typer()
    app.command()(demo_command)
    return app
