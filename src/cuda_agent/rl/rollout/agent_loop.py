"""verl 0.9.1 agent loops that run cuda-agent's own agent, for agentic PPO and value pretraining.

- `CudaAgentLoop` (agent name `cuda_agent`): one trajectory per dataset row. The row's task gets a
  run folder wired exactly as `optimize()` wires one (`agent.run.open_run`: workspace, isolation,
  SolutionKeeper, tools, trajectory.jsonl), and the agent's own loop (`agent.loop.Agent`, in a
  thread) works in it, its model being the policy behind verl's rollout server (`VerlTokenModel`).
  The reward is the best milestone the harness verified during the run (-1 nothing verified, 1
  correct, 2 faster than eager, 3 faster than torch.compile); a harness error or a timed-out
  evaluation is never verified, so never positive.
- `ReplayAgentLoop` (agent name `cuda_agent_replay`): a recorded trajectory.jsonl turned into the
  same tokens and masks by the same builder (`TokenTrajectory`), without a server, its reward read
  from the recorded verdicts: value pretraining on fixed trajectories (rollout `null`).

A row may bring its own starting point (the fill family's multi-turn form, rl/data/fill_agent.py):
`extra_info.start_files` (JSON text, path -> content) replace the workspace's example kernel, and
`extra_info.task_prompt` the agent config's task message. Both loops report when a trajectory first
passed (`first_pass_turn`, 0 if never; `pass_turn1` among the numbers verl averages in validation).

Load them with `actor_rollout_ref.rollout.agent.agent_loop_config_path=<cuda_agent/rl/rollout/agent_loops.yaml>`
(verl reads the list in every agent-loop worker; importing this module registers the names with
default options only where no YAML set them) and pick one per row (`agent_name` column) or for all
(`actor_rollout_ref.rollout.agent.default_agent_loop`). The YAML entries carry the loops' options
(`LoopSettings`): the agent config overlay, the harness device, the evaluator (the service's
options, see rl/rollout/evaluation.py), the runs folder.

Budgets in RL: the agent config's `max_turns` (or `multi_turn.max_assistant_turns` when set) and
`max_seconds`; the context is verl's token budget, prompt_length for the first messages and
response_length for everything after, counted exactly by the tokens, and a trajectory ends when it
is spent (status `max_context`; the calls of the reply that spent it still run, as the model wrote
them, and their verdicts count, but their outputs are not in the tokens). Old tool outputs are
never shortened (compaction off): the tokens are append-only. The
final profile of unverified work is off unless `final_profile: true`, so the reward is what the
model's own verify and profile calls earned, as its system prompt says.

The tools and their limits are the agent's own (agent/tools.py, agent/config.toml: a tool output
keeps `max_output_chars`); verl's `multi_turn.format`, `max_tool_response_length`, tool configs and
`raw_prompt` are not used: the first messages are those `optimize()` sends, built from the row's
task and its workspace (SKILL.md rendered for the device), so training sees what inference sends.

Limits: the policy's text must follow the hermes tool-call format of Qwen-style chat templates
(tested with the tiny model's template; Qwen2.5's own template is expected to behave the same, untested);
thinking models (Qwen3 `<think>`) are not handled. HF generate (rollout `hf`) is for small models;
production rollouts need vLLM or SGLang.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Iterable

from verl.experimental.agent_loop.agent_loop import (AgentLoopBase, AgentLoopMetrics, AgentLoopOutput,
                                                     _agent_loop_registry)

from cuda_agent.agent.config import AgentConfig, load_config, override
from cuda_agent.agent.loop import Outcome
from cuda_agent.agent.run import Run, open_run
from cuda_agent.agent.solution import SolutionKeeper
from cuda_agent.agent.tools import ToolError, Tools
from cuda_agent.agent.trajectory import read_messages, read_records
from cuda_agent.devices import resolve_backend
from cuda_agent.harness import EvalResult, RewardSchedule, TimingPlan
from cuda_agent.home import subdir
from cuda_agent.rl.data.rft import first_pass
from cuda_agent.rl.rollout.chat_template import token_builder
from cuda_agent.rl.rollout.evaluation import EVALUATORS, RL_TIMING, make_evaluator_factory
from cuda_agent.rl.rollout.token_model import VerlTokenModel
from cuda_agent.rl.rollout.token_trajectory import TokenTrajectory
from cuda_agent.tasks import Task, load_task
from cuda_agent.tasks.validate import validate_source

TOOL_SCHEMAS = Tools.schemas
NEVER_COMPACT = 1e9   # limits.compact_at: the context (at most 1x its budget) never reaches it


@dataclass(frozen=True)
class LoopSettings:
    """The options of the `cuda_agent` and `cuda_agent_replay` entries in agent_loops.yaml."""

    agent_config: str | None = None   # a TOML laid over agent/config.toml, as `optimize --config`
    device: str | None = None         # the harness's backend, cuda | cpu; None: this machine's
    evaluator: str = "service"        # service (rl/rollout/evaluation.py)
    service: dict | None = None       # ServiceSettings fields for the service
    runs_dir: str | None = None       # where run folders go; None: $CUDA_AGENT_HOME/rl_runs
    keep_workspace: bool = False      # keep each run's workspace/ (trajectory and solution are always kept)
    final_profile: bool = False       # profile unverified work at the end, and count that verdict
    # how verify and profile time: RL's one plan, as the single-turn reward's (rl/rollout/evaluation.py);
    # in agent_loops.yaml, `timing: {budget_s: ...}` (TimingPlan's fields, laid over RL_TIMING)
    timing: TimingPlan = RL_TIMING

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> "LoopSettings":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(f"cuda_agent loop: unknown option(s) {', '.join(unknown)} in agent_loops.yaml; "
                             f"known: {', '.join(sorted(known))}")
        if "service" in options and options["service"] is not None:
            options = dict(options, service=_plain(options["service"]))
        if options.get("timing") is not None and not isinstance(options["timing"], TimingPlan):
            options = dict(options, timing=replace(RL_TIMING, **_plain(options["timing"])))  # laid over RL's
        settings = cls(**options)
        if settings.evaluator not in EVALUATORS:
            raise ValueError(f"cuda_agent loop: evaluator {settings.evaluator!r}; use one of {', '.join(EVALUATORS)}")
        return settings


@dataclass(frozen=True)
class Verdict:
    """What a run earned: its best verified milestone, or `failed`."""

    reward: float
    milestone: str
    correct: bool


def best_verdict(results: Iterable[dict[str, Any] | None], schedule: RewardSchedule = RewardSchedule()) -> Verdict:
    """The best of a run's harness verdicts (EvalResult dicts) that counts: verified by the harness
    and not a harness error. Nothing counts: `failed`, `schedule.failed` (-1)."""
    best = Verdict(schedule.failed, "failed", False)
    for r in results:
        if not r or not r.get("correct") or EvalResult.written_harness_error(r):
            continue
        if not best.correct or float(r["reward"]) > best.reward:
            best = Verdict(float(r["reward"]), str(r.get("milestone", "correct")), True)
    return best


def task_from_row(extra_info: dict[str, Any] | None) -> Task:
    """The task a dataset row names in `extra_info`: `task` = {name, code[, level, problem_id,
    origin]}, or `task_path` (a .py file, or a task source with `task_name` picking one task)."""
    info = extra_info or {}
    if isinstance(info.get("task"), dict):
        t = info["task"]
        where = f"dataset row {info.get('index', '?')} (extra_info.task)"
        if not isinstance(t.get("name"), str) or not isinstance(t.get("code"), str):
            raise ValueError(f"{where}: needs the text fields `name` and `code`")
        validate_source(t["code"], where)
        return Task(name=t["name"], code=t["code"], origin=str(t.get("origin") or where),
                    level=_int(t.get("level")), problem_id=_int(t.get("problem_id")))
    if info.get("task_path"):
        name = info.get("task_name")
        return load_task(name, info["task_path"]) if name else load_task(info["task_path"])
    raise ValueError(f"dataset row {info.get('index', '?')}: extra_info names no task; give extra_info.task = "
                     "{name, code} or extra_info.task_path (and task_name)")


def rl_config(config: AgentConfig, rollout: Any, final_profile: bool) -> AgentConfig:
    """The agent's config under RL's rules: the context budget is verl's (prompt + response length),
    never compacted, turns capped by multi_turn.max_assistant_turns when it is set; a reply without a
    tool call ends the trajectory (no format reminders: the policy's choice is what it learns from)."""
    max_turns = rollout.multi_turn.get("max_assistant_turns") or config.limits.max_turns
    return override(config, limits={"compact_at": NEVER_COMPACT, "max_turns": int(max_turns),
                                    "max_context_tokens": int(rollout.prompt_length + rollout.response_length)},
                    model={"format_reminders": 0}, run={"final_profile": final_profile})


class CudaAgentLoop(AgentLoopBase):
    """One trajectory of cuda-agent's agent on a dataset row's task, sampled from the policy."""

    def __init__(self, *args: Any, tools: Any = None, name: str | None = None, **kwargs: Any):
        self.settings = LoopSettings.from_options(_pop_options(kwargs))  # `tools`, `name`: verl's, unused
        super().__init__(*args, **kwargs)
        self.continuous_token_builder = token_builder(self.continuous_token_builder, self.tokenizer)
        self.device = resolve_backend(self.settings.device).device
        self.agent_config = rl_config(load_config(self.settings.agent_config), self.rollout_config,
                                      self.settings.final_profile)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        info = kwargs.get("extra_info") or {}
        task = task_from_row(info)
        out = Path(self.settings.runs_dir or subdir("rl_runs")) / \
            f"{task.name}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
        trajectory = TokenTrajectory(self, TOOL_SCHEMAS, self.rollout_config.response_length,
                                     log_probs=bool(sampling_params.get("logprobs")))
        model = VerlTokenModel(self.server_manager, trajectory, sampling_params, asyncio.get_running_loop(),
                               self.tokenizer)
        # a thread of its own: the ct_* helpers the model awaits run on the loop's default executor,
        # which agent threads waiting on them would otherwise fill up
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"cuda-agent-{task.name}")
        start = time.monotonic()
        try:
            outcome, keeper = await asyncio.get_running_loop().run_in_executor(pool, self._work, task, out, model, info)
        except asyncio.CancelledError:
            model.cancelled = True  # the agent's thread stops at its next query
            raise
        finally:
            pool.shutdown(wait=False)
        verdict = best_verdict([keeper.best.result] if keeper.best else [])
        stats = model.stats
        steps = (stats.min_global_steps, stats.max_global_steps)
        if None in steps:  # no reply came back (a prompt with no room): the step this row was sampled at
            steps = (kwargs.get("global_steps"),) * 2
        first = first_pass(read_records(out / "trajectory.jsonl"))
        extra = extra_fields(task.name, verdict, outcome.status, outcome.error, outcome.turns, keeper.evaluations,
                             out, steps, first)
        metrics = AgentLoopMetrics(generate_sequences=stats.seconds,
                                   tool_calls=max(time.monotonic() - start - stats.seconds, 0.0),
                                   num_preempted=stats.preempted)
        return AgentLoopOutput(**trajectory.output(), reward_score=verdict.reward, num_turns=_turns(trajectory),
                               metrics=metrics, extra_fields=extra)

    def _work(self, task: Task, out: Path, model: VerlTokenModel,
              info: dict[str, Any] | None = None) -> tuple[Outcome, SolutionKeeper]:
        """The run, in the agent's thread: as `optimize()` runs one, with this policy as the model (and
        the row's own starting files and task message, where its `info` brings them)."""
        info = info or {}
        evaluator = make_evaluator_factory(self.settings.evaluator, self.device, self.settings.service)
        config = override(self.agent_config, prompts={"task": info.get("task_prompt")})
        with open_run(task, out, self.device, config, evaluator, self.settings.timing) as run:
            place_start_files(run, info.get("start_files"), info.get("index", "?"))
            messages = run.start(model.name)
            outcome = run.work(model, messages)
            run.finish(outcome)
        if not self.settings.keep_workspace:
            shutil.rmtree(run.workspace, ignore_errors=True)  # where isolation put it, maybe outside `out`
            if (out / "workspace").is_symlink():
                (out / "workspace").unlink()
        return outcome, run.keeper


class ReplayAgentLoop(AgentLoopBase):
    """A recorded run (`extra_info.trajectory`: a trajectory.jsonl) as tokens, masks and its reward."""

    def __init__(self, *args: Any, tools: Any = None, name: str | None = None, **kwargs: Any):
        self.settings = LoopSettings.from_options(_pop_options(kwargs))
        super().__init__(*args, **kwargs)
        self.continuous_token_builder = token_builder(self.continuous_token_builder, self.tokenizer)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        info = kwargs.get("extra_info") or {}
        if not info.get("trajectory"):
            raise ValueError(f"dataset row {info.get('index', '?')}: the replay loop needs extra_info.trajectory, "
                             "the path of a run's trajectory.jsonl")
        records = read_records(info["trajectory"])
        messages = read_messages(info["trajectory"])
        trajectory = TokenTrajectory(self, TOOL_SCHEMAS, self.rollout_config.response_length, log_probs=False)
        await replay_messages(trajectory, messages, info["trajectory"])
        results = recorded_results(records, self.settings.final_profile)
        verdict = best_verdict(results)
        task = next((r.get("task", "") for r in records if r.get("type") == "run"), "")
        turns = sum(m["role"] == "assistant" for m in trajectory.messages)
        steps = (kwargs.get("global_steps"),) * 2   # no server: the step this row was sampled at
        extra = extra_fields(task, verdict, "replay", "", turns, len(results), Path(info["trajectory"]).parent, steps,
                             first_pass(records))
        return AgentLoopOutput(**trajectory.output(), reward_score=verdict.reward, num_turns=_turns(trajectory),
                               metrics=AgentLoopMetrics(), extra_fields=extra)


def register_default(name: str, cls: type) -> None:
    """Make `name` mean `cls` with default options, unless an agent_loops YAML already set it. Not
    verl's @register, which overwrites: hydra imports this module while it builds the YAML's first
    loop, so @register would drop the YAML's options for every later trajectory of the worker."""
    _agent_loop_registry.setdefault(name, {"_target_": f"{cls.__module__}.{cls.__qualname__}"})


register_default("cuda_agent", CudaAgentLoop)
register_default("cuda_agent_replay", ReplayAgentLoop)


async def replay_messages(trajectory: TokenTrajectory, messages: list[dict[str, Any]], where: str) -> None:
    """Tokens for recorded `messages`: the first ones as the prompt, each assistant message as the
    tokens its template rendering gives (mask 1), the rest as context (mask 0), until the budget."""
    first = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), None)
    if first is None:
        raise ValueError(f"{where}: no assistant message to replay")
    await trajectory.start(messages[:first])
    i = first
    while i < len(messages) and trajectory.room > 0:
        if messages[i]["role"] == "assistant":
            await trajectory.add_reply(trajectory.reply_tokens(messages[i]), None, messages[i])
            i += 1
            continue
        j = next((k for k in range(i, len(messages)) if messages[k]["role"] == "assistant"), len(messages))
        if not await trajectory.add_context(messages[:j]):
            break
        i = j


def place_start_files(run: Run, files: str | None, row: Any) -> None:
    """A row's starting point (`extra_info.start_files`, JSON text: path -> content) in place of the
    workspace's example kernel: kernels/ emptied, then each file written as the write_file tool
    writes one (to the tool user, where commands are isolated; a protected path is refused)."""
    if not files:
        return
    for f in (run.workspace / "kernels").iterdir():
        if f.is_file():
            f.unlink()
    for path, content in json.loads(files).items():
        try:
            run.tools.write_file(path, content)
        except ToolError as e:
            raise ValueError(f"dataset row {row}: extra_info.start_files: {e}") from None


def recorded_results(records: list[dict[str, Any]], final_profile: bool) -> list[dict[str, Any]]:
    """The harness verdicts a recorded run got from its tools (and from its final profile, if counted)."""
    kinds = ("message", "final_evaluation") if final_profile else ("message",)
    return [r["harness"]["result"] for r in records
            if r.get("type") in kinds and isinstance(r.get("harness"), dict) and r["harness"].get("result")]


def extra_fields(task: str, verdict: Verdict, status: str, error: str, turns: int, evaluations: int,
                 run_dir: Path, steps: tuple[Any, Any], first: tuple[int, int] | None = None) -> dict[str, Any]:
    """A trajectory's `AgentLoopOutput.extra_fields`, the same keys from both loops (verl stacks them
    per key across the batch). `steps`: the weights versions of its first and last reply; verl's v1
    trainer tags every trajectory with them (min/max_global_steps, as ints). `first`: when it first
    passed (rft.first_pass: turn, verification), None if never. `reward_extra_info` is numbers only:
    the trainer averages each key in its validation metrics (`pass_turn1` against `correct`: pass at
    the first turn against pass within the turns given)."""
    return {"task": task, "milestone": verdict.milestone, "status": status, "error": error, "turns": turns,
            "evaluations": evaluations, "run_dir": str(run_dir), "first_pass_turn": first[0] if first else 0,
            "global_steps": steps[1], "min_global_steps": steps[0], "max_global_steps": steps[1],
            "turn_scores": [], "tool_rewards": [],   # the keys verl's own multi-turn loop returns
            "reward_extra_info": {"correct": float(verdict.correct), "turns": turns, "evaluations": evaluations,
                                  "pass_turn1": float(bool(first) and first[0] == 1)}}


def _pop_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The loop's own options (agent_loops.yaml) out of the arguments verl's worker instantiates it with."""
    return {k: kwargs.pop(k) for k in list(kwargs) if k in {f.name for f in fields(LoopSettings)}}


def _turns(trajectory: TokenTrajectory) -> int:
    """verl's num_turns: the user, assistant and tool messages the tokens hold."""
    return sum(m["role"] != "system" for m in trajectory.messages)


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _plain(value: Any) -> Any:
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(value, DictConfig):
            return OmegaConf.to_container(value, resolve=True)
    except ImportError:
        pass
    return dict(value)
