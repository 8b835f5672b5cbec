"""A run's metrics: one JSONL line per step and stage, and the plots drawn from them.

verl's `file` logger writes `<stage>/metrics/attempt-K.jsonl` (one per launch, since it truncates
its file on open); `collect` merges them (a resumed launch's steps replace the killed one's) and
adds, from verl's rollout dumps (`<stage>/rollouts/<step>.jsonl`), the share of replies that
reached each milestone. `write_plots` draws every stage on one step axis, stage boundaries marked.
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
    ("sft_loss", "RFT loss", ("train/loss", "val/loss")),
)


def milestone_of(score: float, schedule: RewardSchedule = RewardSchedule()) -> str:
    named = {schedule.failed: "failed", schedule.correct: "correct", schedule.faster_than_eager: "faster_than_eager",
             schedule.faster_than_compile: "faster_than_compile"}
    return named.get(float(score), "other")


def milestone_shares(rollouts: Path) -> dict[int, dict[str, float]]:
    """Per step, the share of dumped replies at each milestone (by their score)."""
    out: dict[int, dict[str, float]] = {}
    for path in rollouts.glob("*.jsonl") if rollouts.is_dir() else ():
        if not path.stem.isdigit():
            continue
        scores = [row["score"] for row in read_rows(path) if isinstance(row.get("score"), (int, float))]
        if scores:
            names = [milestone_of(s) for s in scores]
            out[int(path.stem)] = {f"milestone/{m}": names.count(m) / len(names) for m in (*MILESTONES, "other")
                                   if m != "other" or "other" in names}
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
    rows = [{"step": step, **values} for step, values in sorted(steps.items())]
    if rows or (stage_dir / "metrics").is_dir():
        tmp = stage_dir / "metrics.jsonl.tmp"
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        tmp.replace(stage_dir / "metrics.jsonl")
    return rows


def load_run(out: Path, stages: Iterable[str]) -> list[tuple[str, list[dict[str, Any]]]]:
    """Each stage's metrics, in stage order (stages without any left out)."""
    return [(s, rows) for s in stages if (rows := read_rows(out / s / "metrics.jsonl"))]


def _series(runs: list[tuple[str, list[dict[str, Any]]]], pattern: str) -> dict[str, tuple[list[float], list[float]]]:
    """metric name -> (x, y) on the run's step axis (each stage after the previous one's last step)."""
    series: dict[str, tuple[list[float], list[float]]] = {}
    offset = 0
    for _, rows in runs:
        for row in rows:
            for key, value in row.items():
                if key != "step" and fnmatch.fnmatchcase(key, pattern) and isinstance(value, (int, float)):
                    xs, ys = series.setdefault(key, ([], []))
                    xs.append(offset + row["step"])
                    ys.append(value)
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


def _draw(ax, title: str, series: dict[str, tuple[list[float], list[float]]], bounds: list[tuple[int, str]],
          stacked: bool) -> None:
    if stacked:
        steps = sorted({x for xs, _ in series.values() for x in xs})
        names = sorted(series, key=lambda k: (MILESTONES + ("other",)).index(k.split("/", 1)[1])
                       if k.split("/", 1)[1] in MILESTONES + ("other",) else 99)
        ys = [[dict(zip(*series[n])).get(s, 0.0) for s in steps] for n in names]
        ax.stackplot(steps, ys, labels=[n.split("/", 1)[1] for n in names], alpha=0.8)
        ax.set_ylim(0, 1)
    else:
        for key, (xs, ys) in sorted(series.items()):
            ax.plot(xs, ys, "--" if key.startswith("val") else "-", marker="." if len(xs) < 40 else None,
                    label=key)
    for x, stage in bounds:
        ax.axvline(x, color="grey", lw=0.6, ls=":")
        ax.text(x, 1.0, f" {stage}", transform=ax.get_xaxis_transform(), fontsize=7, va="top", color="grey")
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("step (all stages)", fontsize=8)
    ax.legend(fontsize=6, loc="best")
    ax.tick_params(labelsize=7)
