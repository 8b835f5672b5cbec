"""A run's metrics: one JSONL line per step and stage, and the plots drawn from them.

verl's `file` logger writes `<stage>/metrics/attempt-K.jsonl` (one per launch, since it truncates
its file on open); `collect` merges them (a resumed launch's steps replace the killed one's) and
adds, from verl's rollout dumps (`<stage>/rollouts/<step>.jsonl`), the share of replies that
reached each milestone and the harness's seconds on them, and the step's seconds by part
(`seconds/rollout`, `seconds/reward`, `seconds/training`, see `step_seconds`). `summary` gives a
stage's first, last and mean of the figures that tell whether PPO works (clip fraction, the
policy's drift, entropy, reply length, the critic's explained variance) and where its time goes.
`write_plots` draws every stage on one step axis, stage boundaries marked.
"""

from __future__ import annotations

import fnmatch
import json
import math
from pathlib import Path
from typing import Any, Iterable

from cuda_agent.harness import RewardSchedule
from cuda_agent.journal import read_rows

MILESTONES = ("failed", "correct", "faster_than_eager", "faster_than_compile")

# (file, title, metric patterns): what each plot shows.
PANELS = (
    ("reward", "reward per reply (mean; validation dashed)", ("critic/score/mean", "val-core/*/reward/mean@*")),
    ("milestones", "share of replies at each milestone", tuple(f"milestone/{m}" for m in MILESTONES)),
    ("entropy", "policy entropy", ("actor/entropy",)),
    ("importance_ratio", "importance-ratio spread (rollout vs training policy)",
     ("rollout_corr/chi2_token", "rollout_corr/log_ppl_abs_diff", "actor/ppo_kl")),
    ("clip_fraction", "clip fraction", ("actor/pg_clipfrac", "actor/pg_clipfrac_lower", "critic/vf_clipfrac")),
    ("critic_loss", "critic loss", ("critic/vf_loss",)),
    ("explained_variance", "critic explained variance", ("critic/vf_explained_var",)),
    ("length", "reply length (tokens)", ("response_length/mean", "response_length/max")),
    ("turns", "turns per trajectory", ("num_turns/mean", "num_turns/max")),
    ("seconds", "seconds per step: rollout, reward, training", ("seconds/*",)),
    ("sft_loss", "RFT loss", ("train/loss", "val/loss")),
)


# what `summary` reports: its name -> the metric
SUMMARY = {"reward": "critic/score/mean", "clip_fraction": "actor/pg_clipfrac", "ppo_kl": "actor/ppo_kl",
           "entropy": "actor/entropy", "response_length": "response_length/mean",
           "explained_variance": "critic/vf_explained_var", "vf_loss": "critic/vf_loss", "sft_loss": "train/loss",
           "rollout_s": "seconds/rollout", "reward_s": "seconds/reward", "training_s": "seconds/training",
           "step_s": "timing_s/step"}
# verl's timers (timing_s/*) of a step's training part: everything after the rollout and its reward
TRAINING_TIMERS = ("old_log_prob", "ref", "values", "adv", "update_critic", "update_actor", "update_weights")


def milestone_of(score: float, schedule: RewardSchedule = RewardSchedule()) -> str:
    named = {schedule.failed: "failed", schedule.correct: "correct", schedule.faster_than_eager: "faster_than_eager",
             schedule.faster_than_compile: "faster_than_compile"}
    return named.get(float(score), "other")


def milestone_shares(rollouts: Path) -> dict[int, dict[str, float]]:
    """Per step, the share of dumped replies at each milestone (by their score), and the harness's
    seconds on them (`reward/eval_seconds_sum`, `_max`: the verdicts' `eval_seconds`)."""
    out: dict[int, dict[str, float]] = {}
    for path in rollouts.glob("*.jsonl") if rollouts.is_dir() else ():
        if not path.stem.isdigit():
            continue
        rows = list(read_rows(path))
        scores = [row["score"] for row in rows if isinstance(row.get("score"), (int, float))]
        if scores:
            names = [milestone_of(s) for s in scores]
            out[int(path.stem)] = {f"milestone/{m}": names.count(m) / len(names) for m in (*MILESTONES, "other")
                                   if m != "other" or "other" in names}
        seconds = [row["eval_seconds"] for row in rows if isinstance(row.get("eval_seconds"), (int, float))]
        if seconds:
            out.setdefault(int(path.stem), {}).update({"reward/eval_seconds_sum": float(sum(seconds)),
                                                       "reward/eval_seconds_max": float(max(seconds))})
    return out


def step_seconds(values: dict[str, float]) -> dict[str, float]:
    """A step's seconds in rollout, reward and training. verl's reward workers judge the replies while
    the rollout runs, so `timing_s/gen` holds the reward's time too, and verl times the reward apart
    (`timing_s/reward`) only when it is colocated; otherwise `seconds/reward` is the harness's longest
    verdict of the step, the least the rollout waited for its rewards, where the dumped replies carry
    `eval_seconds` (verl 0.9.1's v1 trainer dumps only input, output, score: then it is absent, and
    <stage>/rewards.jsonl holds each verdict's seconds)."""
    out = {}
    if "timing_s/gen" in values:
        out["seconds/rollout"] = values["timing_s/gen"]
    reward = values.get("timing_s/reward", values.get("reward/eval_seconds_max"))
    if reward is not None:
        out["seconds/reward"] = reward
    training = [values[f"timing_s/{t}"] for t in TRAINING_TIMERS if f"timing_s/{t}" in values]
    if training:
        out["seconds/training"] = float(sum(training))
    return out


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A stage's steps, and the first, last and mean of each figure of SUMMARY it has."""
    out: dict[str, Any] = {"steps": len(rows)}
    for name, key in SUMMARY.items():
        values = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
        if values:
            out[name] = {"first": values[0], "last": values[-1], "mean": sum(values) / len(values)}
    return out


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def collect(stage_dir: Path) -> list[dict[str, Any]]:
    """Write `<stage>/metrics.jsonl` (step, then verl's numeric metrics and the milestone shares)."""
    steps: dict[int, dict[str, float]] = {}
    attempts = sorted((stage_dir / "metrics").glob("attempt-*.jsonl"), key=lambda p: int(p.stem.split("-")[1]))
    for path in attempts:
        for row in read_rows(path):
            if isinstance(row.get("step"), int) and isinstance(row.get("data"), dict):
                steps[row["step"]] = {k: v for k, v in ((k, _number(v)) for k, v in row["data"].items()) if v is not None}
    for step, shares in milestone_shares(stage_dir / "rollouts").items():
        steps.setdefault(step, {}).update(shares)
    for values in steps.values():
        values.update(step_seconds(values))
    rows = [{"step": step, **values} for step, values in sorted(steps.items())]
    if rows or (stage_dir / "metrics").is_dir():
        tmp = stage_dir / "metrics.jsonl.tmp"
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        tmp.replace(stage_dir / "metrics.jsonl")
    return rows


def load_run(out: Path, stages: Iterable[str]) -> list[tuple[str, list[dict[str, Any]]]]:
    """Each stage's metrics, in stage order (stages without any left out)."""
    return [(s, rows) for s in stages if (rows := read_rows(out / s / "metrics.jsonl"))]


Segments = dict[str, tuple[list[float], list[float]]]   # stage -> its (x, y)


def _series(runs: list[tuple[str, list[dict[str, Any]]]], pattern: str) -> dict[str, Segments]:
    """metric name -> its (x, y) per stage on the run's step axis (each stage after the previous
    one's last step), so that no line joins two stages."""
    series: dict[str, Segments] = {}
    offset = 0
    for stage, rows in runs:
        found: dict[str, tuple[list[float], list[float]]] = {}
        for row in rows:
            for key, value in row.items():
                if key != "step" and fnmatch.fnmatchcase(key, pattern) and isinstance(value, (int, float)):
                    xs, ys = found.setdefault(key, ([], []))
                    xs.append(offset + row["step"])
                    ys.append(value)
        for key, segment in found.items():
            series.setdefault(key, {})[stage] = segment
        offset += max((r["step"] for r in rows), default=0)
    return series


def write_plots(out: Path, stages: Iterable[str]) -> list[Path]:
    """out/plots/<panel>.png for every panel with data, and overview.png with all of them; none
    (and no error) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    runs = load_run(out, stages)
    if not runs:
        return []
    folder = out / "plots"
    folder.mkdir(parents=True, exist_ok=True)
    panels = [(name, title, {k: v for p in patterns for k, v in _series(runs, p).items()})
              for name, title, patterns in PANELS]
    panels = [p for p in panels if p[2]]
    bounds, offset = [], 0
    for stage, rows in runs:
        bounds.append((offset, stage))
        offset += max((r["step"] for r in rows), default=0)
    written = []
    for name, title, series in panels:
        fig, ax = plt.subplots(figsize=(7, 4))
        _draw(ax, title, series, bounds, stacked=name == "milestones")
        fig.tight_layout()
        fig.savefig(folder / f"{name}.png", dpi=110)
        plt.close(fig)
        written.append(folder / f"{name}.png")
    cols = 3
    rows_n = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(6 * cols, 3.6 * rows_n), squeeze=False)
    for ax, (name, title, series) in zip(axes.flat, panels):
        _draw(ax, title, series, bounds, stacked=name == "milestones")
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(folder / "overview.png", dpi=90)
    plt.close(fig)
    return [*written, folder / "overview.png"]


def _draw(ax, title: str, series: dict[str, Segments], bounds: list[tuple[int, str]], stacked: bool) -> None:
    order = [*MILESTONES, "other"]
    if stacked:
        names = sorted(series, key=lambda k: order.index(k.split("/", 1)[1]) if k.split("/", 1)[1] in order else 99)
        colours = {n: f"C{i}" for i, n in enumerate(names)}
        stages = list(dict.fromkeys(stage for n in names for stage in series[n]))
        for part, stage in enumerate(stages):
            points = {n: dict(zip(*series[n][stage])) for n in names if stage in series[n]}
            steps = sorted({x for p in points.values() for x in p})
            ax.stackplot(steps, [[points.get(n, {}).get(x, 0.0) for x in steps] for n in names],
                         colors=[colours[n] for n in names], alpha=0.8,
                         labels=[n.split("/", 1)[1] if part == 0 else "_" for n in names])
        ax.set_ylim(0, 1)
    else:
        for i, (key, segments) in enumerate(sorted(series.items())):
            for j, (xs, ys) in enumerate(segments.values()):
                ax.plot(xs, ys, "--" if key.startswith("val") else "-", color=f"C{i}",
                        marker="." if len(xs) < 40 else None, label=key if j == 0 else None)
    for x, stage in bounds:
        ax.axvline(x, color="grey", lw=0.6, ls=":")
        ax.text(x, 1.0, f" {stage}", transform=ax.get_xaxis_transform(), fontsize=7, va="top", color="grey")
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("step (all stages)", fontsize=8)
    ax.legend(fontsize=6, loc="best")
    ax.tick_params(labelsize=7)
