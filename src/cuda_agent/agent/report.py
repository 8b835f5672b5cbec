"""The output folder's reports: report.json and report.md for one run, summary.json and summary.md
for many."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cuda_agent.agent.trajectory import read_records
from cuda_agent.harness import headline

STATUS_TEXT = {
    "done": "the model finished",
    "no_tool_call": "the model kept replying without a tool call",
    "max_turns": "out of turns",
    "max_seconds": "out of time",
    "max_context": "out of context",
    "model_error": "the model endpoint failed",
    "interrupted": "interrupted",
    "error": "could not run",
}


@dataclass
class RunResult:
    """One run: the harness's verdict on the best verified solution, and what the run cost."""

    task: str
    status: str                        # see STATUS_TEXT
    reward: float
    correct: bool
    milestone: str
    speedup_vs_eager: float | None
    speedup_vs_compile: float | None
    turns: int
    tokens: int
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    evaluations: int
    model: str
    device: str
    out: str
    solution: str | None               # out/solution when something was verified
    isolation: str = ""
    error: str = ""
    best: dict[str, Any] | None = None  # the harness's full EvalResult of the solution

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def headline(self) -> str:
        if not self.correct:
            return f"nothing verified (reward {self.reward:g}; {STATUS_TEXT.get(self.status, self.status)})"
        return "verified: " + headline(self.reward, self.milestone, self.speedup_vs_eager, self.speedup_vs_compile)


def write_report(result: RunResult) -> None:
    out = Path(result.out)
    (out / "report.json").write_text(json.dumps(result.to_dict(), indent=1, default=str) + "\n")
    (out / "report.md").write_text(render_markdown(result, _evaluations(out / "trajectory.jsonl")))


def _evaluations(trajectory: Path) -> list[dict[str, Any]]:
    rows = []
    for r in read_records(trajectory) if trajectory.exists() else []:
        h = r.get("harness")
        if h and "result" in h:
            res = h["result"]
            rows.append({"turn": r.get("turn", "final"), "action": h["action"], "stage": res["stage"],
                         "reason": res["reason"], "reward": res["reward"],
                         "eager": res.get("speedup_vs_eager"), "compile": res.get("speedup_vs_compile")})
    return rows


def render_markdown(r: RunResult, evaluations: list[dict[str, Any]]) -> str:
    x = lambda v: f"{v:.2f}x" if v is not None else "-"  # noqa: E731
    lines = [f"# cuda-agent: {r.task}", "", f"**{r.headline()}**", "", "| | |", "|---|---|",
             f"| speed-up vs eager | {x(r.speedup_vs_eager)} |",
             f"| speed-up vs torch.compile | {x(r.speedup_vs_compile)} |",
             f"| status | {r.status} ({STATUS_TEXT.get(r.status, '')}) |",
             f"| turns | {r.turns} |",
             f"| tokens | {r.tokens:,} (prompt {r.prompt_tokens:,}, completion {r.completion_tokens:,}) |",
             f"| time | {r.seconds:.0f} s |", f"| model | {r.model} |", f"| device | {r.device} |",
             f"| tool isolation | {r.isolation or '-'} |"]
    if r.error:
        lines += ["", f"Error: {r.error}"]
    if r.solution and r.best:
        files = sorted(p.relative_to(r.solution).as_posix() for p in Path(r.solution).rglob("*") if p.is_file())
        times = [f"{name} {r.best[key]['median_ms']:.4g} ms" for name, key in
                 (("eager", "eager"), ("torch.compile", "compile"), ("solution", "solution")) if r.best.get(key)]
        lines += ["", "## Solution", "", "`solution/` holds what the harness verified, in the workspace layout:", ""]
        lines += [f"- `{f}`" for f in files]
        if times:
            lines += ["", "Median times: " + ", ".join(times) + "."]
    if evaluations:
        lines += ["", "## Evaluations", "", "| turn | action | stage | reward | vs eager | vs compile | reason |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {e['turn']} | {e['action']} | {e['stage']} | {e['reward']:g} | {x(e['eager'])} | "
                  f"{x(e['compile'])} | {str(e['reason']).replace('|', '/')[:120]} |" for e in evaluations]
    lines += ["", "The whole run, message by message: `trajectory.jsonl`.", ""]
    return "\n".join(lines)


def write_summary(out: Path, results: list[RunResult]) -> None:
    """summary.json and summary.md for a run of many tasks."""
    counts = {m: sum(r.milestone == m for r in results)
              for m in ("failed", "correct", "faster_than_eager", "faster_than_compile")}
    data = {"tasks": len(results), "verified": sum(r.correct for r in results), "milestones": counts,
            "results": [r.to_dict() for r in results]}
    (out / "summary.json").write_text(json.dumps(data, indent=1, default=str) + "\n")
    x = lambda v: f"{v:.2f}x" if v is not None else "-"  # noqa: E731
    lines = [f"# cuda-agent: {len(results)} tasks, {data['verified']} verified", "",
             "| task | status | reward | vs eager | vs compile | turns | tokens |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r.task} | {r.status} | {r.reward:g} | {x(r.speedup_vs_eager)} | {x(r.speedup_vs_compile)} | "
              f"{r.turns} | {r.tokens:,} |" for r in results]
    (out / "summary.md").write_text("\n".join(lines) + "\n")
