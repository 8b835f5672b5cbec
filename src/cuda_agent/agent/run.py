"""Runs: one task (`optimize`), many at once (`optimize_many`), and the bundled demo (`demo`); and
`open_run`, the one place a run is wired, which the RL agent loop (cuda_agent.rl.rollout.agent_loop) uses too.

A run's output folder holds `workspace/` (where the model worked), `solution/` (the best solution
the harness verified), `solution.json`, `trajectory.jsonl`, `report.json` and `report.md`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from cuda_agent.agent.config import AgentConfig, load_config
from cuda_agent.agent.evaluator import Evaluator, WorkspaceEvaluator
from cuda_agent.agent.loop import Agent, Outcome, Step
from cuda_agent.agent.progress import NoProgress, Progress
from cuda_agent.agent.replay import ReplayModel
from cuda_agent.agent.report import RunResult, write_report, write_summary
from cuda_agent.agent.solution import SolutionKeeper
from cuda_agent.agent.tools import Tools
from cuda_agent.agent.trajectory import Resumed, TrajectoryWriter, load_for_resume
from cuda_agent.devices import resolve_backend
from cuda_agent.harness import TimingPlan
from cuda_agent.llm import Endpoint, Model, OpenAIModel, TextProtocolModel
from cuda_agent.sandbox import (CommandRunner, claim_tool_user, prepare_workspace, reachable_by_others,
                              shared_workspace_dir)
from cuda_agent.service import EvalService, ServiceSettings, in_flight, using
from cuda_agent.tasks import EXAMPLES_DIR, Task, load_task
from cuda_agent.usage import UsageError
from cuda_agent.workspace import create_workspace, read_manifest

DEMO_TASK = EXAMPLES_DIR / "scale_bias_relu.py"
DEMO_TRAJECTORIES = EXAMPLES_DIR / "trajectories"
_FILE_TOOLS = ("write_file", "edit_file")


def make_model(policy: str | None = None, model: str | None = None, base_url: str | None = None,
               api_key: str | None = None, config: AgentConfig | None = None,
               on_retry: Callable[[str], None] | None = None, check: bool = False) -> Model:
    """`replay:FILE` re-issues a recorded run; otherwise an OpenAI-compatible endpoint (flags, then
    the environment), asked in native tool calling or in the text protocol as the config says, each
    of its retries told to `on_retry`. `check`: fail now if nothing listens at the endpoint."""
    config = config or load_config()
    if policy and policy.startswith("replay:"):
        return ReplayModel(policy.removeprefix("replay:"))
    if policy not in (None, "", "llm"):
        raise UsageError(f"unknown policy {policy!r}: use `replay:FILE`, or leave it out to ask --model")
    endpoint = Endpoint.resolve(model, base_url, api_key)
    if check:
        endpoint.check()
    llm: Model = OpenAIModel(endpoint, config.model, on_retry)
    if config.model.protocol == "text":
        llm = TextProtocolModel(llm, config.prompts.text_protocol)
    elif config.model.protocol != "native":
        raise UsageError(f"unknown tool protocol {config.model.protocol!r}: use 'native' or 'text'")
    return llm


def optimize(task: Task | str | Path, *, model: str | None = None, base_url: str | None = None,
             api_key: str | None = None, policy: str | None = None, device: str | None = None,
             out: str | Path | None = None, config: AgentConfig | None = None, resume: bool = False,
             force: bool = False, progress: Progress | None = None, timing: TimingPlan | None = None,
             service: EvalService | None = None,
             evaluator: Callable[[Path, str, TimingPlan], Evaluator] | None = None) -> RunResult:
    """Let a model make `task` fast in a fresh workspace (or continue the run in `out` with `resume`)
    and leave the best verified solution, the reports and the trajectory in `out`. `timing`: how
    profile times (the harness's default plan if None). Verify and profile go through `service`
    (the evaluation service; one is started for the run if None); `evaluator` replaces them with
    another maker of an Evaluator for a workspace, a device and a timing plan (tests' stand-ins)."""
    if evaluator is None:
        with using(service, ServiceSettings(device=device)) as svc:
            return optimize(task, model=model, base_url=base_url, api_key=api_key, policy=policy, device=device,
                            out=out, config=config, resume=resume, force=force, progress=progress, timing=timing,
                            evaluator=lambda ws, dev, plan: WorkspaceEvaluator(ws, dev, plan, svc))
    task = task if isinstance(task, Task) else load_task(task)
    config = config or load_config()
    out = Path(out) if out else Path("runs") / f"{task.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    progress = progress or NoProgress()
    llm = make_model(policy, model, base_url, api_key, config,
                     on_retry=lambda note: progress.update(task.name, status="running", action=note))
    device = resolve_backend(device).device if device or not resume else None  # checked before out is touched
    resumed = _prepare_out(task, out, resume, force)
    device = device or resolve_backend(resumed.header.get("device") if resumed else None).device

    with open_run(task, out, device, config, evaluator, timing) as run:
        keeper = run.keeper

        def on_step(step: Step) -> None:
            progress.update(task.name, status="running", turn=step.turn, action=step.action,
                            tokens=step.tokens, elapsed=step.elapsed, best=keeper.summary())

        if resumed is None:
            messages, state = run.start(llm.name), {}
        else:
            messages, state = run.resume(resumed, llm.name)
        progress.update(task.name, status="running")
        outcome = run.work(llm, messages, state, on_step, progress)
        result = _result(task.name, outcome, keeper, llm.name, device, out, run.isolation)
        run.finish(outcome)
    write_report(result)
    progress.update(task.name, status=outcome.status, best=keeper.summary(), elapsed=outcome.elapsed)
    return result


def optimize_many(tasks: Sequence[Task], *, out: str | Path, parallel: int = 1,
                  progress: Progress | None = None, service: EvalService | None = None,
                  **options: Any) -> list[RunResult]:
    """`optimize` for each task, `parallel` conversations at a time, their evaluations through one
    evaluation service (`service`, or one started for them), each in `out/<task>`; a task that
    cannot run gets a result with status `error`, the others go on."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if service is None and options.get("evaluator") is None:
        with EvalService(ServiceSettings(device=options.get("device"))) as svc:
            return optimize_many(tasks, out=out, parallel=parallel, progress=progress, service=svc, **options)

    def one(task: Task) -> RunResult:
        folder = out / (f"level{task.level}_{task.name}" if task.level is not None else task.name)
        try:
            return optimize(task, out=folder, progress=progress, service=service, **options)
        except Exception as e:  # one task's setup failing must not stop the others
            if progress is not None:
                progress.update(task.name, status="error", action=str(e)[:80])
            return _error_result(task.name, folder, str(e))

    left = list(reversed(range(len(tasks))))   # indices, so that the results keep the tasks' order
    results: list[RunResult] = [None] * len(tasks)  # type: ignore[list-item]
    for i, done in in_flight(parallel, lambda: left.pop() if left else None, lambda i: one(tasks[i]), name="optimize"):
        results[i] = done.result()
    write_summary(out, results)
    return results


def demo(*, device: str | None = None, out: str | Path | None = None, model: str | None = None,
         base_url: str | None = None, api_key: str | None = None, progress: Progress | None = None,
         config: AgentConfig | None = None) -> RunResult:
    """The whole loop on the bundled example (y = relu(x * scale + bias)): the bundled trajectory
    replayed on this machine's backend, or a real model when `model` is given."""
    device = resolve_backend(device).device
    policy = None if model else f"replay:{DEMO_TRAJECTORIES / f'scale_bias_relu.{device}.jsonl'}"
    if out is None:
        out = tempfile.mkdtemp(prefix="cuda-agent-demo-")
        os.chmod(out, 0o755)  # the tool user must be able to enter the workspace inside it
    return optimize(load_task(DEMO_TASK), model=model, base_url=base_url, api_key=api_key, policy=policy,
                    device=device, out=out, config=config, progress=progress)


# --- one run's wiring, shared by optimize() and the RL agent loop (cuda_agent.rl.rollout.agent_loop) -------


@dataclass
class Run:
    """A run wired: the task's workspace (commands isolated as `config.run` says), the keeper of the
    best verified solution, the tools bound to both, and the trajectory, all under `out`. `open_run`
    builds it; `start` (or `resume`), `work` and `finish` are a run's three steps."""

    task: Task
    out: Path
    device: str
    config: AgentConfig
    workspace: Path
    fresh: bool            # the workspace was made now (not found from an earlier run)
    keeper: SolutionKeeper
    tools: Tools
    trajectory: TrajectoryWriter
    isolation: str         # how commands are isolated, as found by running one
    initial: str = ""      # content_hash of the solution the run started from

    def start(self, model: str) -> list[dict[str, Any]]:
        """A new conversation: records the header and the first messages (system, task) and returns them."""
        self.initial = self.keeper.current_content()
        self.trajectory.write("run", task=self.task.name, task_sha256=self.task.sha256, task_origin=self.task.origin,
                              device=self.device, model=model, workspace=str(self.workspace),
                              isolation=self.isolation, initial_content=self.initial,
                              limits=vars(self.config.limits), started_at=time.time())
        messages = _first_messages(self.task, self.device, self.workspace, self.config)
        for m in messages:
            self.trajectory.write("message", turn=0, elapsed=0.0, message=m)
        return messages

    def resume(self, resumed: Resumed, model: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The conversation `resumed` left, and the loop's state (turns, usage, elapsed) to go on from."""
        self.initial = resumed.header.get("initial_content", "")
        self.trajectory.write("resume", model=model, at=time.time(), turns=resumed.turns)
        if self.fresh:
            _redo_file_changes(resumed, self.tools)
        return resumed.messages, {"turns": resumed.turns, "usage": resumed.usage, "elapsed": resumed.elapsed}

    def work(self, model: Model, messages: list[dict[str, Any]], state: dict[str, Any] | None = None,
             on_step: Callable[[Step], None] | None = None, progress: Progress | None = None) -> Outcome:
        """The agent's loop until it is done or out of budget, then the final profile if the config asks."""
        outcome = Agent(model, self.tools, self.config, self.trajectory, on_step).run(messages, **(state or {}))
        if self.config.run.final_profile and outcome.status != "interrupted":
            _final_profile(self.tools, self.keeper, self.initial, self.trajectory, progress or NoProgress(),
                           self.task.name)
        return outcome

    def finish(self, outcome: Outcome) -> None:
        """Records the run's end: its status, turns, tokens and best verdict."""
        b = self.keeper.best
        self.trajectory.write("end", status=outcome.status, error=outcome.error, turns=outcome.turns,
                              usage=outcome.usage.to_dict(), elapsed=round(outcome.elapsed, 3),
                              best=b.result if b else None)


@contextmanager
def open_run(task: Task, out: Path, device: str, config: AgentConfig,
             evaluator: Callable[[Path, str, TimingPlan], Evaluator], timing: TimingPlan | None = None) -> Iterator[Run]:
    """Wire a run of `task` in `out` (its workspace made there unless one is left from an earlier run):
    a tool user of its own when `config.run.isolation`, the keeper (picking up a resumed run's state),
    the tools with the harness `evaluator(workspace, device, timing)`, and the trajectory. On the way
    out the trajectory is closed, the tool user freed and the staging folder removed."""
    out.mkdir(parents=True, exist_ok=True)
    slot = claim_tool_user() if config.run.isolation else None
    runner = trajectory = None
    try:
        workspace, fresh = _workspace(task, out, device, slot.user if slot is not None else None)
        protected = set(read_manifest(workspace)[0].protected)
        runner = CommandRunner(workspace, slot)
        if slot is not None:
            prepare_workspace(workspace, slot.user, protected)
        keeper = SolutionKeeper(workspace, out)
        keeper.restore()
        tools = Tools(workspace, evaluator(workspace, device, timing or TimingPlan()), keeper, runner,
                      config.limits, config.prompts, protected)
        trajectory = TrajectoryWriter(out / "trajectory.jsonl")
        yield Run(task, out, device, config, workspace, fresh, keeper, tools, trajectory, runner.describe())
    finally:
        if trajectory is not None:
            trajectory.close()
        if runner is not None:
            runner.close()
        elif slot is not None:
            slot.release()
        shutil.rmtree(out / ".staging", ignore_errors=True)


# --- the pieces of a run ---------------------------------------------------------------------


def _prepare_out(task: Task, out: Path, resume: bool, force: bool) -> Resumed | None:
    """The state to resume, or None for a new run in an empty `out`."""
    trajectory = out / "trajectory.jsonl"
    if resume:
        if not trajectory.exists():
            raise FileNotFoundError(f"{out} holds no trajectory.jsonl to resume; leave out --resume to start a run")
        resumed = load_for_resume(trajectory)
        if resumed.header.get("task_sha256") != task.sha256:
            raise UsageError(f"{out} holds a run of {resumed.header.get('task')!r} with other code than "
                             f"{task.name!r}; resume it with the same task")
        return resumed
    if out.exists() and any(out.iterdir()):
        if not force:
            raise FileExistsError(f"{out} is not empty: pass --resume to continue its run, --force to "
                                  "start over, or choose another --out")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    return None


def _workspace(task: Task, out: Path, device: str, user: Any) -> tuple[Path, bool]:
    """out/workspace, made if missing (True) — in a shared folder, linked from out/, when the tool
    user could not enter `out`."""
    link = out / "workspace"
    if link.exists():
        return link.resolve(), False
    dest = link
    if user is not None and not reachable_by_others(out):
        dest = shared_workspace_dir(task.name)
        link.unlink(missing_ok=True)
        link.symlink_to(dest, target_is_directory=True)
    create_workspace(task, dest, device, overwrite=True)
    return dest.resolve(), True


def _first_messages(task: Task, device: str, workspace: Path, config: AgentConfig) -> list[dict[str, Any]]:
    p, limits = config.prompts, config.limits
    system = p.system.format(skill=(workspace / "SKILL.md").read_text(), max_turns=limits.max_turns,
                             bash_timeout=f"{limits.bash_timeout_s:g}")
    return [{"role": "system", "content": system},
            {"role": "user", "content": p.task.format(task_name=task.name, device=device)}]


def _redo_file_changes(resumed: Resumed, tools: Tools) -> None:
    """A resumed run whose workspace is gone: write the files again as the recorded calls did."""
    for m in resumed.messages:
        for call in m.get("tool_calls") or []:
            if call["function"]["name"] in _FILE_TOOLS:
                tools.execute(call["function"]["name"], call["function"]["arguments"])


def _final_profile(tools: Tools, keeper: SolutionKeeper, initial: str,
                   trajectory: TrajectoryWriter, progress: Progress, name: str) -> None:
    """Profile the workspace as the model left it, unless it is untouched or was profiled as it is."""
    content = keeper.current_content()
    if content == initial or content in keeper.profiled:
        return
    progress.update(name, action="final profile")
    obs = tools.execute("profile", "")
    trajectory.write("final_evaluation", harness=obs.record, text=obs.text)


def _result(name: str, outcome: Outcome, keeper: SolutionKeeper, model: str, device: str, out: Path,
            isolation: str) -> RunResult:
    b = keeper.best
    return RunResult(
        task=name, status=outcome.status, reward=b.reward if b else -1.0, correct=b is not None,
        milestone=b.milestone if b else "failed", speedup_vs_eager=b.speedup_vs_eager if b else None,
        speedup_vs_compile=b.speedup_vs_compile if b else None, turns=outcome.turns,
        tokens=outcome.usage.total_tokens, prompt_tokens=outcome.usage.prompt_tokens,
        completion_tokens=outcome.usage.completion_tokens, seconds=round(outcome.elapsed, 3),
        evaluations=keeper.evaluations, model=model, device=device, out=str(out),
        solution=str(keeper.dir) if b else None, isolation=isolation, error=outcome.error,
        best=b.result if b else None)


def _error_result(name: str, out: Path, error: str) -> RunResult:
    return RunResult(task=name, status="error", reward=-1.0, correct=False, milestone="failed",
                     speedup_vs_eager=None, speedup_vs_compile=None, turns=0, tokens=0, prompt_tokens=0,
                     completion_tokens=0, seconds=0.0, evaluations=0, model="", device="", out=str(out),
                     solution=None, error=error)
