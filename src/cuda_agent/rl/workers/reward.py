"""The single-turn reward, for verl's custom reward function route:
`reward.custom_reward_function.path=pkg://cuda_agent.rl.workers.reward`, `name=compute_score`.

A reply is judged by the harness through the evaluation service, like every other evaluation:
- `data_source` "cuda_agent" or "kernelbench": the reply holds model_new.py in exactly one
  ```python block (the format prompts.toml [single_turn] asks for, KernelBench-style with
  load_inline); anything else is -1 with the reason, and the harness is not asked.
- `data_source` "cuda_agent_sanity": the reply picks one of the row's prepared solutions by
  letter (rl/data/sanity.py).
- `data_source` "cuda_agent_fill": the reply is the C expression missing from the row's kernel
  (rl/data/fill.py), checked by the family's format guard before the harness sees it.
The score is the harness's milestone reward (-1 / 1 / 2 / 3 by default). A harness error or a
reply whose verdict does not come within `timeout_s` scores the failure reward, never more.

Each reward worker process (verl's reward loop workers are Ray actors) starts one EvalService
the first time it is asked, on the Ray it already runs in, and keeps it for the process's life;
equal requests (same task, files and settings) get the verdict already given. With
CUDA_AGENT_REWARD_LOG set, every score is also appended there as a JSON line.

Settings come from `reward.custom_reward_function.reward_kwargs` (`RewardSettings.from_kwargs`); a
reply is timed by RL's one plan (`rl.evaluation.RL_TIMING`), as the agent loop's tools time.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import re
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any

from cuda_agent.harness import EvalConfig, EvalResult, RewardSchedule
from cuda_agent.journal import Journal
from cuda_agent.rl.data.rows import FILL, SANITY
from cuda_agent.rl.rollout.evaluation import RL_TIMING, shared_service
from cuda_agent.service import PRIORITY_REWARD, EvalService, ServiceSettings, request_id
from cuda_agent.tasks import Task

REWARD_LOG_ENV = "CUDA_AGENT_REWARD_LOG"
_OPENING = re.compile(r"```python[^\S\n]*\n")
_BLOCK = re.compile(r"```python[^\S\n]*\n(.*?)```", re.S)


# verl passes the reward's settings flat (`reward_kwargs`); each of these names a field of the
# harness's EvalConfig, of its TimingPlan or of the service's ServiceSettings, which hold them typed.
EVAL_KWARGS = {"policy": "policy", "correctness_trials": "correctness_trials", "profile": "profile",
               "eval_timeout_s": "timeout_s", "build_timeout_s": "build_timeout_s"}
TIMING_KWARGS = {"timing_budget_s": "budget_s", "min_runs": "min_runs"}
SERVICE_KWARGS = {"evaluators": "cpu_evaluators", "evaluators_per_gpu": "evaluators_per_device",
                  "build_workers": "build_workers", "pin_cores": "pin_cores", "journal": "journal",
                  "shared_gpu": "shared_gpu", "gpus": "gpus"}


def _reward_eval() -> EvalConfig:
    """How a reply is judged by default: a child's minutes and a build's, RL's timing plan."""
    return EvalConfig(timeout_s=120.0, build_timeout_s=300.0, timing=RL_TIMING)


def _reward_service() -> ServiceSettings:
    """The service behind the reward by default: one evaluator (per GPU), one builder ahead of it,
    no cores of its own (the trainer shares the machine)."""
    return ServiceSettings(cpu_evaluators=1, evaluators_per_device=1, build_workers=1, pin_cores=False)


@dataclass(frozen=True)
class RewardSettings:
    """The reward's knobs (verl passes them as `reward_kwargs`: `from_kwargs`)."""

    device: str | None = None          # where the harness runs: cuda | cpu; None: the row's, else this machine's
    timeout_s: float = 900.0           # the longest a reply waits for its verdict
    eval: EvalConfig = field(default_factory=_reward_eval)                 # how a reply is judged
    # The service: its `shared_gpu` is the GPU the evaluators run on without asking Ray for it, where
    # the trainer's placement group holds it (one GPU, colocated: "0"); an evaluator asking Ray for a
    # share would wait forever. Its `journal`: verdicts survive a restart.
    service: ServiceSettings = field(default_factory=_reward_service)
    # The control run: each reply is scored with the verdict of a reply drawn at random from this
    # process's recent ones (its own included), so the rewards keep their distribution but no longer
    # follow the replies. `true_score` keeps the harness's own verdict for the logs.
    shuffle: bool = False

    @classmethod
    def from_kwargs(cls, kwargs: dict[str, Any]) -> "RewardSettings":
        """The settings verl's flat `reward_kwargs` give: `device`, `timeout_s`, `shuffle` and the
        names of EVAL_KWARGS (`profile: false`: correctness only, reward -1 or 1, no timing, no
        baselines), TIMING_KWARGS and SERVICE_KWARGS."""
        known = {"device", "timeout_s", "shuffle", *EVAL_KWARGS, *TIMING_KWARGS, *SERVICE_KWARGS}
        unknown = sorted(set(kwargs) - known - {"reward_router_address", "reward_model_tokenizer"})
        if unknown:
            raise TypeError(f"unknown reward setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        base = cls()
        plan = {TIMING_KWARGS[k]: v for k, v in kwargs.items() if k in TIMING_KWARGS}
        if "min_runs" in plan:
            plan["max_runs"] = max(int(plan["min_runs"]), base.eval.timing.max_runs)
        timing = replace(base.eval.timing, **plan)
        config = replace(base.eval, timing=timing, **{EVAL_KWARGS[k]: v for k, v in kwargs.items() if k in EVAL_KWARGS})
        service = replace(base.service, **{SERVICE_KWARGS[k]: v for k, v in kwargs.items() if k in SERVICE_KWARGS})
        return cls(device=kwargs.get("device"), timeout_s=kwargs.get("timeout_s", base.timeout_s), eval=config,
                   service=service, shuffle=kwargs.get("shuffle", base.shuffle))

    def eval_config(self, device: str) -> EvalConfig:
        return replace(self.eval, device=device)

    def service_settings(self, device: str) -> ServiceSettings:
        shared = self.service.shared_gpu
        return replace(self.service, device=device,
                       shared_gpu=str(shared) if shared is not None and device == "cuda" else None)


def extract_solution(reply: str) -> tuple[str | None, str]:
    """model_new.py from a reply with exactly one closed ```python block, or None and why not."""
    opened = len(_OPENING.findall(reply))
    blocks = _BLOCK.findall(reply)
    if opened == 0:
        return None, "the reply has no ```python block; it must hold model_new.py in exactly one"
    if len(blocks) < opened:
        return None, "the reply's ```python block is not closed (cut at the length limit?)"
    if len(blocks) > 1:
        return None, f"the reply has {len(blocks)} ```python blocks; it must have exactly one"
    if not blocks[0].strip():
        return None, "the reply's ```python block is empty"
    return blocks[0], "one ```python block"


# --- one evaluation service per process -----------------------------------------------------------

_inflight: dict[str, Future] = {}   # request id -> its verdict: the n replies of a prompt often agree
_lock = threading.Lock()
_log: Journal | None = None


def service_for(settings: RewardSettings, device: str) -> EvalService:
    """This process's evaluation service for `device` (started on first use, on the Ray this
    process runs in, or a local one): the one registry of rl/rollout/evaluation.py, shared with the agent loop."""
    return shared_service(settings.service_settings(device))


def submit(svc: EvalService, task: Task, files: dict[str, str], config: EvalConfig) -> Future:
    """The service's verdict on these files, shared with an equal request already waiting for one
    (the service itself remembers verdicts once given, not requests in flight)."""
    rid = request_id(task, files, config)
    with _lock:
        future = _inflight.get(rid)
        fresh = future is None
        if fresh:
            future = _inflight[rid] = svc.submit(task, files, config, priority=PRIORITY_REWARD, id=rid)
    if fresh:   # outside the lock: a verdict from the journal is already done, and calls back at once
        future.add_done_callback(lambda _: _forget(rid))
    return future


def _forget(rid: str) -> None:
    # no lock: the service's scheduler thread calls this while holding its own lock, which
    # `submit` takes under ours (a dict's pop is atomic)
    _inflight.pop(rid, None)


def _reward_log() -> Journal | None:
    global _log
    path = os.environ.get(REWARD_LOG_ENV)
    if path and (_log is None or str(_log.path) != path):
        _log = Journal(path)
    return _log if path else None


# --- the score ------------------------------------------------------------------------------------

SHUFFLE_POOL = 256
_pool: list[float] = []
_pool_rng = random.Random(0)


def _shuffled(score: float) -> float:
    """A score drawn from this process's last SHUFFLE_POOL true scores, this one included."""
    with _lock:
        _pool.append(score)
        del _pool[:-SHUFFLE_POOL]
        return _pool_rng.choice(_pool)



def task_of(ground_truth: str, extra_info: dict[str, Any] | None) -> Task:
    """The row's task, checked against its ground truth (the code's sha256)."""
    task = (extra_info or {}).get("task")
    if not isinstance(task, dict) or not isinstance(task.get("code"), str) or not isinstance(task.get("name"), str):
        raise ValueError("reward: the row's extra_info.task is not {name, code}; build the data with "
                         "cuda_agent.rl.data.rows")
    name, code = task["name"], task["code"]
    if hashlib.sha256(code.encode()).hexdigest() != ground_truth:
        raise ValueError(f"reward: task {name!r}: its code does not match reward_model.ground_truth "
                         "(its sha256); the dataset is damaged or mixed up, rebuild it")
    return Task(name=name, code=code, origin=str(task.get("origin") or name))


def verdict(score: float, milestone: str, stage: str, reason: str, *, parsed: bool, result: EvalResult | None = None,
            harness_error: bool = False, timed_out: bool = False) -> dict[str, Any]:
    """What verl receives: `score` and the same keys for every reply (verl stacks them per key)."""
    return {"score": float(score), "milestone": milestone, "stage": stage, "reason": reason[:300],
            "parsed": float(parsed), "correct": float(bool(result and result.correct and not harness_error)),
            "harness_error": float(harness_error), "timed_out": float(timed_out),
            "speedup_vs_eager": float(result.speedup_vs_eager or 0.0) if result else 0.0,
            "speedup_vs_compile": float(result.speedup_vs_compile or 0.0) if result else 0.0,
            "eval_seconds": float(result.seconds) if result else 0.0}


def _from_result(result: EvalResult, schedule: RewardSchedule) -> dict[str, Any]:
    if result.harness_error:
        return verdict(schedule.failed, "failed", result.stage, result.reason, parsed=True, result=result,
                       harness_error=True)
    return verdict(result.reward, result.milestone, result.stage, result.reason, parsed=True, result=result)


def _files_of(data_source: str, reply: str, extra_info: dict[str, Any] | None) -> tuple[dict[str, str] | None, str]:
    if data_source == SANITY:
        from cuda_agent.rl.data.sanity import chosen_files

        return chosen_files(reply, extra_info or {})
    if data_source == FILL:
        from cuda_agent.rl.data.fill import reply_files

        return reply_files(reply, extra_info or {})
    code, why = extract_solution(reply)
    return ({"model_new.py": code} if code is not None else None), why


async def compute_score(data_source: str, solution_str: str, ground_truth: str,
                        extra_info: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    """verl's reward function: the harness's milestone reward for one reply (see the module's docstring)."""
    settings = RewardSettings.from_kwargs(kwargs)
    schedule = RewardSchedule()
    t0 = time.monotonic()
    task = task_of(ground_truth, extra_info)
    files, why = _files_of(data_source, solution_str, extra_info)
    if files is None:
        out = verdict(schedule.failed, "failed", "parse", why, parsed=False)
    else:
        device = settings.device or (extra_info or {}).get("device") or None
        from cuda_agent.devices import default_device

        device = device or default_device()
        svc = service_for(settings, device)
        future = submit(svc, task, files, settings.eval_config(device))
        try:
            # shielded: a timeout must not cancel the service's future, which its scheduler still completes
            result = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), settings.timeout_s)
            out = _from_result(result, schedule)
        except asyncio.TimeoutError:
            out = verdict(schedule.failed, "failed", "timeout", f"no verdict within {settings.timeout_s:g} s",
                          parsed=True, timed_out=True)
    out["true_score"] = out["score"]
    if settings.shuffle:
        out["score"] = _shuffled(out["score"])
    log = _reward_log()
    if log is not None:
        log.append({"at": time.time(), "task": task.name, "data_source": data_source,
                    "seconds": round(time.monotonic() - t0, 3), **out})
    return out


def score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict[str, Any] | None = None,
          **kwargs: Any) -> dict[str, Any]:
    """`compute_score` for callers without an event loop."""
    return asyncio.run(compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs))
