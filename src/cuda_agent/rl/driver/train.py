"""`cuda-agent train`: the paper's RL stages, one after another, each a verl run.

warmup (single-turn PPO) -> collect (the warmed-up actor runs the agent loop on the training tasks)
-> rft (SFT on the collected trajectories that pass the filter) -> collect_rft (RFT's actor, the
same way) -> value (the critic alone, on those rollouts) -> agentic (multi-turn PPO). Each stage
starts from the previous ones' results: verl's FSDP checkpoints are merged into Hugging Face
folders (`python -m verl.model_merger merge --backend fsdp`); the actor goes warmup -> collect,
rft -> collect_rft, value, agentic, and the critic warmup -> value -> agentic. The run file's
`trajectories` (agent runs recorded elsewhere) join both collections as an optional extra.

Everything goes under the run's `out` folder:
  stages.jsonl           the stage journal: a finished stage is not run again; its record holds what it
                         read, what it wrote, and its metrics' summary (rl/driver/metrics.py)
  data/                  the RL Parquet files (built once; data.json says from what)
  <stage>/train.log      verl's output;  <stage>/checkpoints/  verl's checkpoints (it resumes from them)
  <stage>/metrics.jsonl  one line per step: verl's metrics and the share of replies at each milestone
  <stage>/rollouts/      every step's replies and scores;  <stage>/rewards.jsonl  every harness verdict
  <stage>/actor, critic  the merged models the next stage starts from
  collect*/runs/         the collected agent runs (trajectory.jsonl, solution, verdicts), one folder each
  plots/                 reward, milestones, entropy, importance ratios, clipping, critic, lengths,
                         seconds per step (rollout, reward, training)
A killed stage resumes when the command runs again: verl continues from its last checkpoint (a
collecting stage, which has none, collects again). What a stage reads, and the overrides that say so
to verl: inputs.py.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from cuda_agent.rl.driver import launch, metrics
from cuda_agent.rl.driver.inputs import Report, generated_overrides, prepare_data
from cuda_agent.rl.driver.stages import (COLLECTS, FILL_STAGES, SPECS, STAGES, RunConfig, TrainError, mapping_overrides,
                                         route_overrides)


@dataclass
class StageResult:
    stage: str
    outputs: dict[str, Any]
    steps: int | None
    seconds: float
    skipped: bool = False


def _fit_sft_batch(cfg, rows: int) -> list[str]:
    """verl's SFT loader drops the last partial batch: with fewer kept rows than a batch it would
    train no step at all, so the batch shrinks to what there is."""
    batch, micro = int(cfg.data.train_batch_size), int(cfg.data.micro_batch_size_per_gpu)
    if rows >= batch:
        return []
    fitted = max(micro, rows - rows % micro) if rows >= micro else rows
    return [f"data.train_batch_size={fitted}"] + ([f"data.micro_batch_size_per_gpu={fitted}"] if fitted < micro else [])


# --- running a stage ------------------------------------------------------------------------------


def run_stage(run: RunConfig, stage: str, cli: list[str], report: Report, redo: bool = False) -> StageResult:
    """One stage, resumed if it was started, skipped if it finished (unless `redo`). `report` gets
    {"event": "stage"|"phase"|"note"|"step"|"done", ...} as it goes."""
    spec = SPECS[stage]
    journal = launch.StageJournal(run.out)
    if redo:
        shutil.rmtree(run.out / stage, ignore_errors=True)
        journal.write(stage, "redo")
    done = journal.finished(stage)
    if done:
        report({"event": "done", "stage": stage, "skipped": True, "outputs": done.get("outputs", {})})
        return StageResult(stage, done.get("outputs", {}), done.get("steps"), 0.0, skipped=True)
    t0 = time.monotonic()
    stage_dir = run.out / stage
    if run.tiny and not (Path(run.model) / "config.json").is_file():
        from cuda_agent.rl.tools.tiny_model import build_tiny_model

        report({"event": "phase", "text": "building the tiny model"})
        build_tiny_model(Path(run.model))
    report({"event": "stage", "stage": stage, "summary": spec.summary})
    data = prepare_data(run, report) if stage not in ("sanity", *FILL_STAGES) else {}
    user = [*mapping_overrides(run.stages.get(stage, {})), *cli]
    generated, rows, inputs = generated_overrides(run, stage, data, journal, user, report)
    stage_dir.mkdir(parents=True, exist_ok=True)
    overrides = launch.platform_overlay(run, stage) + generated + user
    report({"event": "phase", "text": "checking the config"})
    cfg = launch.compose(spec.config, overrides)
    if spec.trainer == "sft":
        fitted = _fit_sft_batch(cfg, rows)
        if fitted:
            overrides += fitted
            cfg = launch.compose(spec.config, overrides)
            report({"event": "note", "text": f"rft: {rows} conversations, so {' '.join(fitted)}"})
    else:
        launch.check_ppo(stage, cfg, rows, run.harness_device)
    steps = launch.total_steps(cfg, rows)
    attempt = journal.attempts(stage) + 1
    journal.write(stage, "started", attempt=attempt, inputs=inputs, overrides=overrides)
    env = launch.stage_env(run, stage_dir, attempt)
    try:
        log = stage_dir / "train.log"
        latest = launch.latest_checkpoint(stage_dir / "checkpoints")
        resumed_at = _step_of(latest)
        if stage in COLLECTS:   # nothing to resume: a collection starts over
            shutil.rmtree(stage_dir / "runs", ignore_errors=True)
        if steps is None or resumed_at < steps:
            doing = f"resuming at step {resumed_at}" if resumed_at else "Ray, workers, models"
            report({"event": "phase", "text": f"starting verl ({doing})", "total": steps})
            try:
                code = launch.run_logged(launch.command(spec.trainer, spec.config, overrides, run.gpus), env, stage_dir,
                                         log, _follow(report, stage, steps))
            finally:   # the steps done so far reach metrics.jsonl and the plots, also when the run is stopped
                _write_metrics(run, stage)
            if code != 0:
                journal.write(stage, "failed", code=code)
                raise launch.failure(stage, log, code)
        outputs = _outputs(stage, stage_dir, env, log, report)
    finally:   # the stage's local Ray has stopped: its sessions' folder goes
        launch.remove_ray_tmp(env)
    summary = metrics.summary(_write_metrics(run, stage))
    seconds = round(time.monotonic() - t0, 1)
    journal.write(stage, "finished", inputs=inputs, outputs=outputs, steps=steps, seconds=seconds, summary=summary)
    report({"event": "done", "stage": stage, "skipped": False, "outputs": outputs, "seconds": seconds})
    return StageResult(stage, outputs, steps, seconds)


def _step_of(checkpoint: Path | None) -> int:
    return int(checkpoint.name.removeprefix("global_step_")) if checkpoint else 0


def _follow(report: Report, stage: str, total: int | None) -> Callable[[str], None]:
    def on_line(line: str) -> None:
        parsed = launch.parse_step(line)
        if parsed:
            report({"event": "step", "stage": stage, "step": parsed[0], "total": total, "metrics": parsed[1]})
        report({"event": "line", "stage": stage, "text": line.rstrip("\n")})
    return on_line


def _outputs(stage: str, stage_dir: Path, env: dict[str, str], log: Path, report: Report) -> dict[str, Any]:
    """The stage's models for the next ones: merged from its last checkpoint (rft: verl's own HF export)."""
    if stage in COLLECTS:
        return _collected(stage, stage_dir, log)
    latest = launch.latest_checkpoint(stage_dir / "checkpoints")
    if latest is None and not SPECS[stage].merges and SPECS[stage].trainer == "ppo":
        return {}
    if latest is None:
        raise TrainError(f"{stage}: verl finished but left no checkpoint in {stage_dir / 'checkpoints'}; "
                         f"see {log}")
    if SPECS[stage].trainer == "sft":
        hf = latest / "huggingface"
        if not (hf / "config.json").is_file():
            raise TrainError(f"rft: {latest} has no huggingface/ export; keep hf_model in checkpoint.save_contents")
        return {"actor": str(hf), "checkpoint": str(latest)}
    outputs = {"checkpoint": str(latest)}
    for part in SPECS[stage].merges:
        report({"event": "phase", "text": f"merging the {part} of {latest.name}"})
        outputs[part] = str(launch.merge(latest / part, stage_dir / part, env, log, lambda line: None))
    return outputs


def _collected(stage: str, stage_dir: Path, log: Path) -> dict[str, Any]:
    """A collecting stage's result: its runs folder, how many trajectories, their rewards, and the
    share that had passed by turn k (and by the k-th verification)."""
    from cuda_agent.agent.trajectory import read_records
    from cuda_agent.rl.data import rft

    runs = stage_dir / "runs"
    found = [c for c in map(rft.from_trajectory, rft.trajectory_files([runs])) if c is not None]
    if not found:
        raise TrainError(f"{stage}: verl finished but no agent run with a conversation is in {runs}; see {log}")
    rewards = [c.reward for c in found]
    passes = rft.pass_at_turns([read_records(p) for p in rft.trajectory_files([runs])])
    return {"runs": str(runs), "trajectories": len(found), "best_reward": max(rewards),
            "mean_reward": round(sum(rewards) / len(rewards), 4), "pass": passes["pass"],
            "pass_at_turn": passes["pass_at_turn"], "pass_at_attempt": passes["pass_at_attempt"]}


def _write_metrics(run: RunConfig, stage: str) -> list[dict[str, Any]]:
    rows = metrics.collect(run.out / stage)
    metrics.write_plots(run.out, list(SPECS))
    return rows


def run_all(run: RunConfig, cli: list[str], report: Report) -> list[StageResult]:
    """The stages in order (STAGES); finished ones are skipped."""
    routed = route_overrides(cli, list(STAGES), launch.key_checker(run))
    return [run_stage(run, stage, routed[stage], report) for stage in STAGES]


def run_one(run: RunConfig, stage: str, cli: list[str], report: Report, redo: bool = False) -> StageResult:
    routed = route_overrides(cli, [stage], launch.key_checker(run))
    return run_stage(run, stage, routed[stage], report, redo=redo)
