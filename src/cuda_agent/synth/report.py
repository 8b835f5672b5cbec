"""The run's summary: what each filter kept, runtime / op count / category distributions, the
speed-up of torch.compile over eager, the set beside KernelBench's (compare.py), and where the time
went. Markdown plus PNG plots beside it."""

from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path

from cuda_agent.synth.compare import profile_kernelbench, profile_rows, side_by_side
from cuda_agent.synth.filters import FILTERS


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def funnel(records: list[dict]) -> list[tuple[str, int, int]]:
    """(filter, rejected by it, still in after it) in the order candidates meet them."""
    rejected = Counter(r["filter"] for r in records)
    left = len(records)
    rows = []
    for f in FILTERS:
        left -= rejected.get(f, 0)
        rows.append((f, rejected.get(f, 0), left))
    return rows


def time_breakdown(records: list[dict]) -> dict[str, float]:
    """Seconds by stage over `records`, most first. `unlapped`: what each candidate's total holds beyond its stages
    (the service's dispatch, the channel to the worker, what the worker does between its laps): 0.3 s of every size
    step on an H200 (2026-11-29) that no stage showed."""
    total: Counter = Counter()
    for r in records:
        seconds = r.get("seconds", {})
        for k, v in seconds.items():
            if k != "total":
                total[k] += v
        if "total" in seconds:
            total["unlapped"] += max(0.0, seconds["total"] - sum(v for k, v in seconds.items() if k != "total"))
    return dict(total.most_common())


def beside_kernelbench(accepted: list[dict], kernelbench: Path, target: dict[str, float] | None = None,
                       device: str = "") -> list[str]:
    """The section that puts the accepted set beside KernelBench levels 1-3."""
    ours = profile_rows([r for r in accepted if r.get("code")], "this set", device)
    lines = ["", "## Beside KernelBench", "",
             "Both sides classified from their code by the same categorizer (synth/categories.py): a task's "
             "class is its most defining operator category. Times are on different devices unless both say H100.", ""]
    return lines + side_by_side(ours, profile_kernelbench(kernelbench), target)


def _by_timing_plan(accepted: list[dict], plans: list | None) -> list[str]:
    """A line counting the tasks by the plan that timed them, where there were several (a resume with --retime).
    `plans`: the run's TimingPlans, oldest first; a record that names no plan was timed with the first."""
    first = plans[0].key() if plans else "the run's first"
    counts = Counter(r.get("timing_plan", first) for r in accepted)
    if len(counts) < 2:
        return []
    known = {p.key(): (rank, p.budget_s) for rank, p in enumerate(plans or ())}  # oldest first
    keys = sorted(counts, key=lambda k: known.get(k, (-1,))[0])
    named = [f"plan {k}" + (f" ({known[k][1]:g} s of calls)" if k in known else "") + f": {counts[k]}" for k in keys]
    return ["", "Eager and torch.compile times under several timing plans, oldest first: " + ", ".join(named)
            + " tasks (config.json: `timings_before`, then `timing`)."]


def summary_markdown(records: list[dict], accepted: list[dict], title: str, wall_s: float | None = None,
                     plots: list[str] = (), kernelbench: Path | None = None, target: dict[str, float] | None = None,
                     device: str = "", accepted_in_run: int | None = None, timing_plans: list | None = None) -> str:
    """The run's summary; `wall_s` and `accepted_in_run` (this run's accepted candidates, where it
    resumed an earlier one: `accepted` holds both runs') give its rate; `timing_plans` (the run's, oldest
    first: SynthConfig.timing_plans()) name the plans that timed its tasks."""
    eager = [r["eager_ms"] for r in accepted]
    speed = [r["compile_speedup"] for r in accepted if r.get("compile_speedup")]
    passed = sum(r["filter"] == "accepted" for r in records) or len(accepted)
    held = f"; the set holds {len(accepted)} of them (each class up to its quota)" if passed > len(accepted) else ""
    lines = [f"# {title}", "", f"{len(records)} candidates, {passed} accepted "
             f"({100 * passed / max(1, len(records)):.1f}%){held}.", "",
             "## Filters", "", "| filter | rejected | left |", "|---|---:|---:|"]
    lines += [f"| {f} | {n} | {left} |" for f, n, left in funnel(records)]
    reasons = Counter((r["filter"], r.get("reason", "")[:70]) for r in records if r["filter"] != "accepted")
    if reasons:
        lines += ["", "Most frequent rejections:", ""]
        lines += [f"- {f}: {why} ({n})" for (f, why), n in reasons.most_common(8)]
    if accepted:
        lines += ["", "## Accepted tasks", "", "| | p10 | median | p90 |", "|---|---:|---:|---:|",
                  f"| eager ms | {_pct(eager, .1):.3g} | {statistics.median(eager):.3g} | {_pct(eager, .9):.3g} |"]
        if speed:
            lines.append(f"| compile speed-up over eager | {_pct(speed, .1):.2f} | {statistics.median(speed):.2f} "
                         f"| {_pct(speed, .9):.2f} |")
            wins = sum(s > 1.0 for s in speed)
            lines += ["", f"torch.compile already beats eager on {wins} of {len(speed)} tasks "
                          f"({100 * wins / len(speed):.0f}%): those are the harder ones to win on."]
        lines += _by_timing_plan(accepted, timing_plans)
        ops = Counter(len(r["ops"]) for r in accepted)
        lines += ["", "Op count: " + ", ".join(f"{k} ops: {ops[k]}" for k in sorted(ops))]
        cats = Counter(c for r in accepted for c in r.get("categories", []))
        lines += ["", "Categories: " + ", ".join(f"{c} {n}" for c, n in cats.most_common())]
        classes = Counter(r["task_class"] for r in accepted if r.get("task_class"))
        if classes:
            lines += ["", "Task classes (from the seeds): " + ", ".join(f"{c} {n}" for c, n in classes.most_common())]
        shapes = Counter(r.get("structure", "?") for r in accepted)
        lines += ["", "Structure: " + ", ".join(f"{c} {n}" for c, n in shapes.most_common())]
        sims = [r["kernelbench_similarity"] for r in accepted if r.get("kernelbench_similarity") is not None]
        if sims:
            lines += ["", f"Similarity to the nearest KernelBench task: median {statistics.median(sims):.2f}, "
                          f"max {max(sims):.2f}."]
    if accepted and kernelbench is not None and Path(kernelbench).exists():
        lines += beside_kernelbench(accepted, Path(kernelbench), target, device)
    tb = time_breakdown(records)
    total = sum(tb.values())
    if total:
        lines += ["", "## Where the time goes (summed over workers)", "", "| stage | s | share |", "|---|---:|---:|"]
        lines += [f"| {k} | {v:.1f} | {100 * v / total:.0f}% |" for k, v in tb.items()]
    if wall_s:
        new = len(accepted) if accepted_in_run is None else accepted_in_run
        earlier = "" if accepted_in_run is None else f" ({new} accepted in this run, which resumed an earlier one)"
        rate = new / (wall_s / 3600)
        lines += ["", f"Wall time {wall_s:.0f} s{earlier}: {rate:.0f} accepted tasks per hour."]
    lines += [""] + [f"![{p}]({p})" for p in plots]
    return "\n".join(lines) + "\n"


def plot(accepted: list[dict], records: list[dict], folder: Path) -> list[str]:
    """PNG plots in `folder`; returns their file names (none when matplotlib is missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    folder.mkdir(parents=True, exist_ok=True)
    made = []

    def save(fig, name):
        fig.tight_layout()
        fig.savefig(folder / name, dpi=110)
        plt.close(fig)
        made.append(name)

    fig, ax = plt.subplots(1, 3, figsize=(13, 3.6))
    eager = [r["eager_ms"] for r in accepted]
    if eager:
        ax[0].hist(eager, bins=30)
    ax[0].set(title="eager runtime", xlabel="ms", ylabel="tasks")
    speed = [r["compile_speedup"] for r in accepted if r.get("compile_speedup")]
    if speed:
        ax[1].hist(speed, bins=30)
        ax[1].axvline(1.0, color="k", lw=1)
    ax[1].set(title="torch.compile speed-up over eager", xlabel="eager / compile")
    ops = Counter(len(r["ops"]) for r in accepted)
    ax[2].bar([str(k) for k in sorted(ops)], [ops[k] for k in sorted(ops)])
    ax[2].set(title="ops per task", xlabel="ops")
    save(fig, "synth_distributions.png")
    fig, ax = plt.subplots(1, 2, figsize=(12, 3.8))
    cats = Counter(c for r in accepted for c in r.get("categories", [])).most_common()
    ax[0].barh([c for c, _ in cats][::-1], [n for _, n in cats][::-1])
    ax[0].set(title="operator categories (accepted)")
    rows = funnel(records)
    ax[1].barh([f for f, _, _ in rows][::-1], [n for _, n, _ in rows][::-1], color="tab:red")
    ax[1].set(title=f"rejected per filter (of {len(records)})")
    save(fig, "synth_filters.png")
    return made


def write_report(records: list[dict], accepted: list[dict], path: Path, title: str = "Synthetic task run",
                 wall_s: float | None = None, kernelbench: Path | None = None,
                 target: dict[str, float] | None = None, device: str = "", accepted_in_run: int | None = None,
                 timing_plans: list | None = None) -> Path:
    """summary.md and its plots; with `kernelbench` (the JSONL), the set beside KernelBench's, and
    `target` (the mix's shares) in a third column."""
    plots = plot(accepted, records, path.parent)
    path.write_text(summary_markdown(records, accepted, title, wall_s, plots, kernelbench, target, device,
                                     accepted_in_run, timing_plans))
    return path
