"""`cuda-agent tasks` and `cuda-agent workspace`: the command line as `python -m cuda_agent` runs it
(once, as a process of its own), and the same commands in this process (each process would spend
seconds importing torch again)."""

import json
import subprocess
import sys
from types import SimpleNamespace

from typer.testing import CliRunner

from cuda_agent.cli import app


def cli_process(*args):
    return subprocess.run([sys.executable, "-m", "cuda_agent", *args], capture_output=True, text=True)


def cli(*args):
    """The command's exit status, stdout and stderr, as `cli_process` gives them, run in this process."""
    r = CliRunner().invoke(app, list(args))
    return SimpleNamespace(returncode=r.exit_code, stdout=r.stdout, stderr=r.stderr)


def test_tasks_list_level_2_json(kernelbench_jsonl):
    r = cli_process("tasks", "list", str(kernelbench_jsonl), "--level", "2", "--json")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(rows) == 100 and all(row["level"] == 2 and "code" not in row for row in rows)


def test_tasks_list_table_and_show(kernelbench_jsonl):
    r = cli("tasks", "list", str(kernelbench_jsonl), "--level", "1", "--name", "relu")
    assert r.returncode == 0 and "19_ReLU" in r.stdout
    r = cli("tasks", "show", str(kernelbench_jsonl), "L1/19")
    assert r.returncode == 0 and "torch.relu" in r.stdout


def test_bad_source_is_a_clear_error_with_nonzero_exit(tmp_path):
    r = cli("tasks", "list", str(tmp_path / "missing.jsonl"))
    assert r.returncode == 2 and "no such file" in r.stderr
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\n")
    r = cli("workspace", str(bad), str(tmp_path / "ws"))
    assert r.returncode == 2 and "bad.py" in r.stderr and "class Model" in r.stderr


def test_workspace_command(tmp_path, kernelbench_jsonl):
    r = cli("workspace", "L1/19", str(tmp_path / "ws"), "--source", str(kernelbench_jsonl), "--device", "cuda")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "ws" / "kernels" / "relu.cu").exists() and "19_ReLU" in r.stdout
