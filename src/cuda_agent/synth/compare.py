"""A task set beside KernelBench's: task classes, operator counts, eager times and torch.compile
speed-ups, both sides read with the same categorizer from their code (categories.py).

KernelBench's side comes from its JSONL (levels 1-3 by default) and, where they lie beside it, the
published H100 timings (`h100_modal_eager.json`, `h100_modal_compile_inductor.json`: mean ms per
problem file, per level).
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from cuda_agent.synth.categories import CORE, PRIORITY, code_operators, task_class

OP_BUCKETS = ("1", "2", "3", "4", "5", "6-10", "11+")
EAGER_FILE = "h100_modal_eager.json"
COMPILE_FILE = "h100_modal_compile_inductor.json"


@dataclass
class Profile:
    """What a task set is made of; times in ms on `device` (empty where not measured)."""
    name: str
    device: str = ""
    classes: Counter = field(default_factory=Counter)
    op_counts: Counter = field(default_factory=Counter)
    eager_ms: list[float] = field(default_factory=list)
    speedups: list[float] = field(default_factory=list)

    @property
    def tasks(self) -> int:
        return sum(self.classes.values())

    @property
    def core(self) -> int:
        return sum(n for c, n in self.classes.items() if c in CORE)


def _bucket(n: int) -> str:
    return str(n) if n <= 5 else "6-10" if n <= 10 else "11+"


def add_task(profile: Profile, code: str) -> None:
    """Count one task's class and operator count, read from its code."""
    try:
        ops = code_operators(code)
    except SyntaxError:
        return
    profile.classes[task_class([c for _, c in ops])] += 1
    profile.op_counts[_bucket(max(1, len(ops)))] += 1


def profile_rows(rows: list[dict], name: str, device: str = "") -> Profile:
    """A synthesized set (dataset rows or accepted records: code, eager_ms, compile_speedup)."""
    p = Profile(name, device)
    for r in rows:
        add_task(p, r["code"])
        if r.get("eager_ms"):
            p.eager_ms.append(r["eager_ms"])
        if r.get("compile_speedup"):
            p.speedups.append(r["compile_speedup"])
    return p


def profile_kernelbench(jsonl: Path, levels: tuple[int, ...] = (1, 2, 3)) -> Profile:
    """KernelBench's problems of `levels`, with the H100 timings when their files lie beside the JSONL."""
    jsonl = Path(jsonl)
    rows = [json.loads(line) for line in jsonl.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r.get("level") in levels]
    eager, compiled = _timings(jsonl.parent / EAGER_FILE), _timings(jsonl.parent / COMPILE_FILE)
    p = Profile(f"KernelBench L{'-'.join(map(str, (levels[0], levels[-1])))}", "H100" if eager else "")
    for r in rows:
        add_task(p, r["code"])
        key = (r["level"], f"{r['name']}.py")
        if key in eager:
            p.eager_ms.append(eager[key])
            if compiled.get(key):
                p.speedups.append(eager[key] / compiled[key])
    return p


def _timings(path: Path) -> dict[tuple[int, str], float]:
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    return {(int(level.removeprefix("level")), name): t["mean"] for level, problems in data.items()
            for name, t in problems.items() if isinstance(t, dict) and t.get("mean")}


def _share(n: int, total: int) -> str:
    return f"{100 * n / total:.0f}% ({n})" if total else "-"


def _quantiles(values: list[float], fmt: str) -> str:
    if not values:
        return "not measured"
    s = sorted(values)
    q = [s[min(len(s) - 1, int(f * len(s)))] for f in (0.1, 0.5, 0.9)]
    q[1] = statistics.median(s)
    return " / ".join(format(v, fmt) for v in q)


def side_by_side(ours: Profile, reference: Profile, target: dict[str, float] | None = None) -> list[str]:
    """The markdown table: one row per class and op-count bucket, then the time distributions;
    `target`: the mix's shares, shown in a third column."""
    head = f"| | {ours.name} | {reference.name} |" + (" target |" if target else "")
    lines = [head, "|---|---:|---:|" + ("---:|" if target else "")]

    def row(label: str, a: str, b: str, t: str = "") -> None:
        lines.append(f"| {label} | {a} | {b} |" + (f" {t} |" if target else ""))

    core_target = f"{100 * sum(v for c, v in (target or {}).items() if c in CORE):.0f}%"
    row("tasks", str(ours.tasks), str(reference.tasks), "")
    row(f"core ({', '.join(CORE[:-1])} or {CORE[-1]})", _share(ours.core, ours.tasks), _share(reference.core, reference.tasks),
        core_target)
    for c in PRIORITY:
        if ours.classes[c] or reference.classes[c] or (target or {}).get(c):
            row(f"class: {c}", _share(ours.classes[c], ours.tasks), _share(reference.classes[c], reference.tasks),
                f"{100 * (target or {}).get(c, 0):.0f}%")
    for b in OP_BUCKETS:
        if ours.op_counts[b] or reference.op_counts[b]:
            row(f"ops (from code): {b}", _share(ours.op_counts[b], ours.tasks),
                _share(reference.op_counts[b], reference.tasks))
    row(f"eager ms p10 / median / p90 ({ours.device or '?'} vs {reference.device or '?'})",
        _quantiles(ours.eager_ms, ".3g"), _quantiles(reference.eager_ms, ".3g"))
    row("torch.compile speed-up p10 / median / p90", _quantiles(ours.speedups, ".2f"),
        _quantiles(reference.speedups, ".2f"))
    return lines
