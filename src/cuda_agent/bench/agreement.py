"""Agreement with KernelBench's own harness: each (task, solution) judged by our relaxed harness and
by KernelBench's evaluation function, side by side (benchmarks/kb_agreement.py runs both).

A row holds two sides, each a dict with `status`: "pass", "fail" or "error" (no verdict: a harness
or driver failure, redone on resume), `reason`, and where timed `speedup` (reference time over the
solution's, each harness's own timing) and `ref_ms`. Classes:

- agree: the same pass/fail;
- hack: KernelBench passes it and we fail it for a reason that names a hack (NAMED_HACKS below);
- disagree: every other difference, with a cause where a known one fits (CAUSES), else
  "unexplained" and both reasons;
- no verdict: either side gave none.

Speed-ups are compared on the rows both pass (honest by both judges) whose reference takes at least
1 ms in both measurements: the ratio ours / KernelBench's, and how many are within 10%.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from typing import Any

Row = dict[str, Any]

AGREE, HACK, DISAGREE, NO_VERDICT = "agree", "we catch a named hack", "disagree", "no verdict"
CLASSES = (AGREE, HACK, DISAGREE, NO_VERDICT)
OUR_ATOL = 1e-2   # our relaxed correctness bound (atol = rtol), KernelBench v0/v0.1's
MIN_MS = 1.0
WITHIN = 0.10

# Our verdict reasons that name a hack: (name, phrases of the harness's reason). Each phrase is one
# the harness writes when it stops that attack (tests/hacks holds one solution per attack).
NAMED_HACKS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("work deferred to a later call, or one output buffer reused by every call", ("changed after forward returned",)),
    ("results replayed for near-duplicate inputs", ("results replayed for inputs that look like ones seen before",)),
    ("timed calls skip the work (results cached across calls, call-count behaviour)",
     ("cached across calls", "changes with the number of calls")),
    ("inputs written in place", ("modified in place by forward", "replaced or reshaped in place by forward")),
    ("lazy or subclassed output", ("not a plain torch.Tensor",)),
    ("host compute on a GPU task", ("forward worked on the CPU", "compute the output on the task's device")),
    ("timer tampering", ("was the timer tampered with",)),
    ("zeros where every output is below atol", ("so that zeros would pass the elementwise check",)),
    ("constant output", ("is constant where the reference varies",)),
)
# Static findings that name a hack: (name, rule or None for any, pattern of the finding's message).
SIDE_STREAM_NAME = "work on a side stream the timer does not wait for"
STATIC_HACKS: tuple[tuple[str, str | None, str], ...] = (
    # relaxed leaves torch.cuda.Stream and stream() to the runtime, which charges their work; these stay refused
    (SIDE_STREAM_NAME, None, r"^(torch\.cuda\.(set_stream|ExternalStream)|cudaStreamCreate\w*)\b"),
    ("monkey-patching", "monkey-patch", ""),
    ("reuses the reference model", "reference-import", ""),
    ("reuses the reference model", "reference-model", ""),
    ("lazy or subclassed output", "model-new-base", r"inherits from torch\.Tensor"),
)

# Causes of a disagreement that are understood (the rest is "unexplained").
CAUSES = {
    "tolerance": f"KernelBench at this commit allows 1e-4 in fp32; we allow {OUR_ATOL:g} (KernelBench v0/v0.1's)",
    "policy": "our static rules refuse a construct KernelBench runs (we cannot check it at run time)",
    "time limit": "one side's time limit",
    "build": "one side built it and the other did not",
    "weights": "we copied the reference's weights into ModelNew; KernelBench builds both after the same seed "
               "and copies nothing, so a parameter ModelNew leaves uninitialised (torch.empty) or creates in "
               "another order differs there",
    "unexplained": "not understood yet: both reasons in the row",
}


def our_side(result: Any) -> Row:
    """Our verdict (an EvalResult) as one side of a row."""
    return {"status": "pass" if result.correct else "fail", "stage": result.stage, "reason": result.reason,
            "reward": result.reward, "rules": sorted({f.rule for f in result.findings}),
            "findings": [{"rule": f.rule, "message": f.message[:300], "where": f"{f.file}:{f.line}"}
                         for f in result.findings[:20]], "flags": list(result.flags),
            "speedup": result.speedup_vs_eager, "ref_ms": result.eager.median_ms if result.eager else None,
            "solution_ms": result.solution.median_ms if result.solution else None,
            "max_abs_error": result.max_abs_error, "init": result.init, "seconds": result.seconds}


def named_hack(ours: Row) -> str | None:
    """The hack our failing verdict names, or None."""
    if ours.get("status") != "fail":
        return None
    for name, rule, pattern in STATIC_HACKS:
        if any(rule in (None, f.get("rule")) and re.search(pattern, f.get("message", ""))
               for f in ours.get("findings") or []):
            return name
    reason = ours.get("reason") or ""
    for name, phrases in NAMED_HACKS:
        if any(p in reason for p in phrases):
            return name
    return None


def cause(row: Row) -> str:
    """The known cause of a disagreement (a key of CAUSES)."""
    ours, kb = row["ours"], row["kb"]
    if ours["status"] == "pass":  # KernelBench fails it
        if kb.get("timed_out"):
            return "time limit"
        if kb.get("max_difference") is not None and kb["max_difference"] <= OUR_ATOL:
            return "tolerance"
        if ours.get("init") == "state_dict" and kb.get("max_difference") is not None:
            return "weights"
        if kb.get("compiled") is False:
            return "build"
        return "unexplained"
    if "timed out" in (ours.get("reason") or ""):
        return "time limit"
    if ours.get("stage") == "static":
        return "policy"
    if ours.get("stage") == "build":
        return "build"
    return "unexplained"


def classify(row: Row) -> tuple[str, str]:
    """(class, note): the named hack for HACK, the cause for DISAGREE, who gave none for NO_VERDICT."""
    ours, kb = row["ours"], row["kb"]
    missing = [who for who, side in (("ours", ours), ("KernelBench", kb)) if side.get("status") not in ("pass", "fail")]
    if missing:
        return NO_VERDICT, " and ".join(missing)
    if ours["status"] == kb["status"]:
        return AGREE, ""
    if kb["status"] == "pass":
        hack = named_hack(ours)
        if hack:
            return HACK, hack
    return DISAGREE, cause(row)


def ref_ms(row: Row) -> float | None:
    """The reference's time, the smaller of the two measurements (None unless both timed it)."""
    times = [row[s].get("ref_ms") for s in ("ours", "kb")]
    return min(times) if all(isinstance(t, (int, float)) and t > 0 for t in times) else None  # type: ignore[type-var]


def speed_ratio(row: Row) -> float | None:
    """Our speed-up over KernelBench's, where both judged the solution correct and timed it."""
    a, b = row["ours"].get("speedup"), row["kb"].get("speedup")
    if row["ours"].get("status") != "pass" or row["kb"].get("status") != "pass" or not a or not b:
        return None
    return a / b


@dataclass
class Summary:
    counts: dict[str, int] = field(default_factory=dict)
    causes: dict[str, int] = field(default_factory=dict)         # disagreements by cause
    hacks: dict[str, int] = field(default_factory=dict)          # named hacks we catch
    ratios: list[float] = field(default_factory=list)            # honest, reference >= MIN_MS
    short: int = 0                                                # honest rows with a faster reference

    @property
    def within(self) -> int:
        return sum(abs(r - 1) <= WITHIN + 1e-9 for r in self.ratios)  # 1.1 / 1.0 is 1.1000000000000001


def summarize(rows: list[Row], min_ms: float = MIN_MS) -> Summary:
    s = Summary(counts={c: 0 for c in CLASSES})
    for row in rows:
        cls, note = classify(row)
        s.counts[cls] += 1
        if cls == DISAGREE:
            s.causes[note] = s.causes.get(note, 0) + 1
        elif cls == HACK:
            s.hacks[note] = s.hacks.get(note, 0) + 1
        ratio = speed_ratio(row)
        if ratio is not None:
            t = ref_ms(row)
            if t is not None and t >= min_ms:
                s.ratios.append(ratio)
            else:
                s.short += 1
    return s


def summary_line(rows: list[Row]) -> str:
    """The summary in one line (the last thing a run prints)."""
    s = summarize(rows)
    causes = ", ".join(f"{k} {v}" for k, v in sorted(s.causes.items()))
    return ("; ".join(f"{c} {s.counts[c]}" + (f" ({causes})" if c == DISAGREE and causes else "") for c in CLASSES)
            + f"; speed-ups compared {len(s.ratios)}, within {WITHIN:.0%} {s.within}")


def _cell(text: Any, width: int = 90) -> str:
    text = " ".join(str(text).split())
    text = text if len(text) <= width else text[:width - 1] + "…"
    return text.replace("|", "\\|")


def _x(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}x"


def _verdict(side: Row) -> str:
    status = side.get("status", "?")
    if status == "pass":
        return "pass (excessive speed-up flagged)" if side.get("excessive_speedup") else "pass"
    return f"{status}: {side.get('reason') or ''}"


def markdown(rows: list[Row], meta: dict[str, Any]) -> str:
    """agreement.md: the settings, the summary, then one line per row."""
    s = summarize(rows)
    lines = ["# Agreement with KernelBench's own harness", ""]
    lines += [f"- {k}: {v}" for k, v in meta.items()]
    lines += ["", "## Summary", "", "| class | rows |", "|---|---:|"]
    lines += [f"| {c} | {s.counts[c]} |" for c in CLASSES]
    if s.hacks:
        lines += ["", "Named hacks we catch where KernelBench passes: "
                  + "; ".join(f"{k} ({v})" for k, v in sorted(s.hacks.items()))]
    if s.causes:
        lines += ["", "| disagreements by cause | rows | meaning |", "|---|---:|---|"]
        lines += [f"| {k} | {v} | {CAUSES[k]} |" for k, v in sorted(s.causes.items())]
    lines += ["", f"Speed-ups of solutions both pass, reference >= {MIN_MS:g} ms (the smaller of the two "
              f"measurements): {len(s.ratios)} rows, {s.within} within {WITHIN:.0%} (ours / KernelBench's"
              + (f": median {statistics.median(s.ratios):.3f}, range {min(s.ratios):.3f}-{max(s.ratios):.3f}"
                 if s.ratios else "") + f"); {s.short} more with a faster reference.", ""]
    lines += ["## Rows", "", "| # | task | solution | ours | KernelBench | class | hack / cause | ref ms ours / KB "
              "| speed-up ours | speed-up KB | ours / KB |", "|---:|---|---|---|---|---|---|---|---:|---:|---:|"]
    for i, row in enumerate(rows, 1):
        cls, note = classify(row)
        ours, kb = row["ours"], row["kb"]
        ref = "/".join("–" if side.get("ref_ms") is None else f"{side['ref_ms']:.3g}" for side in (ours, kb))
        ratio = speed_ratio(row)
        lines.append(f"| {i} | {_cell(row['task'], 40)} | {_cell(row['key'], 40)} | {_cell(_verdict(ours))} | "
                     f"{_cell(_verdict(kb))} | {cls} | {_cell(note, 60)} | {ref} | {_x(ours.get('speedup'))} | "
                     f"{_x(kb.get('speedup'))} | {'–' if ratio is None else f'{ratio:.3f}'} |")
    return "\n".join(lines) + "\n"
