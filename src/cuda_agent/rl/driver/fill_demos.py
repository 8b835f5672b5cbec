"""Agentic demonstrations of the fill family's multi-turn form (rl/data/fill_agent.py), for rejection fine-tuning.

SmolLM2-135M after the single-turn RFT replies with a bare expression and never calls a tool, so in
the agent loop it never reaches the harness. The paper's way past that is RFT on agentic runs that
passed; a 135M model produces none, so a scripted policy plays the tasks instead, through
cuda-agent's own agent loop and the real harness, and the runs it passes become the SFT rows.

The policy (`Demonstrator`, a `Model` as llm/model.py defines one) knows the answer, fill.py's correct C
expression of the task, and works as the task message asks: edit_file the `???` line and verify, in
one reply; once verify passes, a short reply without a tool call ends the run. A seeded share of the
demonstrations (`wrong_share`) first writes a plausible wrong expression, of the kinds a small model
writes (MISTAKES: a sign error, a wrong constant, the wrong nesting or a missing term), and after
reading the failing verdict writes the correct one and verifies again: the runs show reading a
verdict and retrying, not only a first try. Every mistake is wrong for every constant the training
tasks use (a swapped clamp gives a constant, a flipped sign a mirrored curve, ...), and the harness,
not this file, decides what passed.

Each demonstration is a real run: `agent.run.open_run` as the RL agent loop wires one (the task's
starting files and message, RL's agent config with the short conversation's turns, so the system
prompt is the one fill_collect and fill_agentic send), its verify calls judged by the evaluation
service, its trajectory.jsonl kept in the stage's `demos/<index>-<op>-<kind>/`. The stage
`fill_agentic_rft` (`stage_overrides`) collects them (a finished run is kept when the stage runs
again), keeps those that pass rft.select (reward at least rft.min_reward, no duplicates, within the
SFT trainer's max_length) and runs verl's SFT on them, the loss on the assistant's tokens only. The
deliberate mistake stays out of the loss (`train: false`, rl/workers/sft_dataset.py): the model learns the
fix that follows a failing verdict, not to write the mistake, so its pass at turn 1 is not lowered on
purpose and pass after turn k measures the retry. The tasks are the training ones of the operators
RFT may show (`fill.rft_ops`, as fill_rft).
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from cuda_agent.llm import ModelReply, ToolCall
from cuda_agent.rl.data import fill, fill_agent

STAGE = "fill_agentic_rft"

# op -> (kind, a wrong C expression of v with the op's constants); a wrong constant joins them (see
# `mistakes`). Each is wrong for every training constant: none relies on a constant being other
# than 0 or 1 where a training task has one (checked in C on v from -6 to 6 when they were written).
MISTAKES = {
    "affine": (("sign", "-{a} * v + {b}"), ("swap", "{b} * v + {a}")),
    "clamp": (("nesting", "fmaxf(fminf(v, {lo}), {hi})"), ("swap", "fminf(fmaxf(v, {hi}), {lo})")),
    "hardtanh": (("nesting", "fmaxf(fminf(v, {lo}), {hi})"), ("swap", "fminf(fmaxf(v, {hi}), {lo})")),
    "leaky_relu": (("nesting", "v > 0.f ? {slope} * v : v"), ("sign", "v > 0.f ? v : -{slope} * v")),
    "abs": (("missing", "{k} * v"), ("sign", "-{k} * fabsf(v)")),
    "square": (("missing", "{k} * v"), ("sign", "-{k} * v * v")),
    "sigmoid": (("sign", "{k} / (1.f + expf(v))"), ("sign", "{k} / (1.f - expf(-v))")),
    "tanh": (("missing", "{k} * v"), ("sign", "-{k} * tanhf(v)")),
    "silu": (("sign", "{k} * v / (1.f + expf(v))"), ("missing", "{k} / (1.f + expf(-v))")),
    "softplus": (("missing", "logf(expf({beta} * v)) / {beta}"), ("sign", "log1pf(expf(-{beta} * v)) / {beta}")),
    "elu": (("sign", "v > 0.f ? v : {alpha} * (1.f - expf(v))"), ("nesting", "v > 0.f ? {alpha} * (expf(v) - 1.f) : v")),
}


@dataclass(frozen=True)
class Demo:
    """One demonstration: a task, and the wrong expression written first (None: the right one first)."""

    item: fill.FillItem
    index: int
    mistake: str | None = None
    kind: str = "right"       # right, or the mistake's kind

    @property
    def name(self) -> str:
        return f"{self.index:03d}-{self.item.op.name}-{self.kind}"


def mistakes(item: fill.FillItem) -> list[tuple[str, str]]:
    """The wrong expressions a demonstration of `item` may write first, with their kinds: the op's
    MISTAKES, and its expression with the op's next training constants in place of the task's."""
    train = item.op.train
    other = train[(train.index(item.values) + 1) % len(train)] if item.values in train else train[0]
    out = [(kind, replace(item, op=replace(item.op, c=template)).answer) for kind, template in MISTAKES[item.op.name]]
    out.append(("constant", replace(item, values=other).answer))
    return [(kind, expr) for kind, expr in out if expr != item.answer]


def plan(n: int, device: str, seed: int = 0, tier: int = 1, ops: list[str] | None = None,
         wrong_share: float = 0.4) -> list[Demo]:
    """`n` demonstrations of the training tasks (only `ops`' when given), shuffled by `seed` and
    taken in turn; each writes a mistake first with probability `wrong_share`."""
    items = [it for it in fill.items("train", device, tier) if ops is None or it.op.name in ops]
    if not items:
        raise ValueError(f"fill demonstrations: no training task of the operators {ops}")
    rng = random.Random(f"fill-demos:{seed}")
    rng.shuffle(items)
    demos = []
    for i in range(n):
        item = items[i % len(items)]
        if rng.random() < wrong_share:
            kind, wrong = rng.choice(mistakes(item))
            demos.append(Demo(item, i, wrong, kind))
        else:
            demos.append(Demo(item, i))
    return demos


# --- the policy ---------------------------------------------------------------------------------


class Demonstrator:
    """A `Model` that plays one demonstration. Like the replay model it reads its place from the
    conversation (the expressions its edit_file calls wrote, the last verify's verdict), so it
    answers any conversation of its task the same way."""

    name = "fill-demonstrator"

    def __init__(self, demo: Demo, start_files: dict[str, str]):
        self.demo = demo
        # the kernel file and its line with `???` for the expression (the whole line: unique in the file)
        self.path, self.line = next((p, ln.strip()) for p, text in start_files.items()
                                    for ln in text.splitlines() if "???" in ln)
        self.torch = demo.item.torch_expr.replace(fill.F + ".", "F.")

    def query(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        answer, written = self.demo.item.answer, self._written(messages)
        if not written:
            first = self.demo.mistake or answer
            return self._edit("???", first, f"`y = {self.torch}` in C, with `v` the float: `{first}`. "
                                            "Writing it in place of ??? and verifying.", len(messages))
        verdict = next((m.get("content") or "" for m in reversed(messages) if m["role"] == "tool"
                        and (m.get("content") or "").startswith("verify:")), "")
        if verdict.startswith("verify: PASSED"):
            return ModelReply("verify passed: the kernel computes the reference's y.")
        if written[-1] != answer:
            why = ": ".join(verdict.splitlines()[0].split(": ")[1:3]) if verdict else "gave no verdict"
            return self._edit(written[-1], answer, f"verify {why}. So `{written[-1]}` is not "
                                                   f"`{self.torch}`; in C it is `{answer}`. Fixing the line and "
                                                   "verifying again.", len(messages))
        return ModelReply(f"verify did not pass with `{answer}` either; stopping here.")

    def _written(self, messages: list[dict[str, Any]]) -> list[str]:
        """The expressions this run's edit_file calls put into the kernel line, in order."""
        head, tail = self.line.split("???")
        calls = [c for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
        lines = [json.loads(c["function"]["arguments"])["new_str"] for c in calls if c["function"]["name"] == "edit_file"]
        return [ln[len(head):len(ln) - len(tail)] for ln in lines]

    def _edit(self, old: str, new: str, text: str, at: int) -> ModelReply:
        args = {"path": self.path, "old_str": self.line.replace("???", old), "new_str": self.line.replace("???", new)}
        return ModelReply(text, [ToolCall(f"call_{at}_0", "edit_file", json.dumps(args)),
                                 ToolCall(f"call_{at}_1", "verify", "{}")])


# --- collecting ---------------------------------------------------------------------------------


def agent_config(agent_toml: str | Path | None = None) -> Any:
    """The agent's config under RL's rules with the fill stages' short conversation (rl_config with
    fill_agent.STAGE_OVERRIDES): the system prompt fill_collect and fill_agentic send."""
    from omegaconf import OmegaConf

    from cuda_agent.agent.config import load_config
    from cuda_agent.rl.rollout.agent_loop import rl_config

    o = fill_agent.STAGE_OVERRIDES
    rollout = OmegaConf.create({"multi_turn": {"max_assistant_turns": o["actor_rollout_ref.rollout.multi_turn."
                                                                       "max_assistant_turns"]},
                                "prompt_length": o["data.max_prompt_length"],
                                "response_length": o["data.max_response_length"]})
    return rl_config(load_config(agent_toml), rollout, final_profile=False)


def run_demo(demo: Demo, out: Path, device: str, config: Any, evaluator: Callable[..., Any]) -> Path:
    """One demonstration as an agent run in `out` (its workspace removed after), as the RL agent loop
    runs a row; the path of its trajectory.jsonl."""
    from cuda_agent.agent.config import override
    from cuda_agent.agent.run import open_run
    from cuda_agent.rl.rollout.agent_loop import place_start_files
    from cuda_agent.rl.rollout.evaluation import RL_TIMING

    shutil.rmtree(out, ignore_errors=True)   # a run cut short starts over
    files = fill_agent.start_files(demo.item, device)
    prompt = fill_agent.task_prompt(demo.item, device)
    with open_run(demo.item.task(device), out, device, override(config, prompts={"task": prompt}), evaluator,
                  RL_TIMING) as run:
        place_start_files(run, json.dumps(files), demo.name)
        outcome = run.work(Demonstrator(demo, files), run.start(Demonstrator.name))
        run.finish(outcome)
    shutil.rmtree(run.workspace, ignore_errors=True)
    if (out / "workspace").is_symlink():
        (out / "workspace").unlink()
    return out / "trajectory.jsonl"


def finished(trajectory: Path) -> bool:
    from cuda_agent.agent.trajectory import read_records

    return trajectory.is_file() and any(r.get("type") == "end" for r in read_records(trajectory))


def collect(demos: list[Demo], out: str | Path, device: str, agent_toml: str | Path | None = None,
            service: dict[str, Any] | None = None, parallel: int = 2,
            on_done: Callable[[int, int], None] | None = None) -> list[Path]:
    """Each demonstration as an agent run in out/<demo.name>/ (one whose run finished before is kept),
    `parallel` at a time, judged by an evaluation service (`service`: ServiceSettings fields) on
    `device`; their trajectory.jsonl paths, in the demonstrations' order. `on_done(done, total)`."""
    from cuda_agent.agent.evaluator import WorkspaceEvaluator
    from cuda_agent.rl.rollout.evaluation import service_settings
    from cuda_agent.service import PRIORITY_REWARD, EvalService, in_flight

    out = Path(out)
    paths = [out / d.name / "trajectory.jsonl" for d in demos]
    todo = [d for d, p in zip(demos, paths) if not finished(p)]
    if todo:
        config = agent_config(agent_toml)
        with EvalService(service_settings(device, service)) as svc:
            def evaluator(workspace: Path, dev: str, timing: Any) -> WorkspaceEvaluator:
                return WorkspaceEvaluator(workspace, dev, timing, svc, PRIORITY_REWARD)

            def work(demo: Demo) -> Path:
                return run_demo(demo, out / demo.name, device, config, evaluator)

            left = list(reversed(todo))
            lanes = in_flight(parallel, lambda: left.pop() if left else None, work, name="fill-demos")
            for done, (_, future) in enumerate(lanes, len(demos) - len(todo) + 1):
                future.result()   # a demonstration that cannot run is this code's bug: say so now
                if on_done:
                    on_done(done, len(demos))
    return paths


# --- the stage ----------------------------------------------------------------------------------


def stage_overrides(run: Any, user: list[str], common: list[str],
                    report: Callable[[dict[str, Any]], None]) -> tuple[list[str], int, dict[str, Any]]:
    """fill_agentic_rft's overrides, its SFT rows and what it consumed (for the journal): the
    demonstrations collected in <out>/fill_agentic_rft/demos, those that pass the RFT filter as
    <out>/fill_agentic_rft/sft.parquet, the actor the run's model (or the `model.path` named)."""
    from cuda_agent.agent.trajectory import read_records
    from cuda_agent.rl.data import rft
    from cuda_agent.rl.driver import launch
    from cuda_agent.rl.driver.stages import SPECS, TrainError, override_key

    named = [o.split("=", 1)[1] for o in user if override_key(o) == "model.path"]
    actor = named[-1] if named else run.model
    launch.require_tool_template(actor, STAGE)
    k, device, folder = run.fill, run.harness_device, run.out / STAGE / "demos"
    demos = plan(k.demos, device, run.seed, k.tier, k.rft_ops, k.wrong_share)
    service = run.harness.resolved(run.platform)
    lanes = 2 * max(1, service["cpu_evaluators"] if device == "cpu" else service["evaluators_per_device"])
    report({"event": "phase", "text": f"{len(demos)} demonstrations through the harness ({device})"})
    paths = collect(demos, folder, device, run.agent_config, service, lanes,
                    lambda done, total: report({"event": "phase", "text": f"demonstrations: {done} of {total} run"}))
    max_length = int(launch.compose(SPECS[STAGE].config, launch.platform_overlay(run, STAGE) + user).data.max_length)
    rule = rft.RFTFilter(run.rft.min_reward, run.rft.max_turns, min(run.rft.max_tokens, max_length))
    try:
        counter = rft.chat_token_counter(actor)
    except Exception:  # not a local model folder: verl will say what is wrong; estimate here
        counter = rft.chars_over_four
    candidates = []
    for demo, path in zip(demos, paths):
        c = rft.from_trajectory(path)
        if c is not None and demo.mistake is not None:   # its first reply, the mistake: context, not loss
            next(m for m in c.messages if m["role"] == "assistant")["train"] = False
        candidates += [c] if c is not None else []
    kept, summary = rft.select(candidates, rule, None, counter)
    report({"event": "note", "text": f"{STAGE}: {summary.summary()}"})
    if not kept:
        raise TrainError(f"{STAGE}: no demonstration to fine-tune on: {summary.summary()}; see the runs in {folder}")
    passes = rft.pass_at_turns([read_records(p) for p in paths])
    sft = rft.write_sft(kept, run.out / STAGE / "sft.parquet")
    inputs = {"actor": actor, "data": str(sft), "demos": str(folder), "demonstrations": len(demos),
              "wrong_first": sum(d.mistake is not None for d in demos), "pass": passes["pass"],
              "pass_at_turn": passes["pass_at_turn"], "kept": summary.kept, "dropped": dict(summary.dropped),
              "tier": k.tier, "rft_ops": k.rft_ops}
    return [*common, f"model.path={actor}", f"data.train_files={sft}", "data.val_files=null"], len(kept), inputs
