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
                         read, what it wrote, and its metrics' summary (rl/metrics.py)
  data/                  the RL Parquet files (built once; data.json says from what)
  <stage>/train.log      verl's output;  <stage>/checkpoints/  verl's checkpoints (it resumes from them)
  <stage>/metrics.jsonl  one line per step: verl's metrics and the share of replies at each milestone
  <stage>/rollouts/      every step's replies and scores;  <stage>/rewards.jsonl  every harness verdict
  <stage>/actor, critic  the merged models the next stage starts from
  collect*/runs/         the collected agent runs (trajectory.jsonl, solution, verdicts), one folder each
  plots/                 reward, milestones, entropy, importance ratios, clipping, critic, lengths,
                         seconds per step (rollout, reward, training)
A killed stage resumes when the command runs again: verl continues from its last checkpoint (a
collecting stage, which has none, collects again).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from cuda_agent.rl import fill_demos, launch, metrics
from cuda_agent.rl.data import (AGENTIC, KERNELBENCH, REPLAY, SINGLE_TURN, KernelBenchGuard, load_training_tasks,
                                read_parquet, rl_row, rl_rows, split_tasks, write_parquet)
from cuda_agent.rl.stages import (COLLECTS, FILL_STAGES, SPECS, STAGES, RunConfig, TrainError, mapping_overrides,
                                  route_overrides)

Report = Callable[[dict[str, Any]], None]   # progress events, see `run_stage`


@dataclass
class StageResult:
    stage: str
    outputs: dict[str, Any]
    steps: int | None
    seconds: float
    skipped: bool = False


# --- data -----------------------------------------------------------------------------------------


def prepare_data(run: RunConfig, report: Report) -> dict[str, Path]:
    """The RL Parquet files in out/data, built once per set of inputs (data.json records them)."""
    folder = run.out / "data"
    names = ("single_turn_train", "single_turn_val", "agentic_train", "agentic_val")
    files = {n: folder / f"{n}.parquet" for n in names}
    inputs = {"tasks": [_identity(p) for p in run.tasks], "kernelbench": _identity(run.kernelbench),
              "kernelbench_val": run.kernelbench_val, "val_fraction": run.val_fraction, "seed": run.seed,
              "device": run.harness_device, "agent_config": _identity(run.agent_config)}
    manifest = folder / "data.json"
    if manifest.is_file() and json.loads(manifest.read_text()).get("inputs") == inputs and all(
            f.is_file() for f in files.values()):
        return files
    if not run.tasks:
        raise TrainError(f"{run.path}: `tasks` is missing; the stages train on tasks (synthesized datasets, "
                         "task folders or .py files)")
    report({"event": "phase", "text": "building the RL datasets"})
    from cuda_agent.tasks import TaskError

    try:
        tasks = load_training_tasks(run.tasks)
        guard = KernelBenchGuard.load(run.kernelbench)
    except (TaskError, FileNotFoundError) as e:
        raise TrainError(f"{run.path}: cannot read the tasks: {e}") from None
    split = split_tasks(tasks, guard, run.val_fraction, run.seed)
    if not split.train:
        raise TrainError(f"{run.path}: no training task left ({len(tasks)} read, {len(split.excluded)} too close to "
                         f"KernelBench, {len(split.val)} held out); add tasks or lower val_fraction")
    val = split.val or split.train[:4]   # no held-out task: validate on a few training ones (noted in data.json)
    bench = sorted(guard.tasks, key=lambda t: hashlib.sha256(f"{run.seed}:{t.sha256}".encode()).hexdigest())
    bench = bench[:run.kernelbench_val]
    device = run.harness_device
    for kind, agent in (("single_turn", SINGLE_TURN), ("agentic", AGENTIC)):
        agent_config = run.agent_config
        write_parquet(rl_rows(split.train, agent, device, "train", agent_config=agent_config), files[f"{kind}_train"])
        write_parquet(rl_rows(val, agent, device, "val", agent_config=agent_config)
                      + rl_rows(bench, agent, device, "val", KERNELBENCH, agent_config), files[f"{kind}_val"])
    manifest.write_text(json.dumps({
        "inputs": inputs, "train": len(split.train), "val": len(split.val), "val_from_train": not split.val,
        "kernelbench_val": len(bench), "excluded_as_kernelbench": split.excluded}, indent=1))
    report({"event": "note", "text": f"data: {len(split.train)} training tasks, {len(val)} held out, "
                                     f"{len(bench)} KernelBench for validation, {len(split.excluded)} dropped "
                                     "as KernelBench look-alikes"})
    return files


def _identity(path: Path | None) -> Any:
    if path is None:
        return None
    p = Path(path)
    return [str(p), p.stat().st_size, int(p.stat().st_mtime)] if p.is_file() else str(p)


def _candidates(run: RunConfig, collected: str | None) -> tuple[list[Any], list[str]]:
    """The collected runs (a collecting stage's runs/) and the run file's trajectories, as RFT
    candidates, and where they came from."""
    from cuda_agent.rl import rft

    sources = ([collected] if collected else []) + list(run.trajectories)
    found = [rft.from_trajectory(path) for path in rft.trajectory_files(sources)]
    return [c for c in found if c is not None], sources


def rft_data(run: RunConfig, collected: str | None, actor: str, max_length: int,
             report: Report) -> tuple[Path, int, dict[str, Any]]:
    """out/rft/sft.parquet from the collected runs and the run's trajectories (rl/rft.py) that pass
    the filter; no conversation longer than the SFT trainer's data.max_length (it refuses to truncate)."""
    from cuda_agent.rl import rft

    candidates, sources = _candidates(run, collected)
    rule = rft.RFTFilter(run.rft.min_reward, run.rft.max_turns, min(run.rft.max_tokens, max_length))
    try:
        counter = rft.chat_token_counter(actor)
    except Exception:  # a model folder without a usable tokenizer: verl will say so; estimate here
        counter = rft.chars_over_four
    kept, summary = rft.select(candidates, rule, KernelBenchGuard.load(run.kernelbench), counter)
    report({"event": "note", "text": f"rft: {summary.summary()}"})
    if not kept:
        raise TrainError(f"rft: no trajectory to fine-tune on: {summary.summary()}. Lower rft.min_reward in "
                         f"{run.path}, collect more (collect:actor_rollout_ref.rollout.val_kwargs.n=N), or list "
                         "agent runs under `trajectories` (trajectory.jsonl files or folders)")
    inputs = {"trajectories": sources, "candidates": summary.candidates, "kept": summary.kept,
              "dropped": dict(summary.dropped), "from_collect": sum(1 for c in kept if collected and
                                                                    c.source.startswith(collected))}
    return rft.write_sft(kept, run.out / "rft" / "sft.parquet"), len(kept), inputs


def replay_data(run: RunConfig, collected: str | None, report: Report) -> tuple[Path, dict[str, Any]]:
    """out/value/replay.parquet: the collected runs of the RFT actor and the run's trajectories
    (good and bad) for cuda_agent_replay."""
    from cuda_agent.tasks import Task

    guard = KernelBenchGuard.load(run.kernelbench)
    rows = []
    candidates, sources = _candidates(run, collected)
    for c in candidates:
        if c.turns > run.rft.max_turns or guard.why_excluded(c.task, sha=c.task_sha or None):
            continue
        task = Task(name=c.task, code="", origin=c.source)
        row = rl_row(task, len(rows), c.messages[:2], REPLAY, run.harness_device, "train", trajectory=c.source,
                     reward=c.reward)
        row["reward_model"]["ground_truth"] = c.task_sha
        rows.append(row)
    report({"event": "note", "text": f"value: {len(rows)} trajectories to replay"})
    if not rows:
        raise TrainError(f"value: no trajectory to pretrain the critic on ({', '.join(sources) or 'none collected'}); "
                         f"run collect_rft, or list agent runs under `trajectories` in {run.path}")
    inputs = {"trajectories": sources, "replayed": len(rows)}
    return write_parquet(rows, run.out / "value" / "replay.parquet"), inputs


# --- what each stage starts from ------------------------------------------------------------------


def _given_value(overrides: list[str], key: str) -> str | None:
    values = [o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0].lstrip("+") == key]
    return values[-1] if values else None


def _previous(journal: launch.StageJournal, run: RunConfig, stage: str, needs: str, part: str,
              user: list[str], key: str) -> str | None:
    """A finished stage's output, or None when the user names the model (`key`) themselves."""
    done = journal.finished(needs)
    if done and part in done.get("outputs", {}):
        return done["outputs"][part]
    if _given_value(user, key) is not None:
        return None
    raise TrainError(f"{stage} starts from the {needs} stage's {part}, and {needs} has not finished in {run.out}: "
                     f"run `cuda-agent train {needs} --config {run.path}` first (or `train all`), "
                     f"or name the model yourself: {stage}:{key}=FOLDER")


def generated_overrides(run: RunConfig, stage: str, data: dict[str, Path], journal: launch.StageJournal,
                        user: list[str], report: Report) -> tuple[list[str], int, dict[str, Any]]:
    """The overrides this run fills in for `stage` (paths, logging), its training rows, and what it
    consumes (for the journal)."""
    d = run.out / stage
    common = [f"trainer.default_local_dir={d / 'checkpoints'}", f"trainer.logger={launch.loggers()}",
              f"trainer.n_gpus_per_node={run.gpus}"]
    actor_key, critic_key = "actor_rollout_ref.model.path", "critic.model.path"
    if stage == "sanity":
        from cuda_agent.rl.sanity import write_sanity_data

        k = run.sanity
        batch = launch.compose(SPECS[stage].config, launch.platform_overlay(run, stage) + user).data.train_batch_size
        if k.train_tasks < batch:   # said before anything is written
            raise TrainError(f"sanity: sanity.train_tasks is {k.train_tasks}, fewer than data.train_batch_size={batch}: "
                             f"raise sanity.train_tasks in {run.path}, or lower sanity:data.train_batch_size")
        train, val = write_sanity_data(run.out / "data" / "sanity", run.harness_device, k.train_tasks, k.val_tasks,
                                       k.shuffle, run.seed)
        paths = [f"data.train_files={train}", f"data.val_files={val}"]
        return ([*common, *_models(run.model, run.model), *paths, *_ppo_logs(run, d)], len(read_parquet(train)),
                {"actor": run.model, "data": str(train)})
    if stage == "fill_rft":
        from cuda_agent.rl.fill import write_fill_sft

        sft = write_fill_sft(run.out / "data" / "fill" / "sft.parquet", run.harness_device, run.seed,
                             copies=run.fill.copies, ops=run.fill.rft_ops, tier=run.fill.tier)
        return ([*common, f"model.path={run.model}", f"data.train_files={sft}", "data.val_files=null"],
                len(read_parquet(sft)), {"actor": run.model, "data": str(sft), "tier": run.fill.tier})
    if stage == "fill":
        from cuda_agent.rl.fill import write_fill_data

        actor = _previous(journal, run, stage, "fill_rft", "actor", user, actor_key) or _given_value(user, actor_key)
        train, val = write_fill_data(run.out / "data" / "fill", run.harness_device, run.seed, run.fill.tier)
        paths = [f"data.train_files={train}", f"data.val_files={val}"]
        # tier 2: every correct reply is timed, so that the choice's speed reaches the reward (2, 3)
        timed = ["reward.custom_reward_function.reward_kwargs.profile=true"] if run.fill.tier == 2 else []
        return ([*common, *_models(actor, actor), *paths, *timed, *_ppo_logs(run, d)], len(read_parquet(train)),
                {"actor": actor, "data": str(train), "tier": run.fill.tier})
    if stage in ("fill_collect", "fill_agentic"):
        return _fill_agent_overrides(run, stage, journal, user, common)
    if stage == "fill_agentic_rft":   # scripted demonstrations through the harness, then SFT on them
        return fill_demos.stage_overrides(run, user, common, report)
    if stage == "warmup":
        actor = critic = run.model
    elif stage in COLLECTS:   # the actor frozen, on the training tasks (verl's validation pass alone)
        actor = _previous(journal, run, stage, COLLECTS[stage], "actor", user, actor_key)
        tasks = data["agentic_train"]
        # what makes it a collection, also over the CPU overlay (which turns validation off)
        paths = [f"data.train_files={tasks}", f"data.val_files={tasks}", "trainer.val_only=true",
                 "trainer.val_before_train=true"]
        return ([*common, *_models(actor, None), *paths, *_ppo_logs(run, d)], len(read_parquet(tasks)),
                {"actor": actor, "tasks": str(tasks)})
    elif stage == "rft":
        actor = _previous(journal, run, stage, "warmup", "actor", user, "model.path") or run.model
        collected = _previous(journal, run, stage, "collect", "runs", user, "model.path")
        max_length = launch.compose(SPECS[stage].config, launch.platform_overlay(run, stage) + user).data.max_length
        sft, rows, inputs = rft_data(run, collected, actor, int(max_length), report)
        return ([*common, f"model.path={actor}", f"data.train_files={sft}", "data.val_files=null"], rows,
                {"actor": actor, **inputs})
    elif stage == "value":
        actor = _previous(journal, run, stage, "rft", "actor", user, actor_key)
        done = journal.finished("warmup")
        critic = (done or {}).get("outputs", {}).get("critic") or actor
        collected = _previous(journal, run, stage, "collect_rft", "runs", user, actor_key)
        replay, inputs = replay_data(run, collected, report)
        paths = [f"data.train_files={replay}", f"data.val_files={replay}"]
        return ([*common, *_models(actor, critic), *paths, *_ppo_logs(run, d)], len(read_parquet(replay)),
                {"actor": actor, "critic": critic, **inputs})
    else:
        actor = _previous(journal, run, stage, "rft", "actor", user, actor_key)
        critic = _previous(journal, run, stage, "value", "critic", user, critic_key)
    kind = "single_turn" if stage == "warmup" else "agentic"
    paths = [f"data.train_files={data[f'{kind}_train']}", f"data.val_files={data[f'{kind}_val']}"]
    return ([*common, *_models(actor, critic), *paths, *_ppo_logs(run, d)], len(read_parquet(data[f"{kind}_train"])),
            {"actor": actor, "critic": critic, "tasks": str(data[f"{kind}_train"])})


def _fill_agent_overrides(run: RunConfig, stage: str, journal: launch.StageJournal, user: list[str],
                          common: list[str]) -> tuple[list[str], int, dict[str, Any]]:
    """The fill family's multi-turn form (rl/fill_agent.py): fill_collect runs a trained actor, frozen, on the
    held-out tasks (the measurement); fill_agentic trains fill_agentic_rft's actor on the training tasks."""
    from cuda_agent.rl.fill_agent import STAGE_OVERRIDES, write_fill_agent_data

    d, key = run.out / stage, "actor_rollout_ref.model.path"
    train, val = write_fill_agent_data(run.out / "data" / "fill_agent", run.harness_device, run.seed, run.fill.tier,
                                       run.agent_config)
    short = mapping_overrides(STAGE_OVERRIDES)
    if stage == "fill_collect":
        named = _given_value(user, key)
        done = next(filter(None, map(journal.finished, ("fill_agentic_rft", "fill", "fill_rft"))), None)
        actor = named or (done or {}).get("outputs", {}).get("actor")
        if actor is None:
            raise TrainError(f"fill_collect runs fill_agentic_rft's actor (else fill's, fill_rft's); none finished in {run.out}: "
                             f"run `cuda-agent train fill_agentic_rft --config {run.path}`, or name it: fill_collect:{key}=DIR")
        paths = [f"data.train_files={val}", f"data.val_files={val}", "trainer.val_only=true",
                 "trainer.val_before_train=true"]
        return ([*common, *_models(None if named else actor, None), *short, *paths, *_ppo_logs(run, d)],
                len(read_parquet(val)), {"actor": actor, "tasks": str(val), "tier": run.fill.tier})
    actor = _given_value(user, key) or _previous(journal, run, stage, "fill_agentic_rft", "actor", user, key)
    paths = [f"data.train_files={train}", f"data.val_files={val}"]
    return ([*common, *_models(actor, actor), *short, *paths, *_ppo_logs(run, d)], len(read_parquet(train)),
            {"actor": actor, "tasks": str(train), "tier": run.fill.tier})


def _models(actor: str | None, critic: str | None) -> list[str]:
    return ([f"actor_rollout_ref.model.path={actor}"] if actor else []) + (
        [f"critic.model.path={critic}"] if critic else [])


def _ppo_logs(run: RunConfig, stage_dir: Path) -> list[str]:
    kwargs = "++reward.custom_reward_function.reward_kwargs"
    harness = run.harness.resolved(run.platform)   # the agent loop's service gets the same (write_agent_loops)
    return [f"trainer.rollout_data_dir={stage_dir / 'rollouts'}",
            f"trainer.validation_data_dir={stage_dir / 'validation'}",
            f"actor_rollout_ref.rollout.agent.agent_loop_config_path={launch.write_agent_loops(run, stage_dir)}",
            f"{kwargs}.journal={stage_dir / 'reward_service.jsonl'}",
            f"{kwargs}.evaluators_per_gpu={harness['evaluators_per_device']}",
            f"{kwargs}.evaluators={harness['cpu_evaluators']}", f"{kwargs}.build_workers={harness['build_workers']}"]


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
        from cuda_agent.rl.tiny_model import build_tiny_model

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
    log = stage_dir / "train.log"
    latest = launch.latest_checkpoint(stage_dir / "checkpoints")
    resumed_at = _step_of(latest)
    if stage in COLLECTS:   # nothing to resume: a collection starts over
        shutil.rmtree(stage_dir / "runs", ignore_errors=True)
    if steps is None or resumed_at < steps:
        report({"event": "phase", "text": f"starting verl ({'resuming at step ' + str(resumed_at) if resumed_at else 'Ray, workers, models'})",
                "total": steps})
        try:
            code = launch.run_logged(launch.command(spec.trainer, spec.config, overrides, run.gpus), env, stage_dir,
                                     log, _follow(report, stage, steps))
        finally:   # the steps done so far reach metrics.jsonl and the plots, also when the run is stopped
            _write_metrics(run, stage)
        if code != 0:
            journal.write(stage, "failed", code=code)
            raise launch.failure(stage, log, code)
    outputs = _outputs(stage, stage_dir, env, log, report)
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
    from cuda_agent.rl import rft

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
