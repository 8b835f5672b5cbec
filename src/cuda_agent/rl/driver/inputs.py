"""What each stage of `cuda-agent train` reads: its data (the RL Parquet of the four stages, RFT's
SFT rows, the value stage's replays, the families' own rows) and the overrides that point verl at
it and at the models the stage starts from (the previous stages' outputs, from the stage journal).
The stages themselves run in train.py.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable

from cuda_agent.rl.data.rows import (AGENTIC, KERNELBENCH, REPLAY, SINGLE_TURN, KernelBenchGuard, load_training_tasks,
                                     read_parquet, rl_row, rl_rows, split_tasks, write_parquet)
from cuda_agent.rl.driver import fill_demos, launch
from cuda_agent.rl.driver.stages import COLLECTS, SPECS, RunConfig, TrainError, mapping_overrides

Report = Callable[[dict[str, Any]], None]   # progress events, see train.run_stage


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
    from cuda_agent.rl.data import rft

    sources = ([collected] if collected else []) + list(run.trajectories)
    found = [rft.from_trajectory(path) for path in rft.trajectory_files(sources)]
    return [c for c in found if c is not None], sources


def rft_data(run: RunConfig, collected: str | None, actor: str, max_length: int,
             report: Report) -> tuple[Path, int, dict[str, Any]]:
    """out/rft/sft.parquet from the collected runs and the run's trajectories (rl/data/rft.py) that pass
    the filter; no conversation longer than the SFT trainer's data.max_length (it refuses to truncate)."""
    from cuda_agent.rl.data import rft

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
        from cuda_agent.rl.data.sanity import write_sanity_data

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
        from cuda_agent.rl.data.fill import write_fill_sft

        sft = write_fill_sft(run.out / "data" / "fill" / "sft.parquet", run.harness_device, run.seed,
                             copies=run.fill.copies, ops=run.fill.rft_ops, tier=run.fill.tier)
        return ([*common, f"model.path={run.model}", f"data.train_files={sft}", "data.val_files=null"],
                len(read_parquet(sft)), {"actor": run.model, "data": str(sft), "tier": run.fill.tier})
    if stage == "fill":
        from cuda_agent.rl.data.fill import write_fill_data

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
    """The fill family's multi-turn form (rl/data/fill_agent.py): fill_collect runs a trained actor, frozen, on the
    held-out tasks (the measurement); fill_agentic trains fill_agentic_rft's actor on the training tasks."""
    from cuda_agent.rl.data.fill_agent import STAGE_OVERRIDES, write_fill_agent_data

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
    own = launch.evaluation_gpus(run)              # decided once, for the agent loop's service and the reward's
    loops = launch.write_agent_loops(run, stage_dir, own)
    return [f"trainer.rollout_data_dir={stage_dir / 'rollouts'}",
            f"trainer.validation_data_dir={stage_dir / 'validation'}",
            f"actor_rollout_ref.rollout.agent.agent_loop_config_path={loops}",
            f"{kwargs}.journal={stage_dir / 'reward_service.jsonl'}",
            f"{kwargs}.evaluators_per_gpu={harness['evaluators_per_device']}",
            f"{kwargs}.evaluators={harness['cpu_evaluators']}", f"{kwargs}.build_workers={harness['build_workers']}",
            # the reward's evaluators on GPUs of their own, else on the trainer's first (the configs' shared_gpu "0")
            *([f"{kwargs}.shared_gpu=null", f"{kwargs}.gpus={own}"] if own else [])]
