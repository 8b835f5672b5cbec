"""The report's figures, drawn with matplotlib (Agg): PNG bytes, and where each task's point
landed in them (pixels from the top left, with the task's name), so the page can name its points.

Every number plotted comes from `bench.metrics`; nothing is computed here that a table lacks.
"""

from __future__ import annotations

import io
import random
from dataclasses import dataclass, field
from typing import Any

from cuda_agent.bench import metrics

Row = dict[str, Any]
LEVEL_COLORS = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860"]
SERIES_COLORS = {"eager": "#8C8C8C", "compile": "#4C72B0", "solution": "#DD8452"}
DPI = 110
PAD_INCHES = 0.1


@dataclass
class Point:
    """One task's mark in a figure: its centre in the PNG's pixels, and what it is."""

    x: float
    y: float
    label: str


@dataclass
class Figure:
    png: bytes
    points: list[Point] = field(default_factory=list)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 10, "axes.spines.top": False, "axes.spines.right": False,
                         "axes.grid": True, "grid.alpha": 0.3, "figure.dpi": 100})
    return plt


def _render(fig, marks: list[tuple[Any, float, float, str]] = ()) -> Figure:
    """The figure as a PNG cropped to what it draws, and each mark (axes, x, y in data, label) in its
    pixels. The crop is computed here and handed to savefig, so the two agree exactly."""
    fig.canvas.draw()
    box = fig.get_tightbbox(fig.canvas.get_renderer()).padded(PAD_INCHES)
    points = []
    for ax, x, y, label in marks:
        px, py = ax.transData.transform((x, y))     # display pixels at fig.dpi, from the bottom left
        points.append(Point(round(float(px / fig.dpi - box.x0) * DPI, 1),
                            round(float(box.y1 - py / fig.dpi) * DPI, 1), label))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches=box, dpi=DPI)
    fig.clf()
    import matplotlib.pyplot as plt

    plt.close(fig)
    return Figure(buf.getvalue(), points)


def _groups(rows: list[Row]) -> dict[str, list[Row]]:
    """A strip per level, or one of all tasks where they are all of one level (or none)."""
    return metrics.level_groups(rows) or {"overall": rows}


def _log_x(ax, values: list[float]) -> None:
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    lo, hi = min(values + [0.5]) / 1.3, max(values + [2.0]) * 1.3
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    ticks = [t for t in (0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128, 256) if lo <= t <= hi]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def speedup_distribution(rows: list[Row]) -> Figure:
    """Per-task speed-ups of the correct tasks, one strip per level, vs eager and vs torch.compile."""
    plt = _pyplot()
    groups = _groups(rows)
    fig, axes = plt.subplots(1, 2, figsize=(12, 1.4 + 0.8 * len(groups)))
    fig.subplots_adjust(wspace=0.35)
    jitter = random.Random(0)
    marks = []
    for ax, baseline in zip(axes, metrics.BASELINES):
        everything: list[float] = []
        labels = []
        against = "eager" if baseline == "eager" else "torch.compile"
        for i, (name, group) in enumerate(groups.items()):
            named = [(r["task"], v) for r in group if (v := metrics.speedup(r, baseline)) is not None]
            values = [v for _, v in named]
            everything += values
            ys = [i + jitter.uniform(-0.25, 0.25) for _ in values]
            ax.scatter(values, ys, s=18, alpha=0.75, color=LEVEL_COLORS[i % len(LEVEL_COLORS)], edgecolors="none")
            marks += [(ax, v, y, f"{task}: {v:.2f}x vs {against}") for (task, v), y in zip(named, ys)]
            gm = metrics.geomean(values)
            labels.append(f"{name}\n{len(values)} correct" + (f", geomean {gm:.2f}x" if gm else ""))
        ax.axvline(1.0, color="black", lw=1)
        ax.axvline(1.0 + metrics.MARGIN, color="black", lw=1, ls=":")
        _log_x(ax, everything)
        ax.set_title(f"speed-up vs {'eager' if baseline == 'eager' else 'torch.compile'} (correct tasks)")
        ax.set_yticks(range(len(groups)), labels)
        ax.tick_params(axis="y", labelsize=8.5)
        ax.set_ylim(len(groups) - 0.4, -0.6)
        ax.grid(axis="y", visible=False)
    return _render(fig, marks)


def fast_p_curve(rows: list[Row]) -> Figure:
    """fast_p (fraction of tasks correct and more than p times faster) against p, per level."""
    plt = _pyplot()
    groups = dict(metrics.level_groups(rows), overall=rows)
    top = max([3.0] + [v for r in rows for b in metrics.BASELINES if (v := metrics.speedup(r, b))])
    ps = [i * min(top, 5.0) / 300 for i in range(301)]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    for ax, baseline in zip(axes, metrics.BASELINES):
        for i, (name, group) in enumerate(groups.items()):
            overall = name == "overall"
            color = "black" if overall else LEVEL_COLORS[i % len(LEVEL_COLORS)]
            ax.plot(ps, [metrics.fast_p(group, p, baseline) for p in ps], color=color,
                    lw=2.2 if overall else 1.4, ls="-" if overall else "--", label=name, drawstyle="steps-post")
            ax.scatter(metrics.FAST_P, [metrics.fast_p(group, p, baseline) for p in metrics.FAST_P],
                       color=color, s=18, zorder=3)
        ax.set_xlabel("p (speed-up threshold)")
        ax.set_title(f"fast_p vs {'eager' if baseline == 'eager' else 'torch.compile'}")
        ax.set_ylim(-0.02, 1.02)
        ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:.0%}"))
    axes[0].set_ylabel("fraction of tasks")
    axes[1].legend(loc="upper right", frameon=False)
    return _render(fig)


def sol_fractions(rows: list[Row]) -> Figure:
    """Fraction of the speed-of-light time reached by eager, torch.compile and the solution, per
    task (points) and per level (median bars)."""
    plt = _pyplot()
    groups = _groups(rows)
    fig, ax = plt.subplots(figsize=(11, 3.8))
    jitter = random.Random(1)
    width = 0.26
    everything: list[float] = []
    marks = []
    for i, (name, group) in enumerate(groups.items()):
        for j, which in enumerate(metrics.TIMED):
            named = [(r["task"], v) for r in group if (v := metrics.sol_fraction(r, which)) is not None]
            values = [v for _, v in named]
            everything += values
            x = i + (j - 1) * width
            series = {"eager": "eager", "compile": "torch.compile", "solution": "solution"}[which]
            if values:
                xs = [x + jitter.uniform(-0.08, 0.08) for _ in values]
                ax.scatter(xs, values, s=12, alpha=0.6, color=SERIES_COLORS[which], edgecolors="none",
                           label=series if i == 0 else None)
                marks += [(ax, px, v, f"{task}: {series} at {v:.0%} of the speed of light")
                          for (task, v), px in zip(named, xs)]
                med = metrics.median(values)
                ax.hlines(med, x - 0.11, x + 0.11, color="black", lw=2)
    _sol_y(ax, everything)
    ax.axhline(1.0, color="black", lw=1)
    ax.set_xticks(range(len(groups)), list(groups))
    ax.set_xlim(-0.6, len(groups) - 0.4)
    ax.set_ylabel("SOL time / measured time")
    ax.set_title("fraction of the speed of light reached (1 = physical limit; bar = median)")
    if ax.get_legend_handles_labels()[0]:   # beside the axes: points fill the plot from top to bottom
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, markerscale=2)
    ax.grid(axis="x", visible=False)
    return _render(fig, marks)


def _sol_y(ax, values: list[float]) -> None:
    """Log y-axis around the data with percent ticks; fractions above 1 (a roofline that is too
    optimistic, or a timing error) stay in view instead of being cut off."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    lo, hi = min(values + [0.5]) / 1.25, max(values + [1.0]) * 1.15
    ax.set_yscale("log")
    ax.set_ylim(lo, hi)
    ticks = [t for t in (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20) if lo <= t <= hi]
    if len(ticks) < 4:   # less than a decade: finer steps
        ticks = [t for t in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1, 1.2, 1.5, 2, 3) if lo <= t <= hi]
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.0%}" if v >= 0.01 else f"{v:.1%}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def reward_distribution(rows: list[Row]) -> Figure:
    """Milestones reached, stacked per level."""
    plt = _pyplot()
    groups = dict(metrics.level_groups(rows), overall=rows)
    names = ["failed", "correct", "faster_than_eager", "faster_than_compile"]
    colors = ["#C44E52", "#CCB974", "#64B5CD", "#55A868"]
    fig, ax = plt.subplots(figsize=(11, 0.9 + 0.55 * len(groups)))
    labels = list(groups)
    left = [0.0] * len(labels)
    for name, color in zip(names, colors):
        shares = [metrics.reward_distribution(g).get(name, 0) / max(len(g), 1) for g in groups.values()]
        ax.barh(labels, shares, left=left, color=color, label=name.replace("_", " "))
        for k, share in enumerate(shares):
            if share >= 0.06:
                ax.text(left[k] + share / 2, k, f"{share:.0%}", ha="center", va="center", fontsize=8, color="white")
        left = [a + b for a, b in zip(left, shares)]
    ax.set_xlim(0, 1)
    ax.invert_yaxis()
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:.0%}"))
    ax.set_title("reward milestones (share of tasks)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncols=4, frameon=False)
    ax.grid(axis="y", visible=False)
    return _render(fig)


FIGURES = {"speed-up distribution": speedup_distribution, "fast_p curve": fast_p_curve,
           "speed-of-light fractions": sol_fractions, "reward distribution": reward_distribution}
