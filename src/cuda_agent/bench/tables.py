"""The report's tables as data (a cell's text and its sort key), rendered by report.py as Markdown
and HTML. Every number comes from `bench.metrics`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cuda_agent.bench import metrics
from cuda_agent.bench.metrics import Summary

Row = dict[str, Any]


@dataclass
class Cell:
    text: str
    sort: float | str | None = None   # the value a sortable column orders by
    title: str = ""                   # a tooltip (the full text of a shortened cell)


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[Cell]] = field(default_factory=list)
    note: str = ""
    sortable: bool = False
    id: str = ""


def pct(v: float | None) -> str:
    return "–" if v is None else f"{v:.1%}"


def times(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}x" if v < 100 else f"{v:.0f}x"


def ms(v: float | None) -> str:
    if v is None:
        return "–"
    return f"{v:.3f}" if v < 1 else f"{v:.2f}" if v < 100 else f"{v:.0f}"


def _c(text: str, sort: float | str | None = None, title: str = "") -> Cell:
    return Cell(text, sort, title)


def summary_table(summaries: list[Summary]) -> Table:
    t = Table("Summary", ["group", "tasks", "pass", "> eager", "> eager +5%", "> compile", "> compile +5%",
                          "geomean vs eager", "geomean vs compile", "mean reward"],
              note="Rates are shares of all tasks. Geomean: failures count as 1.0x; in brackets, over the "
                   "correct tasks only. '+5%': at least 1.05x, the margin the reward uses.")
    for s in summaries:
        t.rows.append([_c(s.group), _c(str(s.tasks)), _c(f"{pct(s.pass_rate)} ({s.passed})"),
                       _c(pct(s.faster_eager)), _c(pct(s.faster_eager_margin)), _c(pct(s.faster_compile)),
                       _c(pct(s.faster_compile_margin)),
                       _c(f"{times(s.geomean_eager)} ({times(s.geomean_eager_correct)})"),
                       _c(f"{times(s.geomean_compile)} ({times(s.geomean_compile_correct)})"),
                       _c("–" if s.mean_reward is None else f"{s.mean_reward:.2f}")])
    return t


def fast_p_table(summaries: list[Summary]) -> Table:
    ps = [f"{p:g}" for p in metrics.FAST_P]
    t = Table("fast_p (KernelBench)", ["group"] + [f"eager p={p}" for p in ps] + [f"compile p={p}" for p in ps[1:]],
              note="fast_p: share of all tasks that are correct and more than p times faster; p=0 is the pass rate.")
    for s in summaries:
        t.rows.append([_c(s.group)] + [_c(pct(s.fast_p_eager[p])) for p in ps]
                      + [_c(pct(s.fast_p_compile[p])) for p in ps[1:]])
    return t


def rewards_table(summaries: list[Summary]) -> Table:
    names = ["failed", "correct", "faster_than_eager", "faster_than_compile"]
    t = Table("Reward distribution", ["group"] + [n.replace("_", " ") for n in names] + ["mean reward"],
              note="Tasks per milestone (reward -1, 1, 2, 3): the highest one each solution reached.")
    for s in summaries:
        t.rows.append([_c(s.group)] + [_c(str(s.rewards.get(n, 0))) for n in names]
                      + [_c("–" if s.mean_reward is None else f"{s.mean_reward:.2f}")])
    return t


def sol_table(summaries: list[Summary], rows: list[Row]) -> Table:
    t = Table("Speed of light", ["group", "tasks with SOL", "eager", "torch.compile", "solution (correct)"],
              note="Median over tasks of SOL time / measured time (100% = the physical limit). SOL time = "
                   "max(FLOPs / measured peak, fewest bytes / measured bandwidth).")
    for s in summaries:
        group = rows if s.group == "overall" else [r for r in rows if metrics.level_of(r) == s.group]
        n = sum(1 for r in group if (r.get("roofline") or {}).get("sol_ms"))
        t.rows.append([_c(s.group), _c(str(n))] + [_c(pct(s.sol_fraction.get(w))) for w in metrics.TIMED])
    return t


def _timing(row: Row, which: str) -> Cell:
    st = row.get(which)
    if not isinstance(st, dict) or st.get("median_ms") is None:
        return _c("–", None)
    return _c(f"{ms(st['median_ms'])} ±{ms(st.get('iqr_ms'))}", st["median_ms"],
              f"median {st['median_ms']:.4f} ms, IQR {st.get('iqr_ms', 0):.4f}, min {st.get('min_ms', 0):.4f}, "
              f"max {st.get('max_ms', 0):.4f}, {st.get('runs', '?')} runs")


def _by_task(rows: list[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: (r.get("level") or 0, r.get("problem_id") or 0, r.get("task", "")))


def _ids(r: Row) -> list[Cell]:
    level, pid = r.get("level"), r.get("problem_id")
    return [_c(str(level or ""), level or 0), _c(str(pid or ""), pid or 0), _c(str(r.get("task")), str(r.get("task")))]


def verdict(r: Row) -> str:
    """The milestone in words; for a failure, the stage it failed at."""
    milestone = str(r.get("milestone") or ("correct" if r.get("correct") else "failed"))
    stage = r.get("stage")
    if milestone == "failed" and stage and stage != "done":
        return f"failed: {stage}"
    return milestone.replace("_", " ")


def verdict_table(rows: list[Row]) -> Table:
    """What a reader looks for first: each task's verdict, speed-ups and the harness's whole reason."""
    t = Table("Verdicts", ["level", "id", "task", "verdict", "reward", "vs eager", "vs compile", "reason"],
              note="One row per task, with the harness's whole reason (in report.html: click a column header to "
                   "sort, a long reason to open it).", sortable=True,
              id="tasks")
    for r in _by_task(rows):
        sv = {b: metrics.speedup(r, b) for b in metrics.BASELINES}
        reason = str(r.get("reason") or "")
        t.rows.append(_ids(r) + [
            _c(verdict(r)), _c(f"{r.get('reward', 0):g}", r.get("reward")),
            _c(times(sv["eager"]), sv["eager"]), _c(times(sv["compile"]), sv["compile"]), _c(reason, reason)])
    return t


def timing_table(rows: list[Row]) -> Table:
    t = Table("Times per task", ["level", "id", "task", "eager ms", "compile ms", "solution ms", "SOL ms", "bound",
                                 "SOL% eager", "SOL% compile", "SOL% solution"],
              note="Times: median ± interquartile range (ms). Click a column header to sort.", sortable=True,
              id="times")
    for r in _by_task(rows):
        roof = r.get("roofline") or {}
        fr = {w: metrics.sol_fraction(r, w) for w in metrics.TIMED}
        t.rows.append(_ids(r) + [
            _timing(r, "eager"), _timing(r, "compile"), _timing(r, "solution"),
            _c(ms(roof.get("sol_ms")), roof.get("sol_ms"), roof.get("error", "")), _c(roof.get("bound", "–")),
            _c(pct(fr["eager"]), fr["eager"]), _c(pct(fr["compile"]), fr["compile"]),
            _c(pct(fr["solution"]), fr["solution"])])
    return t
