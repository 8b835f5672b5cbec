"""The one entry point of the harness: evaluate a solution of a task.

Order: snapshot -> static checks -> build -> (child + reference worker) weights -> correctness on
input pairs run back to back -> timing -> reward. Any failure ends it with reward -1, the stage it
stopped at, and one line a person understands. The conversation with the two processes, from the
weights to the timing: session.py.
"""

from __future__ import annotations

import os
import shutil
import time
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Iterator

from cuda_agent.devices import Backend, machine, resolve_backend
from cuda_agent.harness.baselines import TIMING_METHOD
from cuda_agent.harness.config import EvalConfig
from cuda_agent.harness.result import BuildResult, EvalResult, Measured
from cuda_agent.harness.profiling import profile
from cuda_agent.harness.reward import milestone
from cuda_agent.harness.session import Session, Stop, new_seed, timed
from cuda_agent.harness.solution import Solution, SolutionError, build_solution, snapshot
from cuda_agent.harness.workers.spares import finish, take_pair, task_digest
from cuda_agent.harness.scratch import scratch_folder
from cuda_agent.home import subdir
from cuda_agent.sandbox import Exchange, sandbox_user
from cuda_agent.tasks import Task


def _private_dir() -> Path:
    return scratch_folder(subdir("tmp"), "snap")


@contextmanager
def _verdict(task: Task, config: EvalConfig) -> Iterator[tuple[EvalResult, Path]]:
    """A verdict in the making and a private folder for the snapshot: a Stop ends the block with
    reward -1 at its stage, the folder is removed and the seconds taken are recorded."""
    t0 = time.monotonic()
    result = EvalResult.failed(task.name, "static", "", config, device="cpu")  # until it passes
    snap = _private_dir()
    try:
        yield result, snap
    except Stop as s:
        result.stage, result.reason, result.correct, result.fault = s.stage, s.reason, False, s.fault  # type: ignore[assignment]
        result.reward, result.milestone = config.reward.failed, "failed"
    finally:
        shutil.rmtree(snap, ignore_errors=True)
        result.seconds = round(time.monotonic() - t0, 3)


def evaluate(task: Task, solution: str | Path, config: EvalConfig | None = None,
             keep: Path | None = None) -> EvalResult:
    """Static checks, build, sandboxed correctness, timing and reward for `solution`: a workspace
    folder (model_new.py + kernels/) or a single KernelBench-style model_new.py using load_inline.
    `keep`: a folder where the snapshot that was judged is copied (the files of the verdict, never
    a second read of `solution`, which may have changed meanwhile)."""
    config = config or EvalConfig()
    with _verdict(task, config) as (result, snap):
        backend = resolve_backend(config.device)
        result.device = backend.device
        sol = _check_and_build(task, Path(solution), backend, config, snap, result, keep)
        _run(task, sol, backend, config, result)
    return result


def prebuild(task: Task, solution: str | Path, config: EvalConfig | None = None,
             backend: Backend | None = None) -> EvalResult | None:
    """The static checks and the build of `evaluate`, ahead of it and without a GPU (a build
    worker's job): the objects land in the build cache, where `evaluate` finds them. Returns the
    verdict `evaluate` would give when the solution fails here, else None. `backend`: the target
    (a GPU's arch, given where no GPU is visible); default: this machine's."""
    config = config or EvalConfig()
    with _verdict(task, config) as (result, snap):
        backend = backend or resolve_backend(config.device)
        result.device = backend.device
        _check_and_build(task, Path(solution), backend, config, snap, result, None)
        return None
    return result  # a Stop ended the block: the verdict evaluate would give


def _check_and_build(task: Task, path: Path, backend: Backend, config: EvalConfig, snap: Path,
                     result: EvalResult, keep: Path | None) -> Solution:
    from cuda_agent.harness.static import check_solution

    tampered = _tampered(path)
    if tampered:
        raise Stop("static", tampered)
    try:
        sol = snapshot(path, snap / "solution")
    except SolutionError as e:
        raise Stop("static", str(e)) from None
    if keep is not None:
        shutil.copytree(sol.root, keep, dirs_exist_ok=True)
    with timed(result, "static"):
        report = check_solution(sol.files, config.policy)  # type: ignore[arg-type]
    result.findings = report.findings
    if not report.ok:
        raise Stop("static", f"rule broken: {report.reason}")
    result.stage = "build"
    with timed(result, "build"):
        build, finding = build_solution(sol, backend, config.build_timeout_s, config.policy, config.quiet_host)
    result.build = build
    if finding is not None:
        result.findings.append(finding)
        raise Stop("static", f"rule broken: {finding}")
    if not build.ok:
        raise Stop("build", build.reason)
    if build.module_errors:  # relaxed: load_inline raises these in the child, where the solution may catch them
        result.flags.append("inline_build_failed")
        result.details["module_errors"] = dict(build.module_errors)
    return sol


def _tampered(path: Path) -> str | None:
    """A reason if `path` is a workspace whose protected files or manifest were modified."""
    from cuda_agent.workspace.manifest import MANIFEST, ManifestError, read_manifest, tampered_files

    if not (path.is_dir() and (path / MANIFEST).exists()):
        return None
    try:
        manifest, _ = read_manifest(path)
    except ManifestError as e:
        return str(e)
    bad = tampered_files(path, manifest)
    return f"protected file(s) modified: {', '.join(bad)} (the harness's files must not be edited)" if bad else None


def _run(task: Task, sol: Solution, backend: Backend, config: EvalConfig, result: EvalResult) -> None:
    user, note = sandbox_user()
    if note:
        result.flags.append("weak_isolation")
        result.details["isolation"] = note
    result.stage = "run"
    result.measured = Measured(**machine(backend.device), timing_method=TIMING_METHOD)
    digest = task_digest(task.code)
    with timed(result, "pair"):  # spares topped up here; where a spare was not ready, processes started now
        pair = take_pair(user, backend, config, digest)
    result.details["reference_jobs"] = pair.reference.jobs  # 1: a new reference worker; more: one kept for the task
    if pair.note:
        result.details["spares"] = pair.note
    if user is not None and pair.slot is None:
        result.flags.append("shared_sandbox_user")
        result.details["isolation"] = "no sandbox user of its own was free: the child shares one with other children"
    reusable = False  # the reference worker, for the task's next evaluation (spares.finish)
    try:
        job = _write_job_files(task, sol, result.build, pair.exchange, backend, config)
        session = Session(pair.ref, pair.child, config, job, time.monotonic() + config.timeout_s)
        with ExitStack() as held:
            session.hold_device(held, result, backend.device)   # shared: behind another evaluation's timing
            with timed(result, "start"):
                session.start(result)
                with timed(result, "start.route"):
                    session.choose_route(backend, result)
            with timed(result, "correctness"):
                session.correctness(result)
        # the child is asked nothing without the lock (another's timing may have it stopped): the recheck, last,
        # inside the timing's hold where there is one
        if config.profile:
            profile(session, task, backend, result, last=lambda: session.recheck(result))
        else:
            with ExitStack() as held:
                session.hold_device(held, result, backend.device)
                session.recheck(result)
        reusable = True
    except Stop as s:
        reusable = s.fault is None  # a verdict on the solution, the reference worker sound
        raise
    finally:
        with timed(result, "finish"):  # the child closed, the reference worker asked whether it stays
            finish(pair, digest, reusable)
    _score(result, config)


def _write_job_files(task: Task, sol: Solution, build: BuildResult | None, ex: Exchange, backend: Backend,
                     config: EvalConfig) -> dict:
    assert build is not None and (build.module_path or build.module_errors)
    paths = build.modules or ({build.module_name: build.module_path} if build.module_path else {})
    modules = {}
    for name, path in paths.items():
        so = ex.public / f"{name}.so"
        shutil.copyfile(path, so)
        os.chmod(so, 0o644)
        modules[name] = str(so)
    (ex.public / "model_new.py").write_text(sol.model_new)
    (ex.public / "model.py").write_text(task.code)
    # The reference worker reads its own copy: the child owns `public` and could replace the file
    # there before the reference has read it.
    (ex.private / "model.py").write_text(task.code)
    for p in (ex.public / "model_new.py", ex.public / "model.py"):
        os.chmod(p, 0o644)
    # The reference's weights go where the child can read but not write: in its own folder it could plant
    # state.pt as a link before the reference (the harness's user) writes it, and have any file overwritten.
    weights = ex.root / "weights"
    weights.mkdir(mode=0o755)
    return {"device": backend.device, "policy": config.policy, "kind": sol.kind, "modules": modules,
            "module_errors": dict(build.module_errors), "solution_path": str(ex.public / "model_new.py"),
            "task_path": str(ex.public / "model.py"), "reference_task_path": str(ex.private / "model.py"),
            "public": str(ex.public), "state_path": str(weights / "state.pt"), "weights_seed": new_seed()}


def _score(result: EvalResult, config: EvalConfig) -> None:
    m = milestone(result.correct, result.speedup_vs_eager, result.speedup_vs_compile, config.reward)
    result.reward, result.milestone, result.stage = m.reward, m.name, "done"
    result.reason = f"{result.reason}; {m.name.replace('_', ' ')}: {m.detail}" if result.reason else m.detail


def compile_solution(solution: str | Path, config: EvalConfig | None = None) -> BuildResult:
    """Static checks and build only (the workspace's `compile` command): a failed static check
    comes back as a failed build whose errors list the findings."""
    from cuda_agent.harness.static import check_solution

    config = config or EvalConfig()
    snap = _private_dir()
    try:
        sol = snapshot(solution, snap / "solution")
        report = check_solution(sol.files, config.policy)  # type: ignore[arg-type]
        if not report.ok:
            return BuildResult(ok=False, errors="\n".join(str(f) for f in report.findings))
        build, finding = build_solution(sol, resolve_backend(config.device), config.build_timeout_s, config.policy,
                                        config.quiet_host)
        return BuildResult(ok=False, errors=str(finding)) if finding else build
    except SolutionError as e:
        return BuildResult(ok=False, errors=str(e))
    finally:
        shutil.rmtree(snap, ignore_errors=True)


def read_solution(solution: str | Path, dest: Path) -> dict[str, str]:
    """What `evaluate` would judge, read once (for an evaluation in another process): a
    workspace's protected files checked against its manifest, then the solution's files
    snapshotted into `dest` and returned (relative path -> text). Raises SolutionError with the
    one-line reason `evaluate` would give."""
    path = Path(solution)
    tampered = _tampered(path)
    if tampered:
        raise SolutionError(tampered)
    return snapshot(path, dest).files


def workspace_task(workspace: str | Path) -> tuple[Task, str, bool]:
    """The task, device and whether the manifest is signed, as a workspace's manifest records them;
    SolutionError when it cannot be read."""
    from cuda_agent.workspace.manifest import ManifestError, read_manifest

    try:
        manifest, signed = read_manifest(Path(workspace))
    except ManifestError as e:
        raise SolutionError(str(e)) from None
    task = Task(name=manifest.task_name, code=manifest.task_code, origin=manifest.task_origin,
                level=manifest.level, problem_id=manifest.problem_id)
    return task, manifest.device, signed


def evaluate_workspace(workspace: str | Path, config: EvalConfig | None = None,
                       keep: Path | None = None) -> EvalResult:
    """Evaluate a workspace against the task recorded in its signed manifest (the workspace's
    `verify` command uses profile=False, `profile` uses profile=True)."""
    config = config or EvalConfig()
    try:
        task, device, signed = workspace_task(workspace)
    except SolutionError as e:
        return EvalResult.failed("?", "static", str(e), config, device="cpu")
    if config.device is None:
        config = replace(config, device=device)
    result = evaluate(task, workspace, config, keep)
    if not signed:
        result.flags.append("manifest_unsigned")
    return result
