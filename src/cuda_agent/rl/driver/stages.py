"""The four stages and a run's config: what each stage runs, what it reads, the overrides it gets.

A run (`cuda-agent train STAGE --config run.yaml`) is described by one YAML file (run.example.yaml
beside the stage configs shows every key); its paths are relative to that file, except the `out`
of a file shipped inside the package (the examples), which is relative to the current directory:
a run's folder is never inside the installed package. `model: tiny` is the 2 M-parameter test
model (rl/tools/tiny_model.py), built into <out>/tiny_model on first use. Each stage runs
one of verl's trainers with a bundled stage config (rl/driver/config/) and these overrides, in order:
the paths this run fills in (model, data, checkpoints, logs), the run file's `stages.<stage>`
mapping, then the command line's `key=value` arguments. On the command line, `STAGE:key=value`
goes to one stage; a bare `key=value` goes to every stage whose config has that key.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from cuda_agent.config_check import ConfigError, typed
from cuda_agent.devices import DEVICES

CONFIG_DIR = Path(__file__).resolve().parent / "config"
PACKAGE_DIR = CONFIG_DIR.parents[2]          # the installed cuda_agent package
# the agent loops' list (rl/rollout/agent_loop.py), with defaults; a path, so that the driver imports no verl
AGENT_LOOPS = PACKAGE_DIR / "rl" / "rollout" / "agent_loops.yaml"
STAGES = ("warmup", "collect", "rft", "collect_rft", "value", "agentic")
# a collecting stage -> the stage whose actor it runs (fill_collect: fill_agentic_rft's, fill's or fill_rft's)
COLLECTS = {"collect": "warmup", "collect_rft": "rft", "fill_collect": "fill"}
FILL_STAGES = ("fill_rft", "fill", "fill_agentic_rft", "fill_collect", "fill_agentic")   # own data (rl/data/fill*.py, fill_demos.py)
PLATFORMS = ("gpu", "cpu")


class TrainError(Exception):
    """A problem the user can fix: the message says what was wrong and what to do."""


@dataclass(frozen=True)
class StageSpec:
    name: str
    trainer: str          # ppo (verl.trainer.main_ppo) | sft (verl.trainer.sft_trainer under torchrun)
    config: str           # the bundled stage config
    merges: tuple[str, ...]  # the checkpoint parts merged into Hugging Face folders when it ends
    summary: str


SPECS = {
    "warmup": StageSpec("warmup", "ppo", "warmup", ("actor", "critic"),
                        "single-turn PPO with a critic, rewarded by the harness"),
    "collect": StageSpec("collect", "ppo", "collect", (),
                         "the warmed-up actor runs the agent loop on the training tasks; its trajectories feed RFT"),
    "rft": StageSpec("rft", "sft", "rft", (), "rejection fine-tuning of the actor on the kept trajectories"),
    "collect_rft": StageSpec("collect_rft", "ppo", "collect", (),
                             "RFT's actor runs the agent loop on the training tasks; its trajectories feed the critic"),
    "value": StageSpec("value", "ppo", "value", ("critic",), "value pretraining of the critic on the RFT actor's trajectories"),
    "agentic": StageSpec("agentic", "ppo", "agentic", ("actor", "critic"),
                         "multi-turn agentic PPO with the pretrained critic"),
    # not one of the four: the learning sanity run (rl/data/sanity.py, a plumbing smoke test), on its own
    "sanity": StageSpec("sanity", "ppo", "sanity", (), "PPO with a critic on the learning sanity family"),
    # the fill-the-kernel family (rl/data/fill.py): the policy writes the kernel's expression
    "fill_rft": StageSpec("fill_rft", "sft", "fill_rft", (),
                          "RFT of the actor on correct examples of the fill family's training operators"),
    "fill": StageSpec("fill", "ppo", "fill", ("actor", "critic"),
                      "PPO with a critic on the fill family, from fill_rft's actor (or the model named)"),
    # its multi-turn form (rl/data/fill_agent.py): the same tasks in the agent loop, verify and retry
    "fill_agentic_rft": StageSpec("fill_agentic_rft", "sft", "fill_agentic_rft", (),
                                  "RFT of the actor on scripted runs of the multi-turn form that the harness passed "
                                  "(edit, verify, read the verdict, fix: rl/driver/fill_demos.py)"),
    "fill_collect": StageSpec("fill_collect", "ppo", "collect", (),
                              "fill_agentic_rft's actor (or fill's, or fill_rft's) runs the agent loop on the fill "
                              "family's held-out tasks: pass after turn k vs turn 1"),
    "fill_agentic": StageSpec("fill_agentic", "ppo", "agentic", ("actor", "critic"),
                              "multi-turn PPO on the fill family's tasks in the agent loop, from fill_agentic_rft's "
                              "actor"),
}


@dataclass
class RFTSettings:
    min_reward: float = 1.0
    max_turns: int = 150
    max_tokens: int = 32768


@dataclass
class HarnessSettings:
    """The evaluation service behind the reward and the agent loop's tools (null: from the machine)."""

    # GPUs the evaluation service has to itself, apart from the trainer's `gpus` (its evaluators ask Ray for
    # them); 0: its evaluators share the trainer's first GPU (the default: the path measured on the device so
    # far); null: the node's GPUs beyond the trainer's, else 0.
    gpus: int | None = 0
    evaluators_per_gpu: int = 1           # evaluators sharing each GPU (they take its lock to time)
    cpu_evaluators: int = 1               # the CPU backend: evaluators at once
    build_workers: int | None = None      # CPU build workers ahead of the evaluators; null: a quarter of the
                                          # cores (at least 1), none on the cpu platform (the trainer has them)

    def resolved(self, platform: str) -> dict[str, int]:
        """The service's settings for a run on `platform`, as ServiceSettings names them."""
        build = self.build_workers
        if build is None:
            build = 0 if platform == "cpu" else max(1, (os.cpu_count() or 1) // 4)
        return {"evaluators_per_device": int(self.evaluators_per_gpu), "cpu_evaluators": int(self.cpu_evaluators),
                "build_workers": int(build)}


@dataclass
class SanitySettings:
    train_tasks: int = 8       # at least the sanity config's data.train_batch_size
    val_tasks: int = 2
    shuffle: bool = True      # letters shuffled per task (a real model); false: one fixed order (the tiny model)


@dataclass
class FillSettings:
    """The fill family's run (rl/data/fill.py): which training operators fill_rft's correct examples show
    (null: all of them; the others are learned in the fill stage from the harness's reward alone),
    and the tier: 1, the expression, judged for correctness (reward -1 or 1); 2, the expression and
    a choice that changes only speed (EPT), every correct reply timed (reward up to 3). fill_agentic_rft
    runs `demos` scripted demonstrations of the multi-turn form, `wrong_share` of them first wrong."""

    rft_ops: list[str] | None = None
    copies: int = 1            # each correct example this many times
    tier: int = 1
    demos: int = 128           # fill_agentic_rft's demonstrations (rl/driver/fill_demos.py)
    wrong_share: float = 0.4   # of them, those that write a plausible wrong expression first, then fix it


@dataclass
class RunConfig:
    """One training run (the `--config` YAML file)."""

    path: Path                                   # the YAML file
    out: Path                                    # everything the run writes
    model: str                                   # the starting actor: a Hugging Face model folder
    tiny: bool = False                           # `model: tiny`: the test model, built into out/tiny_model
    tasks: list[Path] = field(default_factory=list)   # training tasks (synthesized datasets, folders, .py)
    platform: str = "gpu"                        # gpu | cpu (verl's CPU platform: tests, CI)
    device: str | None = None                    # where the harness judges: cuda | cpu (default: the platform's)
    gpus: int = 1                                # trainer.n_gpus_per_node
    kernelbench: Path | None = None              # never trained on; validation tasks from it
    kernelbench_val: int = 0                     # KernelBench tasks in the validation set
    val_fraction: float = 0.05
    seed: int = 0
    agent_config: Path | None = None             # the agent's TOML over agent/config.toml, for the agentic stage
    trajectories: list[str] = field(default_factory=list)   # more agent runs for RFT and value pretraining
    rft: RFTSettings = field(default_factory=RFTSettings)
    harness: HarnessSettings = field(default_factory=HarnessSettings)
    sanity: SanitySettings = field(default_factory=SanitySettings)
    fill: FillSettings = field(default_factory=FillSettings)
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)   # verl overrides per stage

    @property
    def harness_device(self) -> str:
        return self.device or ("cuda" if self.platform == "gpu" else "cpu")


@dataclass
class _RunFile:
    """The run file's values as YAML gives them, before its paths are resolved (types checked)."""

    out: str
    model: str
    tasks: str | list[str] | None = None
    platform: str = "gpu"
    device: str | None = None
    gpus: int = 1
    kernelbench: str | None = None
    kernelbench_val: int = 0
    val_fraction: float = 0.05
    seed: int = 0
    agent_config: str | None = None
    trajectories: str | list[str] | None = None
    rft: Any = None                # the sections are checked by _section
    harness: Any = None
    sanity: Any = None
    fill: Any = None
    stages: Any = None


_KEYS = {f.name for f in fields(_RunFile)}


def load_run_config(path: str | Path) -> RunConfig:
    """Read and check a run's YAML file; TrainError names the file, the key and the fix."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise TrainError(f"{path}: no such run config; `cuda-agent train --help` shows its keys, and "
                         f"{CONFIG_DIR / 'run.example.yaml'} is an example")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise TrainError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(raw, dict):
        raise TrainError(f"{path}: a run config is a YAML mapping (out, model, tasks, ...)")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise TrainError(f"{path}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(_KEYS))}")
    for key in ("out", "model"):
        if not raw.get(key):
            raise TrainError(f"{path}: `{key}` is missing; it is required")
    base = path.parent

    def rel(p: Any) -> Path:
        return (base / str(p)).resolve() if not Path(str(p)).is_absolute() else Path(str(p))

    stages = raw.get("stages") or {}
    bad = sorted(set(stages) - set(SPECS))
    if bad or not isinstance(stages, dict) or not all(isinstance(v or {}, dict) for v in stages.values()):
        raise TrainError(f"{path}: `stages` maps a stage ({', '.join(SPECS)}) to verl overrides "
                         f"(`key: value`){'; unknown: ' + ', '.join(bad) if bad else ''}")
    platform = raw.get("platform", "gpu")
    if platform not in PLATFORMS:
        raise TrainError(f"{path}: platform {platform!r}: use gpu or cpu")
    if raw.get("device") not in (None, *DEVICES):
        raise TrainError(f"{path}: device {raw['device']!r}: use cuda or cpu")
    try:
        file = typed(_RunFile, raw, path)
    except ConfigError as e:
        raise TrainError(str(e)) from None
    rft_settings = _section(path, raw, "rft", RFTSettings)
    sanity_settings = _section(path, raw, "sanity", SanitySettings)
    harness_settings = _section(path, raw, "harness", HarnessSettings)
    fill_settings = _section(path, raw, "fill", FillSettings)
    if fill_settings.tier not in (1, 2):
        raise TrainError(f"{path}: fill.tier is {fill_settings.tier}; use 1 (the expression, correctness) or 2 "
                         "(the expression and EPT, timed)")
    if fill_settings.demos < 1 or not 0 <= fill_settings.wrong_share <= 1:
        raise TrainError(f"{path}: fill.demos is {fill_settings.demos} and fill.wrong_share {fill_settings.wrong_share}; "
                         "demos must be at least 1, wrong_share between 0 and 1")
    if fill_settings.rft_ops is not None:
        from cuda_agent.rl.data.fill import OPS

        known = [op.name for op in OPS if op.seen]
        unknown = sorted(set(fill_settings.rft_ops) - set(known))
        if unknown or not fill_settings.rft_ops:
            raise TrainError(f"{path}: fill.rft_ops names training operators of the fill family ({', '.join(known)})"
                             + (f"; unknown: {', '.join(unknown)}" if unknown else "; it is empty"))
    agent_config = rel(file.agent_config) if file.agent_config else None
    if agent_config is not None:
        _check_agent_config(path, agent_config)
    model = file.model
    model = str(rel(model)) if (base / model).exists() or model.startswith(".") else model
    tiny = model == "tiny"
    tasks = file.tasks or []
    tasks = tasks if isinstance(tasks, list) else [tasks]
    trajectories = file.trajectories or []
    trajectories = trajectories if isinstance(trajectories, list) else [trajectories]
    out = rel(file.out)
    if _inside(path.resolve(), PACKAGE_DIR) and not Path(file.out).is_absolute():
        out = (Path.cwd() / file.out).resolve()   # a shipped example's run is the user's: here
    if _inside(out.resolve(), PACKAGE_DIR):
        raise TrainError(f"{path}: `out` is {out}, inside the installed cuda_agent package ({PACKAGE_DIR}); a run "
                         "writes gigabytes and would be lost with the next install: set `out` to a folder of your "
                         "own (relative paths are relative to the run file)")
    return RunConfig(
        path=path.resolve(), out=out, model=str(out / "tiny_model") if tiny else model, tiny=tiny, tasks=[rel(t) for t in tasks], platform=platform,
        device=file.device, gpus=file.gpus, kernelbench=rel(file.kernelbench) if file.kernelbench else None,
        kernelbench_val=file.kernelbench_val, val_fraction=file.val_fraction, seed=file.seed, agent_config=agent_config,
        trajectories=[str(rel(t)) for t in trajectories], rft=rft_settings, harness=harness_settings,
        sanity=sanity_settings, fill=fill_settings,
        stages={k: dict(v or {}) for k, v in stages.items()})


def _check_agent_config(path: Path, agent_config: Path) -> None:
    """The agent's TOML that the agentic stage reads, checked now rather than when that stage starts."""
    from cuda_agent.agent.config import load_config

    try:
        load_config(agent_config)
    except ConfigError as e:
        raise TrainError(f"{path}: agent_config: {e}") from None


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _section(path: Path, raw: dict[str, Any], key: str, cls: type) -> Any:
    values = raw.get(key) or {}
    names = [f.name for f in fields(cls)]
    if not isinstance(values, dict) or set(values) - set(names):
        raise TrainError(f"{path}: `{key}` takes {', '.join(names)}")
    try:
        return typed(cls, values, path, key)
    except ConfigError as e:
        raise TrainError(str(e)) from None


# --- overrides ------------------------------------------------------------------------------------


def hydra_value(value: Any) -> str:
    """A Python value as Hydra's override grammar reads it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    text = str(value)
    plain = text and text not in ("null", "true", "false") and all(c.isalnum() or c in "/._-:+@" for c in text)
    return text if plain else "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def mapping_overrides(mapping: dict[str, Any]) -> list[str]:
    """A run file's `stages.<stage>` mapping as `key=value` overrides."""
    return [f"{key}={hydra_value(value)}" for key, value in mapping.items()]


def split_override(text: str) -> tuple[str | None, str]:
    """`STAGE:key=value` -> (STAGE, key=value); `key=value` -> (None, key=value). TrainError if malformed."""
    if "=" not in text:
        raise TrainError(f"override {text!r}: write key=value (or STAGE:key=value), e.g. trainer.total_training_steps=2")
    head, _ = text.split("=", 1)
    if ":" in head:
        stage, rest = text.split(":", 1)
        if stage not in SPECS:
            raise TrainError(f"override {text!r}: {stage!r} is not a stage; use one of {', '.join(SPECS)}")
        return stage, rest
    return None, text


def override_key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def route_overrides(cli: list[str], stages: list[str], has_key) -> dict[str, list[str]]:
    """The command line's overrides per stage: `STAGE:key=value` to that stage, a bare one to every
    stage in `stages` whose config has the key (`has_key(stage, key)`); TrainError if none has it."""
    routed: dict[str, list[str]] = {s: [] for s in stages}
    for text in cli:
        stage, override = split_override(text)
        if stage is not None:
            if stage in routed:
                routed[stage].append(override)
            continue
        takers = [s for s in stages if override.startswith("+") or has_key(s, override_key(override))]
        if len(stages) > 1 and override.startswith("+"):
            raise TrainError(f"override {text!r}: say which stage adds the key: STAGE:{override}")
        if not takers:
            raise TrainError(f"override {text!r}: no stage config has `{override_key(override)}` "
                             f"({', '.join(stages)}); check the spelling, or add it with +{override}")
        for s in takers:
            routed[s].append(override)
    return routed
