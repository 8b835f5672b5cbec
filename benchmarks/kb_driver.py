"""KernelBench as an external program, for benchmarks/kb_agreement.py: both ends of one call.

The child (`python benchmarks/kb_driver.py REQUEST.json`, `main` below) runs one solution through
KernelBench's own evaluation function, importing `kernelbench.eval` from a checkout on PYTHONPATH
(`<checkout>/src`) and nothing of cuda_agent. The parent (`KernelBench.call`, `kb_side`) starts it
in a session of its own with a time limit and turns what it wrote into one side of a row.

REQUEST.json: {"mode": "eval" | "build", "ref_path", "solution_path", "result_path", "build_dir",
"seed", "num_correct_trials", "num_perf_trials", "timing_method", "precision", "backend"}.
The verdict goes to result_path as JSON (KernelBench prints freely to stdout, which is only a log).
The file is written twice: {"phase": "imported"} once KernelBench is imported (a crash or a
time-out after that is the solution's, as in KernelBench's own batch script; before it, the
set-up's), then the full result with "phase": "done".

"eval" calls kernelbench.eval.eval_kernel_against_ref with measure_performance=True: its
correctness trials, then the solution and the reference timed by the same timing function in the
same call (its `runtime` and `ref_runtime`, milliseconds). "build" calls its build_compile_cache,
which compiles the solution's load_inline modules into build_dir ahead of "eval" (as KernelBench's
eval_from_generations.py does), so builds can run in parallel while the GPU is idle.

KernelBench's package __init__ imports its LLM helpers (kernelbench.utils: python-dotenv, openai,
litellm), which the evaluation path never calls: where one of those cannot be imported, an empty
stand-in is put in sys.modules so that the import succeeds; the result lists them under "stubs".
pydantic (KernelExecResult's base class) is the one package the evaluation itself needs beyond
torch, numpy and requests: carried as wheels (scripts/carry_kernelbench.sh); where it cannot be
imported anyway, a minimal stand-in (keyword construction, per-instance copies of the defaults)
takes its place and is listed under "stubs" too.
"""

from __future__ import annotations

import copy
import importlib
import json
import os
import signal
import subprocess
import sys
import time
import traceback
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESULT_FIELDS = ("compiled", "correctness", "runtime", "ref_runtime", "runtime_stats", "ref_runtime_stats", "metadata")


# ---- the child: runs under KernelBench's checkout ------------------------------------------------

def jsonable(value: Any, depth: int = 0) -> Any:
    """KernelBench's metadata holds exception objects: everything not JSON becomes its str()."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if depth > 6:
        return str(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v, depth + 1) for v in value]
    return str(value)[:2000]


def write(path: str, data: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


class _BaseModel:
    """pydantic.BaseModel as far as KernelExecResult uses it: fields with defaults, set by keyword."""

    def __init__(self, **values: Any):
        for klass in reversed(type(self).__mro__):
            for name in getattr(klass, "__annotations__", {}):
                if hasattr(klass, name):
                    setattr(self, name, copy.deepcopy(getattr(klass, name)))
        for name, value in values.items():
            setattr(self, name, value)


def stub_missing() -> list[str]:
    """Stand-ins for the modules KernelBench imports that cannot be imported here."""
    stubs = {"dotenv": {"load_dotenv": lambda *a, **k: False}, "openai": {"OpenAI": object},
             "litellm": {"completion": None}, "pydantic": {"BaseModel": _BaseModel}}
    used = []
    for name, attrs in stubs.items():
        try:
            importlib.import_module(name)
        except Exception:  # missing, or installed but broken (a wheel built for another Python)
            module = types.ModuleType(name)
            module.__dict__.update(attrs)
            sys.modules[name] = module
            used.append(name)
    return used


def evaluate(kb_eval: Any, req: dict, ref: str, src: str) -> dict:
    result = kb_eval.eval_kernel_against_ref(
        original_model_src=ref, custom_model_src=src, seed_num=req.get("seed", 42),
        num_correct_trials=req.get("num_correct_trials", 5), num_perf_trials=req.get("num_perf_trials", 100),
        measure_performance=True, timing_method=req.get("timing_method", "cuda_event"), verbose=False,
        build_dir=req["build_dir"], device=0, backend=req.get("backend", "cuda"),
        precision=kb_eval.get_torch_dtype_from_string(req.get("precision", "fp32")))
    if result is None:  # KernelBench's answer to a lock-file error during compilation: "please retry"
        return {"returned": False}
    return {"returned": True, **{k: jsonable(getattr(result, k, None)) for k in RESULT_FIELDS}}


def main(request_path: str) -> int:
    with open(request_path) as f:
        req = json.load(f)
    t0 = time.time()
    stubs = stub_missing()
    import kernelbench.eval as kb_eval

    out = {"phase": "imported", "stubs": stubs, "kernelbench_file": kb_eval.__file__}
    write(req["result_path"], out)
    with open(req["ref_path"]) as f:
        ref = f.read()
    with open(req["solution_path"]) as f:
        src = f.read()
    try:
        if req["mode"] == "build":
            ok, _, error = kb_eval.build_compile_cache(src, verbose=False, build_dir=req["build_dir"])
            out.update(built=bool(ok), error=error)
        else:
            out.update(evaluate(kb_eval, req, ref, src))
    except Exception as e:  # KernelBench's batch script records these as failures (compiled=False)
        out.update(raised=f"{type(e).__module__}.{type(e).__name__}: {str(e)[:1000]}",
                   traceback=traceback.format_exc()[-4000:])
    out.update(phase="done", seconds=round(time.time() - t0, 3))
    write(req["result_path"], out)
    return 0


# ---- the parent: starts the child and reads its verdict ------------------------------------------

@dataclass
class KernelBench:
    """KernelBench's evaluation, one driver process per call, in out/kb/<row>/."""

    checkout: Path
    out: Path
    timeout_s: float = 300.0
    build_timeout_s: float = 600.0
    settings: dict | None = None          # seed, num_correct_trials, num_perf_trials, timing_method, ...
    site: Path | None = None              # carried packages (pydantic), for the driver only

    def env(self) -> dict[str, str]:
        paths = [str(self.checkout.resolve() / "src"), *([str(self.site)] if self.site else []),
                 os.environ.get("PYTHONPATH", "")]
        return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p), "PYTHONUNBUFFERED": "1"}

    def call(self, mode: str, folder: Path, ref: str, solution: Path) -> dict:
        """The child's result for `solution` on the reference `ref` (mode "eval" or "build"), with
        rc, timed_out, wall_s, limit_s and the log's path; `folder` holds the call's files."""
        folder = folder.resolve()
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "model.py").write_text(ref)
        result_path = folder / f"{mode}.json"
        result_path.unlink(missing_ok=True)
        request = {"mode": mode, "ref_path": str(folder / "model.py"), "solution_path": str(solution.resolve()),
                   "result_path": str(result_path), "build_dir": str(folder / "build"), **(self.settings or {})}
        (folder / f"{mode}_request.json").write_text(json.dumps(request, indent=1))
        timeout = self.build_timeout_s if mode == "build" else self.timeout_s
        t0 = time.monotonic()
        with open(folder / f"{mode}.log", "w") as log:
            command = [sys.executable, str(Path(__file__).resolve()), str(folder / f"{mode}_request.json")]
            proc = subprocess.Popen(command, cwd=folder, env=self.env(), stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            try:
                rc, timed_out = proc.wait(timeout=timeout), False
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # the child's own session: its compilers go with it
                rc, timed_out = proc.wait(), True
        try:
            result = json.loads(result_path.read_text()) if result_path.is_file() else {}
        except json.JSONDecodeError:
            result = {}
        return {**result, "rc": rc, "timed_out": timed_out, "wall_s": round(time.monotonic() - t0, 3),
                "limit_s": timeout, "log": str(folder / f"{mode}.log")}


def _log_tail(path: str, lines: int = 3) -> str:
    try:
        return " / ".join(Path(path).read_text(errors="replace").strip().splitlines()[-lines:])[-400:]
    except OSError:
        return ""


def _number(v: Any) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def kb_side(call: dict) -> dict:
    """KernelBench's verdict as one side of a row: status pass / fail / error (no verdict), reason,
    and its timings. A crash or time-out once KernelBench is imported is the solution's failure (as
    in KernelBench's own batch script); before that, no verdict."""
    side: dict[str, Any] = {"seconds": call.get("wall_s"), "log": call.get("log"), "stubs": call.get("stubs", []),
                            "timed_out": call.get("timed_out", False)}
    if call.get("phase") != "done":
        what = (f"timed out after {call.get('limit_s', 0):.0f} s" if call.get("timed_out")
                else f"the process died (exit {call.get('rc')})")
        if call.get("phase") != "imported":
            return {**side, "status": "error",
                    "reason": f"driver: {what} before KernelBench was imported: {_log_tail(call.get('log', ''))}"}
        return {**side, "status": "fail", "reason": what}
    if "raised" in call:
        return {**side, "status": "fail", "compiled": False, "reason": f"eval raised {call['raised']}"}
    if call.get("returned") is False:
        return {**side, "status": "error",
                "reason": "KernelBench returned None (a lock-file error while compiling; it asks for a retry)"}
    meta = call.get("metadata") or {}
    diffs = [d for d in map(_number, meta.get("max_difference") or []) if d is not None]
    runtime, ref = _number(call.get("runtime")) or -1.0, _number(call.get("ref_runtime")) or -1.0
    side.update(compiled=call.get("compiled"), correctness=call.get("correctness"),
                runtime_ms=runtime if runtime > 0 else None, ref_ms=ref if ref > 0 else None,
                max_difference=max(diffs) if diffs else None, excessive_speedup=bool(meta.get("excessive_speedup")),
                speedup=ref / runtime if runtime > 0 and ref > 0 else None)
    if not call.get("compiled"):
        side.update(status="fail", reason=f"compile failed: {meta.get('compilation_error_name', '')}: "
                                          f"{str(meta.get('compilation_error', ''))[:300]}")
    elif not call.get("correctness"):
        issue = meta.get("runtime_error") or meta.get("correctness_issue") or "incorrect"
        name = meta.get("runtime_error_name")
        side.update(status="fail", reason=f"{name + ': ' if name else ''}{str(issue)[:300]}"
                                          + (f" (max difference {max(diffs):.3g})" if diffs else ""))
    else:
        side.update(status="pass", reason=f"correct {meta.get('correctness_trials', '')}".strip()
                    + ("; excessive speed-up flagged" if side["excessive_speedup"] else ""))
    return side


def kb_build_verdict(call: dict) -> dict | None:
    """KernelBench's verdict where its build_compile_cache failed, else None (the evaluation then
    builds, or finds the build)."""
    if call.get("phase") == "done" and call.get("built") is False:
        return {"status": "fail", "compiled": False, "seconds": call.get("wall_s"), "log": call.get("log"),
                "reason": f"compile failed (build_compile_cache): {str(call.get('error'))[:300]}"}
    return None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
