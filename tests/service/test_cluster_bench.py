"""benchmarks/cluster_bench.py (issue 27, the cluster path): two real Ray nodes on this host, the service on
both through an explicit address (in Ray's token mode), the second node killed half-way."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.long   # ~2 minutes on 2 cores (two Ray nodes started, one killed): `pytest -m long`
def test_two_nodes_serve_and_losing_one_loses_no_request(tmp_path):
    out = tmp_path / "cluster.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cluster_bench.py"), "--device", "cpu",
                           "--evals", "6", "--cpus", "2", "--logs", str(tmp_path / "logs"), "--json", str(out)],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["nodes"] == 2 and r["node_lost"] is True
    assert r["verdicts"] == r["requests"] == 6 and r["lost"] == 0
    assert r["correct"] == 6 and r["harness_errors"] == 0
    assert "| nodes | evaluators (on the second) |" in done.stdout
