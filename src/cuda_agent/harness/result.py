"""Typed results of every harness stage; JSON output is these dataclasses turned into dicts. A
failed verdict is built by `EvalResult.failed`, and a verdict is rendered for a reader by
`EvalResult.render` (and in one line by `headline`), nowhere else."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from cuda_agent.measure import GRAPH_BASELINES, PairedTiming, TimingStats

if TYPE_CHECKING:
    from cuda_agent.harness.config import EvalConfig

Stage = Literal["static", "build", "run", "correctness", "profile", "done"]
# Whose failure a failed verdict is, where it is not the solution's (None: the solution's, or none):
#   "reference": the task's reference failed, or its worker died (the task or the device is at
#                fault; whoever asked may try once more in fresh processes);
#   "harness":   no verdict could be made (the process judging died, or whoever asked failed to
#                get one): never a reward, never kept as a verdict, redone on resume.
Fault = Literal["reference", "harness"]
# What verdicts written before `fault` existed carried in `flags` for a harness error (read only).
_OLD_HARNESS_FLAG = "harness_error"
MAX_FINDINGS = 10   # findings a rendered verdict lists


@dataclass
class Finding:
    """One static-check violation: what rule, where (file:line), and the offending text."""

    rule: str
    message: str
    file: str
    line: int = 0
    snippet: str = ""

    def __str__(self) -> str:
        loc = f"{self.file}:{self.line}" if self.line else self.file
        return f"{loc}: {self.message} [{self.rule}]"


@dataclass
class StaticReport:
    ok: bool
    findings: list[Finding] = field(default_factory=list)
    policy: str = "strict"

    @property
    def reason(self) -> str:
        if self.ok:
            return "static checks passed"
        first = self.findings[0]
        more = f" (and {len(self.findings) - 1} more)" if len(self.findings) > 1 else ""
        return f"{first}{more}"


@dataclass
class BuildResult:
    ok: bool
    module_path: str | None = None   # the built .so, loadable as `module_name`
    module_name: str = "cuda_extension"
    seconds: float = 0.0
    waited_s: float = 0.0            # before compiling: waiting for timing on the device to end (not in `seconds`)
    compiled: int = 0                # objects compiled in this build (0 on a full cache hit)
    cached: int = 0                  # objects taken from the cache
    errors: str = ""                 # short, readable compiler errors (first errors, file:line, context)
    log_path: str | None = None      # the full compiler log
    # Relaxed load_inline solutions, one module per load_inline name: name -> the built .so, and
    # name -> why it did not build (load_inline raises that in the child, as torch's would).
    modules: dict[str, str] = field(default_factory=dict)
    module_errors: dict[str, str] = field(default_factory=dict)

    @property
    def reason(self) -> str:
        return "build succeeded" if self.ok else f"build failed: {self.errors.strip().splitlines()[0] if self.errors.strip() else 'see log'}"


@dataclass(frozen=True)
class Measured:
    """Where a verdict was measured, as GPU MODE's SystemInfo records it (devices.machine)."""

    device: str                # the device's model: "NVIDIA H100 80GB HBM3", "cpu-x86_64-16cores"
    driver: str | None         # the NVIDIA driver's version; None on the CPU, or where it cannot be read
    torch: str
    cuda: str | None           # the CUDA version torch was built with; None on the CPU
    timing_method: int         # baselines.TIMING_METHOD: how the figures were taken


@dataclass
class EvalResult:
    """The verdict on one solution for one task."""

    task: str
    reward: float
    correct: bool
    stage: Stage
    reason: str
    device: str = "cpu"
    policy: str = "strict"
    milestone: str = "failed"         # failed | correct | faster_than_eager | faster_than_compile
    # The speed-ups are the paired run's (`paired.ratios`), not the ratios of the medians below: each
    # baseline's time over the solution's, window against window in the same stretch of time.
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    eager: TimingStats | None = None
    compile: TimingStats | None = None
    solution: TimingStats | None = None
    paired: PairedTiming | None = None   # how the speed-ups were measured, their standard errors, what ended the run
    max_abs_error: float | None = None
    flags: list[str] = field(default_factory=list)   # e.g. "speedup_remeasured", "baseline_cached" (found and recorded)
    fault: Fault | None = None        # a failure that is not the solution's (see Fault)
    measured: Measured | None = None  # where it ran and was timed (None: it never ran)
    # How ModelNew got its weights: "state_dict" (the reference's, copied in) or "same_seed" (relaxed,
    # names or shapes differ or the copy failed: both models constructed after the same seed, as
    # KernelBench does; details["weights"] says why).
    init: str | None = None
    build: BuildResult | None = None
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0
    stage_seconds: dict[str, float] = field(default_factory=dict)  # wall time of each step, in order
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def failed(cls, task: str, stage: Stage, reason: str, config: "EvalConfig", *, device: str | None = None,
               fault: Fault | None = None, flags: list[str] | None = None) -> "EvalResult":
        """A failed verdict: the failure reward of `config`'s schedule, at `stage`, for `reason` (one
        line a person understands); `device`: where it was judged (default: `config`'s, else cpu)."""
        return cls(task=task, reward=config.reward.failed, correct=False, stage=stage, reason=reason,
                   device=device or config.device or "cpu", policy=config.policy, fault=fault,
                   flags=list(flags or []))

    @property
    def harness_error(self) -> bool:
        """No verdict could be made (Fault "harness"): never a reward, never kept as a verdict."""
        return self.fault == "harness"

    @staticmethod
    def written_harness_error(row: dict[str, Any]) -> bool:
        """`harness_error` of a verdict as written (`to_dict`, or a results line built on it),
        including those written when a harness error was a flag."""
        return row.get("fault") == "harness" or _OLD_HARNESS_FLAG in (row.get("flags") or [])

    def headline(self) -> str:
        """One line: the reward, the milestone and the speed-ups ("reward 3 (faster_than_compile),
        3.00x vs eager, 1.50x vs torch.compile")."""
        return headline(self.reward, self.milestone, self.speedup_vs_eager, self.speedup_vs_compile)

    def render(self, action: str) -> str:
        """The verdict as text, in the order a reader wants it: `action` (verify, profile, eval) and
        whether it passed, why not, the numbers, the reward."""
        if self.correct:
            error = f", max abs error {self.max_abs_error:.3g}" if self.max_abs_error is not None else ""
            lines = [f"{action}: PASSED (correct{error})"]
        else:
            lines = [f"{action}: FAILED at stage '{self.stage}': {self.reason}"]
            lines += [f"  {f}" for f in self.findings[:MAX_FINDINGS]]
            if len(self.findings) > MAX_FINDINGS:
                lines.append(f"  (and {len(self.findings) - MAX_FINDINGS} more)")
            if self.build is not None and not self.build.ok and self.build.errors.strip():
                lines.append(self.build.errors.strip())
        times = [(name, t) for name, t in (("eager", self.eager), ("torch.compile", self.compile),
                                           ("yours", self.solution)) if t is not None]
        if times:
            lines.append("median time: " + ", ".join(f"{name} {t.median_ms:.4g} ms" for name, t in times))
        speed = speedups(self.speedup_vs_eager, self.speedup_vs_compile)
        if speed:
            lines.append("speed-up: " + speed)
        if self.paired is not None:
            lines.append(self.timing_line())
        if self.init == "same_seed":
            why = self.details.get("weights")
            lines.append("weights: ModelNew as constructed after the reference's seed, not the reference's copied in"
                         + (f" ({why})" if why else ""))
        lines.append(f"reward: {self.reward:g} ({self.milestone})")
        if self.fault is not None:
            lines.append(f"fault: {self.fault} (not the solution's)")
        if self.flags:
            lines.append("flags: " + ", ".join(self.flags))
        return "\n".join(lines)

    def timing_line(self) -> str:
        """How the speed-ups were measured, in one line ("" where they were not): see `paired_line`."""
        return paired_line(self.paired, {"eager": self.eager, "compile": self.compile}) if self.paired else ""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.paired is not None:
            d["paired"] = self.paired.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "EvalResult":
        """The verdict `to_dict` wrote (a journal's line back into a result); one written when a
        harness error was a flag comes back with its `fault`."""
        d = dict(d)
        if _OLD_HARNESS_FLAG in (d.get("flags") or []):
            d["flags"] = [f for f in d["flags"] if f != _OLD_HARNESS_FLAG]
            d["fault"] = "harness"
        for key in ("eager", "compile", "solution"):
            if d.get(key) is not None:
                d[key] = TimingStats(**d[key])
        if d.get("build") is not None:
            d["build"] = BuildResult(**d["build"])
        if d.get("measured") is not None:
            d["measured"] = Measured(**d["measured"])
        if d.get("paired") is not None:
            d["paired"] = PairedTiming.from_dict(d["paired"])
        d["findings"] = [Finding(**f) for f in d.get("findings") or []]
        return cls(**d)


def paired_line(p: PairedTiming, medians: dict[str, TimingStats | None]) -> str:
    """How the speed-ups were measured, in one line: the standard error of each, the rounds and
    what ended them, and the cached baselines beside the paired ones where there were any."""
    names = {"eager": "eager", "compile": "torch.compile"}
    ses = ", ".join(f"±{100 * r.se:.2g}% vs {names.get(k, k)}" for k, r in p.ratios.items())
    end = f"target ±{100 * p.target_se:.2g}% met" if p.met else f"ended by its {p.stopped.replace('_', ' ')}"
    unit = f"replays of a graph of {p.graph_calls} calls" if p.graph_calls else "calls"
    if p.method == GRAPH_BASELINES:
        unit = f"{unit} (the solution's: its calls, each timed alone)"
    line = f"paired ({p.method.replace('_', ' ')}): {ses}; {p.rounds} rounds of {p.window} {unit} a window, {end}"
    drift = [f"{names.get(k, k)} {ms:.4g} ms ({m.median_ms / ms:.2f}x now)" for k, ms in p.cached_ms.items()
             if (m := medians.get(k)) is not None and ms > 0]
    return line + (f"; cached: {', '.join(drift)}" if drift else "")


def speedups(vs_eager: float | None, vs_compile: float | None) -> str:
    """The speed-ups as a person reads them ("3.00x vs eager, 1.50x vs torch.compile"); "" when
    there are none."""
    return ", ".join(f"{v:.2f}x vs {name}" for name, v in (("eager", vs_eager), ("torch.compile", vs_compile))
                     if v is not None)


def headline(reward: float, milestone: str, vs_eager: float | None, vs_compile: float | None) -> str:
    """A verdict in one line (`EvalResult.headline`), from its fields as written."""
    return f"reward {reward:g} ({milestone}), {speedups(vs_eager, vs_compile) or 'not profiled'}"
