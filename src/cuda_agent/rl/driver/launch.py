"""Launching verl for one stage: composing and checking its config, the processes' environment,
the command line, following its output, finding its checkpoints and merging them (the process that
runs verl, its group and its signals: verl_process.py).

verl runs in a child process (its own Ray, its own workers); this side reads its console output
for progress and its `file` logger's JSONL for metrics, and never imports verl's trainers.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable

from cuda_agent.home import RAY_TMP_PREFIX, private_ray_tmp
from cuda_agent.journal import Journal, read_rows
from cuda_agent.rl.driver.stages import CONFIG_DIR, SPECS, RunConfig, TrainError
# verl's process (its group, its log, its signals): imported by train.py and the CLI from here
from cuda_agent.rl.driver.verl_process import PID_FILE, Terminated, run_logged, stop_leftover  # noqa: F401

# --- the stage journal ----------------------------------------------------------------------------


class StageJournal:
    """stages.jsonl: started / finished (with the stage's outputs) / failed / redo, per stage."""

    def __init__(self, out: Path):
        self.path = out / "stages.jsonl"

    def state(self, stage: str) -> dict[str, Any] | None:
        """The stage's last record (None: never started)."""
        rows = [r for r in read_rows(self.path) if r.get("stage") == stage]
        return rows[-1] if rows else None

    def finished(self, stage: str) -> dict[str, Any] | None:
        row = self.state(stage)
        return row if row and row.get("event") == "finished" else None

    def attempts(self, stage: str) -> int:
        rows = [r for r in read_rows(self.path) if r.get("stage") == stage]
        since = max((i for i, r in enumerate(rows) if r.get("event") == "redo"), default=-1)
        return sum(1 for r in rows[since + 1:] if r.get("event") == "started")

    def write(self, stage: str, event: str, **fields: Any) -> None:
        journal = Journal(self.path)
        try:
            journal.append({"stage": stage, "event": event, "at": round(time.time(), 3), **fields})
        finally:
            journal.close()


# --- composing and checking a stage's verl config ---------------------------------------------------


def compose(config_name: str, overrides: list[str]):
    """verl's config for a stage, composed as verl will compose it (Hydra errors become TrainErrors)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
            return hydra_compose(config_name=config_name, overrides=overrides)
    except (HydraException, OmegaConfBaseException) as e:
        raise TrainError(f"the {config_name} config does not compose with these overrides: "
                         f"{str(e).strip().splitlines()[0]}") from None


def platform_overlay(run: RunConfig, stage: str) -> list[str]:
    if run.platform != "cpu":
        return []
    return ["+cpu=sft"] if SPECS[stage].trainer == "sft" else ["+cpu=ppo"]


def check_ppo(stage: str, cfg, train_rows: int, device: str) -> None:
    """What verl does not check itself, or checks only after minutes of start-up."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    t = cfg.trainer
    steps = t.total_training_steps
    if SPECS[stage].merges and (t.save_freq is None or t.save_freq <= 0):
        raise TrainError(f"{stage}: trainer.save_freq is {t.save_freq}; the next stage starts from this stage's last "
                         "checkpoint, so it must be > 0 (e.g. trainer.save_freq=10)")
    # verl trains the actor at every step s (counted from 1) with s >= critic_warmup: frozen needs critic_warmup > steps
    if stage == "value" and (steps is None or t.critic_warmup <= steps):
        raise TrainError(f"value: trainer.critic_warmup ({t.critic_warmup}) must be > trainer.total_training_steps "
                         f"({steps}; verl updates the actor from step critic_warmup on): value pretraining never "
                         f"updates the actor, e.g. trainer.critic_warmup={(steps or 0) + 1}")
    if cfg.actor_rollout_ref.rollout.tensor_model_parallel_size != 1 and t.n_gpus_per_node == 1:
        raise TrainError(f"{stage}: actor_rollout_ref.rollout.tensor_model_parallel_size must be 1 on one GPU")
    check_reward(stage, cfg, device)
    check_agent_loop(stage, cfg)
    if cfg.actor_rollout_ref.rollout.agent.default_agent_loop in ("cuda_agent", "cuda_agent_replay"):
        require_tool_template(cfg.actor_rollout_ref.model.path, stage)   # the policy must see its tools
    if train_rows < cfg.data.train_batch_size:
        raise TrainError(f"{stage}: {train_rows} training rows, fewer than data.train_batch_size="
                         f"{cfg.data.train_batch_size}; lower it ({stage}:data.train_batch_size=N, with "
                         "actor_rollout_ref.actor.ppo_mini_batch_size <= N) or add tasks")
    check_micro_batches(stage, cfg)
    try:
        with contextlib.redirect_stdout(io.StringIO()):   # it prints a line of its own on success
            validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    except (AssertionError, ValueError) as e:
        raise TrainError(f"{stage}: verl refuses the config: {e}") from None


def check_micro_batches(stage: str, cfg) -> None:
    """Without dynamic batch sizes verl splits each batch into micro-batches of a fixed size and asserts,
    deep in a worker after minutes of start-up, that the batch divides evenly (a value stage with
    data.train_batch_size=1 and the one-GPU config's micro-batches of 2 failed so on the H100)."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy

    ref, world = cfg.actor_rollout_ref, max(1, int(cfg.trainer.n_gpus_per_node) * int(cfg.trainer.nnodes))
    n = int(ref.rollout.n)
    step_rows = int(cfg.data.train_batch_size) * n // world
    checks = [("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", ref.rollout, step_rows,
               "data.train_batch_size", int(cfg.data.train_batch_size))]
    steps = cfg.trainer.total_training_steps
    if steps is None or cfg.trainer.critic_warmup <= steps:   # the actor updates (value pretraining: it never does)
        checks.append(("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", ref.actor,
                       int(ref.actor.ppo_mini_batch_size) * n // world, "actor_rollout_ref.actor.ppo_mini_batch_size",
                       int(ref.actor.ppo_mini_batch_size)))
    if need_reference_policy(cfg):
        checks.append(("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", ref.ref, step_rows,
                       "data.train_batch_size", int(cfg.data.train_batch_size)))
    if need_critic(cfg):
        critic_mini = int(cfg.critic.get("ppo_mini_batch_size") or ref.actor.ppo_mini_batch_size)
        checks += [("critic.forward_micro_batch_size_per_gpu", cfg.critic, step_rows,
                    "data.train_batch_size", int(cfg.data.train_batch_size)),
                   ("critic.ppo_micro_batch_size_per_gpu", cfg.critic, critic_mini * n // world,
                    "critic.ppo_mini_batch_size", critic_mini)]
    for key, section, rows, batch_key, batch in checks:
        micro = section.get(key.rsplit(".", 1)[1])
        if micro is None or section.get("use_dynamic_bsz", False) or rows % int(micro) == 0:
            continue
        fits = max(d for d in range(1, int(micro) + 1) if rows % d == 0)
        raise TrainError(f"{stage}: {key}={micro} does not divide the {rows} rows each GPU gets "
                         f"({batch_key}={batch} x actor_rollout_ref.rollout.n={n} / {world} GPU(s)); verl would "
                         f"stop on it after its start-up. Set {stage}:{key}={fits}, or make {batch_key} a multiple "
                         f"of {micro}")


def check_agent_loop(stage: str, cfg) -> None:
    """The stage's agent loop, when agent_loops.yaml names it, must import here (verl would find out
    in a Ray worker after its start-up)."""
    import importlib

    import yaml

    agent = cfg.actor_rollout_ref.rollout.agent
    path = agent.get("agent_loop_config_path")
    if not path or not Path(path).is_file():
        return
    targets = {e["name"]: e["_target_"] for e in yaml.safe_load(Path(path).read_text()) or []}
    target = targets.get(agent.default_agent_loop)
    if target is None:
        return
    module, _, name = target.rpartition(".")
    try:
        getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise TrainError(f"{stage}: its agent loop {agent.default_agent_loop!r} is {target}, which does not import "
                         f"here ({e}); install the cuda-agent that has it, or point "
                         "actor_rollout_ref.rollout.agent.agent_loop_config_path at a file that names another") from None


def require_tool_template(model: str | Path, stage: str) -> None:
    """TrainError unless the model folder's chat template shows hermes tool calls (the agent loop's
    policy could never call a tool otherwise; rl/rollout/chat_template.py tells them apart); a path
    that is not a model folder is left to verl."""
    if not (Path(model) / "tokenizer_config.json").is_file():
        return
    from transformers import AutoTokenizer

    from cuda_agent.rl.rollout.chat_template import renders_tool_calls

    if not renders_tool_calls(AutoTokenizer.from_pretrained(str(model))):
        raise TrainError(f"{stage}: the chat template of {model} does not show tool calls (no <tool_call> block, or "
                         "no tools listed), so the policy in the agent loop could never call a tool. Give the model "
                         f"cuda-agent's tool template: `python -m cuda_agent.rl.rollout.chat_template {model}` "
                         "(SmolLM2: convert it with `python -m cuda_agent.rl.tools.pretrained OUT --tool-template`)")


def check_reward(stage: str, cfg, device: str) -> None:
    """The reward's settings, as its workers will read them (a typo would otherwise surface in a Ray
    worker's log after the trainer's start-up)."""
    from omegaconf import OmegaConf

    from cuda_agent.rl.workers.reward import RewardSettings

    function = cfg.reward.custom_reward_function
    if function.get("path") != "pkg://cuda_agent.rl.workers.reward":
        return
    kwargs = OmegaConf.to_container(function.get("reward_kwargs") or {}, resolve=True)
    try:
        settings = RewardSettings.from_kwargs(kwargs)
        settings.service_settings(settings.device or device)
    except TypeError as e:
        raise TrainError(f"{stage}: reward.custom_reward_function.reward_kwargs: {e}") from None


def total_steps(cfg, train_rows: int) -> int | None:
    """The stage's number of optimizer steps, where the config says it."""
    steps = cfg.trainer.get("total_training_steps")
    if steps:
        return int(steps)
    batch = cfg.data.get("train_batch_size") or 0
    return (train_rows // batch) * int(cfg.trainer.total_epochs) if batch else None


# --- running verl ---------------------------------------------------------------------------------


def stage_env(run: RunConfig, stage_dir: Path, attempt: int) -> dict[str, str]:
    """The environment of a stage's processes (Ray workers inherit it)."""
    import cuda_agent

    env = dict(os.environ)
    for key, value in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                       "RAY_USAGE_STATS_ENABLED": "0", "WANDB_MODE": "disabled", "TOKENIZERS_PARALLELISM": "false",
                       "NCCL_NVLS_ENABLE": "0"}.items():
        env.setdefault(key, value)
    if not env.get("RAY_ADDRESS"):
        # verl starts a local Ray: token auth, as Ray (2.60) chooses for one, said so that Ray does not warn
        # about it on every stage (a cluster's own setting is left to it); "local": a Ray of the stage's own,
        # never the cluster /tmp/ray/ray_current_cluster names (a bare ray.init() joins it, and waits if it is
        # gone). To run on a cluster, RAY_ADDRESS=auto (or its address) is set by the user.
        env.setdefault("RAY_AUTH_MODE", "token")
        env["RAY_ADDRESS"] = "local"
        # its sessions in a folder of the stage's own, out of the sandbox users' reach (home.private_ray_tmp);
        # removed when the stage ends (remove_ray_tmp); a folder the user named is theirs
        if not env.get("RAY_TMPDIR"):
            env["RAY_TMPDIR"] = str(private_ray_tmp())
    modules = [m for m in env.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m]
    env["VERL_USE_EXTERNAL_MODULES"] = ",".join(dict.fromkeys(["cuda_agent.rl.workers.plugin", *modules]))
    src = str(Path(cuda_agent.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([src, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]))
    env["PYTHONUNBUFFERED"] = "1"
    (stage_dir / "metrics").mkdir(parents=True, exist_ok=True)   # verl's file logger does not make it
    env["VERL_FILE_LOGGER_PATH"] = str(stage_dir / "metrics" / f"attempt-{attempt}.jsonl")
    env["TENSORBOARD_DIR"] = str(stage_dir / "tensorboard")
    env["CUDA_AGENT_REWARD_LOG"] = str(stage_dir / "rewards.jsonl")
    if run.platform == "cpu":
        env["VERL_PLATFORM"] = "cpu"
    return env


def remove_ray_tmp(env: dict[str, str]) -> None:
    """The folder of a stage's local Ray sessions (stage_env), once the stage has ended."""
    path = Path(env.get("RAY_TMPDIR", ""))
    if path.name.startswith(RAY_TMP_PREFIX):   # ours, not a folder the user named
        shutil.rmtree(path, ignore_errors=True)


def loggers() -> str:
    """verl's loggers: the console (progress), `file` (metrics JSONL), and TensorBoard where installed."""
    import importlib.util

    return "[console,file,tensorboard]" if importlib.util.find_spec("tensorboard") else "[console,file]"


def command(spec_trainer: str, config_name: str, overrides: list[str], gpus: int) -> list[str]:
    base = ["--config-path", str(CONFIG_DIR), "--config-name", config_name, *overrides, "hydra.run.dir=hydra",
            "hydra.output_subdir=null"]
    if spec_trainer == "sft":
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(gpus),
                "-m", "verl.trainer.sft_trainer", *base]
    return [sys.executable, "-m", "verl.trainer.main_ppo", *base]


def latest_checkpoint(checkpoints: Path) -> Path | None:
    """verl's last complete checkpoint (latest_checkpointed_iteration.txt), or None."""
    tracker = checkpoints / "latest_checkpointed_iteration.txt"
    if not tracker.is_file():
        return None
    step = tracker.read_text().strip()
    folder = checkpoints / f"global_step_{step}"
    return folder if step.isdigit() and folder.is_dir() else None


def merge(part: Path, target: Path, env: dict[str, str], log: Path, on_line: Callable[[str], None]) -> Path:
    """verl's FSDP checkpoint of one model -> a Hugging Face folder."""
    if target.exists():
        shutil.rmtree(target)
    cmd = [sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp", "--local_dir", str(part),
           "--target_dir", str(target)]
    code = run_logged(cmd, env, part, log, on_line)
    if code != 0 or not (target / "config.json").is_file():
        raise TrainError(f"merging {part} into {target} failed (exit {code}); see {log}")
    return target


class StageFailed(TrainError):
    """verl's run of a stage failed (exit code 1 of the command, not 2: the config was fine)."""

    failed_run = True


def failure(stage: str, log: Path, code: int) -> TrainError:
    """The error of a verl run that failed, with the last error lines of its log."""
    lines = [_ANSI.sub("", l).strip() for l in (log.read_text(errors="replace").splitlines()[-600:]
                                                if log.is_file() else [])]
    hints = [l for l in lines if _ERROR.search(l) and "Warning" not in l]
    tail = "\n  ".join(dict.fromkeys(hints[-5:] or lines[-5:]))
    return StageFailed(f"{stage}: verl exited with code {code}. The log is {log}; its last errors:\n  {tail}\n"
                       "Fix the cause and run the same command again: the stage resumes from its last checkpoint.")


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_ERROR = re.compile(r"\b\w*(Error|Exception)\b[:(]|^Error |Traceback|exit code")


def parse_step(line: str) -> tuple[int, dict[str, float]] | None:
    """verl's console metrics line ("step:N - key:value - ...", printed by a Ray actor with its
    "(TaskRunnerV1 pid=...)" prefix and colours) as (N, metrics), else None."""
    m = _STEP.search(_ANSI.sub("", line))
    if not m:
        return None
    out = {}
    for part in m[2].split(" - "):
        key, _, value = part.partition(":")
        value = _NUMPY.sub(r"\1", value.strip())
        try:
            out[key.strip()] = float(value)
        except ValueError:
            continue
    return int(m[1]), out


_STEP = re.compile(r"(?:^|\) )step:(\d+) - (.*)$")
_NUMPY = re.compile(r"^np\.\w+\((.*)\)$")


def evaluation_gpus(run: RunConfig) -> int:
    """How many GPUs of its own the evaluation service gets beside the trainer's (`harness.gpus`; null: the
    node's beyond the trainer's `gpus`); 0: it shares the trainer's first GPU (one GPU, or none left over).
    A count that cannot fit beside the trainer's on this node is refused before anything starts."""
    if run.platform != "gpu" or run.harness_device != "cuda":
        return 0
    from cuda_agent.devices import visible_gpus

    node = len(visible_gpus())
    wanted = run.harness.gpus
    if wanted is None:
        return max(0, node - run.gpus)
    if wanted < 0:
        raise TrainError(f"{run.path}: harness.gpus is {wanted}; give 0 (share the trainer's GPU) or more")
    if wanted and node and run.gpus + wanted > node:
        raise TrainError(f"{run.path}: the trainer's {run.gpus} GPU(s) and the harness's {wanted} do not fit the "
                         f"{node} this node has: lower harness.gpus or gpus, or set harness.gpus: 0 to share")
    return wanted


def write_agent_loops(run: RunConfig, stage_dir: Path, own_gpus: int | None = None) -> Path:
    """<stage>/agent_loops.yaml: the plug-in's agent loops (rl/rollout/agent_loops.yaml) with this run's
    options: the harness's device and service (evaluators, builders, its GPUs: `own_gpus`, else
    evaluation_gpus, as the reward's), the agent config, the run folders kept in the stage's folder."""
    import yaml

    from cuda_agent.rl.driver.stages import AGENT_LOOPS

    entries = yaml.safe_load(AGENT_LOOPS.read_text()) or []
    for entry in entries:
        entry["device"] = run.harness_device
        if entry["name"] == "cuda_agent":
            entry["runs_dir"] = str(stage_dir / "runs")
            if run.agent_config:
                entry["agent_config"] = str(run.agent_config)
            entry["service"] = {**(entry.get("service") or {}), **run.harness.resolved(run.platform)}
            if run.platform == "gpu" and run.harness_device == "cuda":
                own = evaluation_gpus(run) if own_gpus is None else own_gpus
                entry["service"].update({"gpus": own} if own else {"shared_gpu": "0"})
    path = stage_dir / "agent_loops.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# written by cuda-agent train from cuda_agent/rl/rollout/agent_loops.yaml\n" + yaml.safe_dump(entries))
    return path


def key_checker(run: RunConfig) -> Callable[[str, str], bool]:
    """Whether a stage's config has a key (to route a bare command-line override to its stages)."""
    from omegaconf import OmegaConf

    composed: dict[str, Any] = {}

    def has(stage: str, key: str) -> bool:
        if stage not in composed:
            composed[stage] = compose(SPECS[stage].config, platform_overlay(run, stage))
        return OmegaConf.select(composed[stage], key, default="__missing__") != "__missing__"

    return has
