"""Outputs from the solution child to the reference worker: files everywhere, CUDA IPC on a GPU.
Everything the child sends is metadata the reference worker checks; forged metadata must end in
a reason, never in a crash or a read outside what the child exported."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from cuda_agent.measure import TimingPlan
from cuda_agent.harness.workers.transfer import open_outputs, read_outputs, remove_outputs, write_outputs

REPO = Path(__file__).resolve().parents[3]


def test_outputs_travel_as_raw_bytes_and_bad_metadata_is_refused(tmp_path):
    outs = [torch.randn(3, 4), torch.arange(5), torch.tensor([True, False]), torch.empty(0, 2)]
    prefix = str(tmp_path / "out_t1")
    meta = write_outputs([outs[0].t(), *outs[1:]], prefix)  # a non-contiguous one too
    back = read_outputs(prefix, meta)
    assert all(torch.equal(a, b) for a, b in zip(back, [outs[0].t(), *outs[1:]]))
    assert [b.dtype for b in back] == [torch.float32, torch.int64, torch.bool, torch.float32]
    assert "need 40000" in read_outputs(prefix, [{"dtype": "float32", "shape": [100, 100]}])
    assert "valid dtype" in read_outputs(prefix, [{"dtype": "object", "shape": [3, 4]}])
    assert "valid dtype" in read_outputs(prefix, [{"dtype": "float32", "shape": [-1]}])
    assert "no readable list" in read_outputs(prefix, {"dtype": "float32"})
    remove_outputs(prefix, len(meta))
    assert "missing" in read_outputs(prefix, meta)


def test_ipc_metadata_without_a_valid_handle_is_refused_before_the_driver_is_called():
    cpu = torch.device("cpu")
    assert "no readable list" in open_outputs("not a list", cpu)
    assert "valid dtype" in open_outputs([{"dtype": "float32", "shape": ["3"]}], cpu)
    assert "no valid IPC handle" in open_outputs([{"dtype": "float32", "shape": [3]}], cpu)
    assert "no valid IPC handle" in open_outputs([{"dtype": "float32", "shape": [3],
                                                  "ipc": {"handle": "ab" * 64, "offset": -512}}], cpu)
    assert "no valid IPC handle" in open_outputs([{"dtype": "float32", "shape": [3],
                                                  "ipc": {"handle": "short", "offset": 0}}], cpu)


_SHARER = textwrap.dedent("""
    import json, sys, torch
    from cuda_agent.harness.workers.transfer import share_outputs
    keep = []
    big = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
    outs = [big[1:].view(-1)[:1000],                                    # unaligned: shared as a copy
            torch.arange(12, device="cuda", dtype=torch.int64).view(3, 4).t(),  # not contiguous
            torch.tensor([True, False, True], device="cuda"), torch.empty(0, device="cuda")]
    meta = share_outputs(outs, keep)
    torch.cuda.synchronize()
    print(json.dumps(meta), flush=True)
    sys.stdin.readline()  # keep the memory until the reader is done
""")


@pytest.fixture
def shared_by_another_process():
    proc = subprocess.Popen([sys.executable, "-c", _SHARER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"})
    try:
        yield json.loads(proc.stdout.readline())
    finally:
        proc.stdin.write("done\n")
        proc.stdin.flush()
        proc.wait(60)


@pytest.mark.cuda
def test_outputs_shared_by_cuda_ipc_arrive_intact(shared_by_another_process):
    meta = shared_by_another_process
    opened = open_outputs(meta, torch.device("cuda"))
    assert not isinstance(opened, str), opened
    a, b, c, d = opened.tensors
    assert torch.equal(a, torch.arange(1, 1001, dtype=torch.float32, device="cuda"))
    assert torch.equal(b, torch.arange(12, device="cuda").view(3, 4).t().contiguous())
    assert torch.equal(c, torch.tensor([True, False, True], device="cuda"))
    assert d.shape == (0,)
    opened.close()


@pytest.mark.cuda
def test_forged_ipc_metadata_ends_in_a_reason(shared_by_another_process):
    meta = shared_by_another_process
    cuda = torch.device("cuda")
    beyond = [dict(meta[0], shape=[1 << 40])]
    assert "do not lie in" in open_outputs(beyond, cuda)
    shifted = [dict(meta[0], ipc=dict(meta[0]["ipc"], offset=meta[0]["ipc"]["offset"] + 4))]
    assert "do not lie in" in open_outputs(shifted, cuda)
    forged = [dict(meta[0], ipc=dict(meta[0]["ipc"], handle="00" * 64))]
    assert "could not be mapped" in open_outputs(forged, cuda)
    # the real one still opens afterwards: nothing was left mapped by the refusals
    opened = open_outputs(meta, cuda)
    assert not isinstance(opened, str), opened
    opened.close()


@pytest.mark.cuda
def test_an_evaluation_hands_outputs_over_by_ipc_and_agrees_with_files():
    from cuda_agent.harness.config import EvalConfig
    from cuda_agent.harness.evaluation import evaluate
    from cuda_agent.tasks import EXAMPLES_DIR, load_task

    task = load_task(EXAMPLES_DIR / "scale_bias_relu.py")
    solution = REPO / "benchmarks" / "solutions" / "scale_bias_relu_cuda"
    results = {t: evaluate(task, solution, EvalConfig(device="cuda", transfer=t, timing=TimingPlan(budget_s=0.2)))
               for t in ("auto", "files")}
    for r in results.values():
        assert r.correct and r.reward >= 1, r.reason
    assert results["files"].details["transfer"] == "files"
    assert results["auto"].details["transfer"] == "ipc", results["auto"].details
    assert results["auto"].stage_seconds["correctness"] > 0
