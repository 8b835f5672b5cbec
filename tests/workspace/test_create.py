import ast
import json
import time

import pytest

from cuda_agent.tasks import load_task, load_tasks
from cuda_agent.workspace import (MANIFEST, ManifestError, create_workspace, read_manifest,
                                  tampered_files)

EXPECTED = {"SKILL.md", "model.py", "model_new.py", "binding.cpp", "binding_registry.h",
            "kernels/relu.cu", "kernels/relu_binding.cpp", "utils/compile.sh", "utils/verify.sh",
            "utils/profile.sh", str(MANIFEST)}


def _files(root):
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_layout_matches_the_reference(tmp_path):
    ws = create_workspace(load_task("scale_bias_relu"), tmp_path / "ws", "cuda")
    assert _files(ws.path) == EXPECTED
    skill = (ws.path / "SKILL.md").read_text()
    for needle in ("cuBLAS", "cuDNN", "utils/compile.sh", "utils/verify.sh", "utils/profile.sh", "-1", "torch.compile"):
        assert needle in skill
    assert "REGISTER_BINDING(relu, register_relu)" in (ws.path / "kernels/relu_binding.cpp").read_text()


def test_cpu_workspace_has_cpu_example_kernel(tmp_path):
    ws = create_workspace(load_task("scale_bias_relu"), tmp_path / "ws", "cpu")
    assert "kernels/relu.cpp" in _files(ws.path) and "kernels/relu.cu" not in _files(ws.path)


def test_every_kernelbench_task_gets_a_workspace_fast(tmp_path, kernelbench_jsonl):
    tasks = load_tasks(kernelbench_jsonl).tasks
    t0 = time.perf_counter()
    for i, t in enumerate(tasks):
        ws = create_workspace(t, tmp_path / f"w{i}", "cuda")
        tree = ast.parse(ws.model_new.read_text())
        assert any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body)
    assert (time.perf_counter() - t0) / len(tasks) < 0.1


def test_starting_model_new_keeps_the_constructor(tmp_path, kernelbench_jsonl):
    t = load_tasks(kernelbench_jsonl).find("L2/1")
    text = create_workspace(t, tmp_path / "ws").model_new.read_text()
    assert "self.conv = nn.Conv2d" in text and "super(Model, self)" not in text


def test_commands_are_thin_entry_points(tmp_path):
    ws = create_workspace(load_task("scale_bias_relu"), tmp_path / "ws", "cpu")
    for action in ("compile", "verify", "profile"):
        text = (ws.path / "utils" / f"{action}.sh").read_text()
        assert f"-m cuda_agent workspace-{action}" in text and len(text.splitlines()) < 5


def test_tampering_with_a_protected_file_is_detected(tmp_path):
    ws = create_workspace(load_task("scale_bias_relu"), tmp_path / "ws", "cpu")
    manifest, signed = read_manifest(ws.path)
    assert signed and tampered_files(ws.path, manifest) == []
    (ws.path / "model.py").write_text("# mine now\n")
    (ws.path / "binding.cpp").unlink()
    assert tampered_files(ws.path, manifest) == ["binding.cpp", "model.py"]


def test_forged_manifest_is_rejected(tmp_path):
    ws = create_workspace(load_task("scale_bias_relu"), tmp_path / "ws", "cpu")
    path = ws.path / MANIFEST
    data = json.loads(path.read_text())
    data["task_code"] = "class Model: ..."
    path.write_text(json.dumps(data))
    with pytest.raises(ManifestError, match="signature"):
        read_manifest(ws.path)


def test_existing_folder_is_not_overwritten(tmp_path):
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "keep.txt").write_text("x")
    with pytest.raises(FileExistsError, match="--force"):
        create_workspace(load_task("scale_bias_relu"), tmp_path / "ws")
