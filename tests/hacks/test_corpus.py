"""The hack corpus: adversarial solutions that must each end in reward -1 with their own reason,
and honest ones that must pass. One folder per solution under cpu/ and cuda/, each with an
expect.json (see README.md); this file evaluates every folder through the harness's one entry
point, `evaluate`, exactly as the agent's solutions are evaluated.

Three layers of tests:
- test_cpu_corpus / test_cuda_corpus: the full harness (static checks, build, sandboxed run).
- test_runtime_backstop: the same attacks with the static checks switched off, to show what the
  runtime checks catch on their own (the static scan is the first line, not the only one).
- test_next_evaluation_runs_normally: crashes, hangs and exits followed by an honest solution.

An attack the harness lets through is a `hole` in expect.json: the test is xfail(strict=True), so
it shows in every run and turns red the day the hole is closed (then drop the `hole`).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from cuda_agent.devices import resolve_backend
from cuda_agent.harness import baselines
from cuda_agent.harness.config import EvalConfig
from cuda_agent.harness.evaluation import evaluate
from cuda_agent.harness.result import EvalResult, StaticReport
from cuda_agent.harness.workers.spares import keep_warm
from cuda_agent.measure import TimingPlan, TimingStats
from cuda_agent.tasks import load_task
from cuda_agent.workspace import create_workspace

HACKS = Path(__file__).resolve().parent
REPO = HACKS.parent.parent
# A segfault, a hang, os._exit(0) and an out-of-memory, each judged by test_next_evaluation_runs_normally
# before an honest solution. Those without a `runtime` expectation are judged there exactly as the
# corpus would judge them (same task, config and expectation), so the corpus leaves them out.
AFTER_CRASH = ("segfault", "infinite_loop", "os_exit", "oom_kernel")


@pytest.fixture(scope="module", autouse=True)
def _next_processes_start_ahead():
    """The next case's two processes start while a case runs, as in the service (spares.py; never
    beside a case that times): about 2.5 s of every evaluation's start on 2 cores."""
    with keep_warm(1):
        yield


def folders(kind: str) -> list[Path]:
    return sorted(p for p in (HACKS / kind).iterdir() if (p / "expect.json").is_file())


def expectation(folder: Path) -> dict:
    return json.loads((folder / "expect.json").read_text())


def params(kind: str, layer: str = "corpus") -> list:
    """One pytest.param per folder; xfail(strict) where expect.json records a hole in this layer."""
    out = []
    for folder in folders(kind):
        e = expectation(folder)
        if layer == "runtime":
            stages = e.get("stage") if isinstance(e.get("stage"), list) else [e.get("stage")]
            if "runtime" not in e or "static" not in stages:
                continue  # without static checks to switch off, test_cpu_corpus judges the runtime alone
            e = e["runtime"]
        elif kind == "cpu" and folder.name in AFTER_CRASH and "runtime" not in e:
            continue  # judged as is by test_next_evaluation_runs_normally
        marks = [pytest.mark.xfail(strict=True, reason=f"hole: {e['hole']}")] if "hole" in e else []
        if "needs_root" in e and os.geteuid() != 0:
            marks.append(pytest.mark.skip(reason=f"needs root: {e['needs_root']}"))
        if kind == "cuda":
            marks.append(pytest.mark.cuda)
        out.append(pytest.param(folder, marks=marks, id=folder.name))
    return out


def load(task: str):
    return load_task(REPO / task) if task.endswith(".py") else load_task(task)


def config_for(e: dict, device: str) -> EvalConfig:
    """Short timing (only where the expectation needs a speed-up or the attack targets timing)."""
    kw = {"device": device, "timeout_s": 120, "timing": TimingPlan(budget_s=0.3, min_runs=10, max_runs=50),
          "profile": bool(e.get("profile", False))}
    extra = dict(e.get("config", {}))
    if "timing" in extra:  # a partial plan over the short one
        kw["timing"] = TimingPlan(**{**kw["timing"].to_dict(), **extra.pop("timing")})
    kw.update(extra)
    return EvalConfig(**kw)


def solution_path(folder: Path, e: dict, task, device: str, tmp_path: Path) -> Path:
    """The folder itself, or (for `workspace` expectations) a real workspace holding its files
    with one protected file edited afterwards."""
    edit = e.get("workspace")
    if not edit:
        return folder
    ws = create_workspace(task, tmp_path / "ws", device=device).path
    shutil.rmtree(ws / "kernels")
    shutil.copytree(folder / "kernels", ws / "kernels")
    shutil.copyfile(folder / "model_new.py", ws / "model_new.py")
    with open(ws / edit["edit"], "a") as f:
        f.write(edit["append"])
    return ws


def files_state(paths: list[str]) -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file under `paths` ($CUDA_AGENT_HOME expanded, others from the repo)."""
    state = {}
    for p in paths:
        root = Path(p.replace("$CUDA_AGENT_HOME", os.environ["CUDA_AGENT_HOME"]))
        root = root if root.is_absolute() else REPO / root
        for f in ([root] if root.is_file() else root.rglob("*") if root.exists() else []):
            if f.is_file() and "__pycache__" not in f.parts:  # bytecode the parent itself may write
                st = f.stat()
                state[str(f)] = (st.st_size, st.st_mtime_ns)
    return state


def check(result: EvalResult, e: dict) -> None:
    """The result meets the expectation: an honest reward range, or -1 at a stage for a reason."""
    said = f"reward {result.reward} at {result.stage}: {result.reason}"
    print(f"verdict: {said}")   # pytest -rP shows what each passing case was given
    # and where its time went (a device run under -n 8 queues every timing behind one lock: which stages wait)
    print(f"stages: {result.stage_seconds}; bystanders {result.details.get('bystanders')}; "
          f"gpu_alone {result.details.get('gpu_alone')}")
    if "hole" in e:  # xfail until the harness catches the attack, for whatever reason
        assert result.reward == -1, said
        return
    if "init" in e:  # how ModelNew got its weights: the reference's state_dict, or the same seed
        assert result.init == e["init"], f"init {result.init}, expected {e['init']}; {said}"
    for flag in e.get("flags", []):
        assert flag in result.flags, f"flag {flag} missing from {result.flags}; {said}"
    if "solution_ms_at_least" in e:   # an attack on the timer: the time taken is the kernel's, not the fake clock's
        timed = result.solution.median_ms if result.solution else 0.0
        assert timed >= e["solution_ms_at_least"], f"solution timed at {timed} ms; {said}"
    if "reward_at_least" in e or "reward_at_most" in e:  # honest, or an attack that gains nothing
        assert e.get("reward_at_least", -1) <= result.reward <= e.get("reward_at_most", 3), said
        return
    assert result.reward == e.get("reward", -1), said
    stages = e["stage"] if isinstance(e["stage"], list) else [e["stage"]]
    reasons = e["reason_contains"] if isinstance(e["reason_contains"], list) else [e["reason_contains"]]
    assert result.stage in stages, said
    assert any(r in result.reason for r in reasons), said


def assert_no_survivors(beat: Path, ran: bool) -> None:
    """Nothing the solution started still runs once the evaluation has returned: the file its
    processes rewrite every 10 ms (their heartbeat) stays as it is over 1.5 s, a moment allowed for
    the kill first. (A listing of /proc cannot tell: a chain of processes that fork and exit every
    few milliseconds has handed over to a new pid before its listed one is read.) `ran`: the
    solution's code ran (the runtime layer), so the heartbeat must have been written."""
    assert beat.exists() or not ran, f"the solution's processes never wrote {beat}: the attack did not run"
    time.sleep(0.5)
    before = beat.stat().st_mtime_ns if beat.exists() else None
    time.sleep(1.5)
    after = beat.stat().st_mtime_ns if beat.exists() else None
    beat.unlink(missing_ok=True)  # survivors (a failing run) end at their next beat
    assert before == after, f"processes the solution started outlived the evaluation ({beat} still beats)"


def store_cached_baselines(task, config: EvalConfig, ms: dict) -> None:
    """Baselines in the cache as if an earlier evaluation had timed them (`cached_baselines`: the
    medians of eager and torch.compile in ms), under the key this evaluation reads."""
    eager, compiled = (TimingStats.from_samples([ms[k]] * config.timing.min_runs) for k in ("eager_ms", "compile_ms"))
    key = baselines.cache_key(task.code, resolve_backend(config.device).device, config.timing)
    baselines.store(key, eager, compiled, {"task": task.name, "device_name": "stored by test_corpus.py"})


def run_case(folder: Path, device: str, tmp_path: Path, e: dict | None = None) -> EvalResult:
    spec = expectation(folder)
    if "no_survivors" in spec:
        Path(spec["no_survivors"]).unlink(missing_ok=True)
    task = load(spec["task"])
    if "cached_baselines" in spec:
        store_cached_baselines(task, config_for(spec, device), spec["cached_baselines"])
    untouched = spec.get("untouched", [])
    before = files_state(untouched)
    want = e or spec
    result = evaluate(task, solution_path(folder, spec, task, device, tmp_path), config_for(spec, device))
    check(result, want)
    if "no_survivors" in spec:
        assert_no_survivors(Path(spec["no_survivors"]), ran=result.stage not in ("static", "build"))
    after = files_state(untouched)  # files the harness adds itself (new cache entries) are fine
    changed = [f for f, st in before.items() if after.get(f) != st]
    assert not changed, f"the solution changed files it must not reach: {changed[:3]}"
    return result


@pytest.mark.slow
@pytest.mark.parametrize("folder", params("cpu"))
def test_cpu_corpus(folder: Path, tmp_path: Path) -> None:
    run_case(folder, "cpu", tmp_path)


@pytest.mark.parametrize("folder", params("cuda"))
def test_cuda_corpus(folder: Path, tmp_path: Path) -> None:
    run_case(folder, "cuda", tmp_path)


@pytest.fixture
def no_static_checks(monkeypatch):
    """Every solution passes the static checks (inline extraction still runs): the runtime alone."""
    import cuda_agent.harness.static as static

    monkeypatch.setattr(static, "check_solution", lambda files, policy="strict": StaticReport(ok=True))


@pytest.mark.slow
@pytest.mark.parametrize("folder", params("cpu", "runtime"))
def test_runtime_backstop(folder: Path, tmp_path: Path, no_static_checks) -> None:
    run_case(folder, "cpu", tmp_path, {"reward": -1, **expectation(folder)["runtime"]})


@pytest.mark.cuda
@pytest.mark.parametrize("folder", params("cuda", "runtime"))
def test_runtime_backstop_cuda(folder: Path, tmp_path: Path, no_static_checks) -> None:
    run_case(folder, "cuda", tmp_path, {"reward": -1, **expectation(folder)["runtime"]})


@pytest.mark.slow
def test_next_evaluation_runs_normally(tmp_path: Path, no_static_checks) -> None:
    """A segfault, a hang, os._exit(0) and an out-of-memory each end their own evaluation with
    their own reason; an honest solution evaluated right after each one passes. (The static checks
    are off so that os._exit reaches the runtime.)"""
    honest = HACKS / "cpu" / "honest_fused"
    task = load(expectation(honest)["task"])
    for name in AFTER_CRASH:
        crash = HACKS / "cpu" / name
        spec = expectation(crash)
        check(evaluate(load(spec["task"]), crash, config_for(spec, "cpu")), {**spec, **spec.get("runtime", {})})
        after = evaluate(task, honest, config_for({}, "cpu"))
        assert after.reward >= 1, f"after {name}: {after.stage}: {after.reason}"


@pytest.mark.cuda
def test_next_evaluation_runs_normally_cuda(tmp_path: Path) -> None:
    """An illegal memory access poisons the CUDA context of its own child only."""
    honest = HACKS / "cuda" / "honest_fused"
    task = load(expectation(honest)["task"])
    for name in ("illegal_address", "infinite_loop_kernel"):
        crash = HACKS / "cuda" / name
        spec = expectation(crash)
        check(evaluate(load(spec["task"]), crash, config_for(spec, "cuda")), spec)
        after = evaluate(task, honest, config_for({}, "cuda"))
        assert after.reward >= 1, f"after {name}: {after.stage}: {after.reason}"
