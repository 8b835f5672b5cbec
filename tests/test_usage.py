"""The checks every command shares before work (cuda_agent/usage.py, devices.check_device): a user's
mistake is a UsageError that says what to do, and nothing is created while checking."""

from __future__ import annotations

import os

import pytest

from cuda_agent.devices import check_device
from cuda_agent.usage import UsageError, output_file, output_folder, require


def test_an_output_folder_may_exist_or_be_new_but_not_be_a_file(tmp_path):
    assert output_folder(tmp_path, "--out") == tmp_path
    assert output_folder(tmp_path / "new" / "deeper", "--out") == tmp_path / "new" / "deeper"
    assert sorted(p.name for p in tmp_path.iterdir()) == []          # checking created nothing
    (tmp_path / "f").write_text("x")
    with pytest.raises(UsageError, match=r"--out .*/f is a file, and a folder is needed here"):
        output_folder(tmp_path / "f", "--out")
    with pytest.raises(UsageError, match=r"DEST .*/f/ws: .*/f is a file, so nothing can be created under it"):
        output_folder(tmp_path / "f" / "ws", "DEST")


def test_an_output_file_may_not_be_a_folder(tmp_path):
    assert output_file(tmp_path / "b.jsonl", "--out") == tmp_path / "b.jsonl"
    with pytest.raises(UsageError, match=r"--out .* is a folder, and a file is needed here: give a file path, e\.g\."):
        output_file(tmp_path, "--out")


def test_a_place_nothing_can_be_written_is_said(tmp_path):
    with pytest.raises(UsageError, match=r"--out /proc/ws: cannot write in /proc"):
        output_folder("/proc/ws", "--out")
    with pytest.raises(UsageError, match=r"cannot write in /proc"):
        output_file("/proc/x.jsonl", "--out")
    if os.geteuid() != 0:    # root writes anywhere the permission bits forbid
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(UsageError, match="cannot write in"):
            output_folder(locked / "out", "--out")


def test_a_missing_package_names_what_needs_it_and_how_to_install_it(monkeypatch):
    require("json", "anything", "nothing to do")
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)
    with pytest.raises(UsageError, match=r"^bench draws plots with matplotlib, which is not installed: pip install x$"):
        require("matplotlib", "bench draws plots", "pip install x")


def test_one_device_check_with_one_message(monkeypatch):
    monkeypatch.delenv("CUDA_AGENT_DEVICE", raising=False)
    assert check_device("cpu") == "cpu"
    with pytest.raises(UsageError, match=r"^--device tpu: unknown device; use --device cuda or --device cpu$"):
        check_device("tpu")
    monkeypatch.setenv("CUDA_AGENT_DEVICE", "tpu")
    with pytest.raises(UsageError, match=r"^\$CUDA_AGENT_DEVICE=tpu: unknown device; set CUDA_AGENT_DEVICE to cuda"):
        check_device(None)
    monkeypatch.setattr("cuda_agent.devices.cuda_available", lambda: False)
    monkeypatch.delenv("CUDA_AGENT_DEVICE")
    with pytest.raises(UsageError, match=r"^--device cuda: .*; use --device cpu to run the same checks"):
        check_device("cuda")
    assert check_device("cuda", present=False) == "cuda"     # a workspace for a GPU elsewhere
    assert check_device(None) == "cpu"


def test_the_harness_workspace_and_peaks_use_the_one_device_check(monkeypatch, tmp_path):
    from cuda_agent.bench.peaks import device_peaks
    from cuda_agent.devices import resolve_backend
    from cuda_agent.tasks import load_task
    from cuda_agent.workspace import create_workspace

    for call in (lambda: resolve_backend("tpu"), lambda: device_peaks("tpu"),
                 lambda: create_workspace(load_task("scale_bias_relu"), tmp_path / "ws", "tpu")):
        with pytest.raises(UsageError, match=r"^--device tpu: unknown device; use --device cuda or --device cpu$"):
            call()
