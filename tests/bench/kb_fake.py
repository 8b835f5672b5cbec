"""A fake KernelBench checkout for the agreement tests: a package at <root>/src/kernelbench whose
eval module has the real one's entry points (eval_kernel_against_ref with its keyword arguments,
build_compile_cache, get_torch_dtype_from_string) and result object (KernelExecResult's fields),
at commit 423217d9 (see benchmarks/kb_driver.py). What it does is read from a `# fake:` line of
the solution's source: `pass REF_MS SOLUTION_MS`, `mismatch MAX_DIFF`, `compile-error`, `none`,
`raise`, `crash`, `sleep`; `build-fail` makes build_compile_cache fail. Its package __init__
imports modules the real one imports for its LLM helpers (dotenv, litellm), which the driver
stubs where missing. No torch: each driver process starts in a fraction of a second."""

from __future__ import annotations

from pathlib import Path

INIT = "from . import utils  # the real package imports its LLM helpers here too\n"

UTILS = '''
try:
    from dotenv import load_dotenv
    from litellm import completion
except ImportError as e:  # the driver must have stubbed them
    raise ImportError(f"fake KernelBench: {e}") from None
'''

EVAL = '''
import os
import re
import signal
import time


class KernelExecResult:
    def __init__(self, compiled=False, correctness=False, metadata=None, runtime=-1.0, runtime_stats=None,
                 ref_runtime=-1.0, ref_runtime_stats=None):
        self.compiled, self.correctness, self.metadata = compiled, correctness, metadata if metadata is not None else {}
        self.runtime, self.runtime_stats = runtime, runtime_stats or {}
        self.ref_runtime, self.ref_runtime_stats = ref_runtime, ref_runtime_stats or {}


def get_torch_dtype_from_string(precision):
    return precision


def _what(src):
    m = re.search(r"^# fake: (.*)$", src, re.M)
    return (m.group(1) if m else "pass 1.0 1.0").split()


def eval_kernel_against_ref(original_model_src, custom_model_src, seed_num=42, num_correct_trials=1,
                            num_perf_trials=10, measure_performance=False, timing_method="cuda_event", verbose=False,
                            build_dir=None, device=None, backend="cuda", precision=None,
                            check_for_excessive_speedup=True, excessive_speedup_threshold=10):
    assert "class Model" in original_model_src
    what = _what(custom_model_src)
    metadata = {"hardware": "fake", "device": str(device), "trials_asked": num_correct_trials,
                "perf_trials_asked": num_perf_trials}
    if what[0] == "pass":
        ref, sol = float(what[1]), float(what[2])
        metadata["correctness_trials"] = f"({num_correct_trials} / {num_correct_trials})"
        if ref / sol > excessive_speedup_threshold:
            metadata["excessive_speedup"] = True
        return KernelExecResult(compiled=True, correctness=True, metadata=metadata, runtime=sol, ref_runtime=ref,
                                runtime_stats={"mean": sol}, ref_runtime_stats={"mean": ref})
    if what[0] == "mismatch":
        metadata.update(max_difference=[what[1]], avg_difference=["0.0001"], correctness_issue="Output mismatch")
        return KernelExecResult(compiled=True, correctness=False, metadata=metadata, ref_runtime=1.0)
    if what[0] == "compile-error":
        metadata.update(compilation_error_name="RuntimeError", compilation_error=RuntimeError("nvcc failed"))
        return KernelExecResult(compiled=False, metadata=metadata)
    if what[0] == "none":
        return None
    if what[0] == "raise":
        raise ValueError("boom")
    if what[0] == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    if what[0] == "sleep":
        time.sleep(120)
    raise AssertionError(f"fake KernelBench: unknown directive {what}")


def build_compile_cache(custom_model_src, verbose=False, build_dir=None):
    os.makedirs(build_dir, exist_ok=True)
    with open(os.path.join(build_dir, "built.txt"), "w") as f:
        f.write("built\\n")
    if "build-fail" in custom_model_src:
        return False, "", "nvcc failed"
    return True, "", None
'''


def make_checkout(root: Path, commit: str = "423217d9fda91e0c2d67e4a43bf62f96f6d104f1") -> Path:
    package = root / "src" / "kernelbench"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(INIT)
    (package / "utils.py").write_text(UTILS)
    (package / "eval.py").write_text(EVAL)
    (root / "KB_COMMIT").write_text(commit + "\n")
    return root


def solution(directive: str) -> str:
    return f"# fake: {directive}\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    pass\n"
