"""Typed results of every harness stage; JSON output is these dataclasses turned into dicts."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Stage = Literal["static", "build", "run", "correctness", "profile", "done"]


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


@dataclass
class TimingStats:
    """Milliseconds per call over `runs` timed iterations (warm-up excluded, L2 flushed between)."""

    median_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    std_ms: float
    iqr_ms: float
    runs: int
    offstream_ms: float = 0.0   # work left on other streams per call, charged to every sample (CUDA)

    @classmethod
    def from_samples(cls, samples_ms: list[float], offstream_ms: float = 0.0) -> "TimingStats":
        import statistics

        s = sorted(samples_ms)
        n = len(s)
        q1, q3 = s[n // 4], s[(3 * n) // 4] if n > 1 else s[0]
        return cls(median_ms=statistics.median(s), mean_ms=statistics.fmean(s), min_ms=s[0], max_ms=s[-1],
                   std_ms=statistics.pstdev(s) if n > 1 else 0.0, iqr_ms=q3 - q1, runs=n, offstream_ms=offstream_ms)


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
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    eager: TimingStats | None = None
    compile: TimingStats | None = None
    solution: TimingStats | None = None
    max_abs_error: float | None = None
    flags: list[str] = field(default_factory=list)   # e.g. "speedup_remeasured", "baseline_cached"
    # How ModelNew got its weights: "state_dict" (the reference's, copied in) or "same_seed" (relaxed,
    # names or shapes differ: both models constructed after the same seed, as KernelBench does).
    init: str | None = None
    build: BuildResult | None = None
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0
    stage_seconds: dict[str, float] = field(default_factory=dict)  # wall time of each step, in order
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "EvalResult":
        """The verdict `to_dict` wrote (a journal's line back into a result)."""
        d = dict(d)
        for key in ("eager", "compile", "solution"):
            if d.get(key) is not None:
                d[key] = TimingStats(**d[key])
        if d.get("build") is not None:
            d["build"] = BuildResult(**d["build"])
        d["findings"] = [Finding(**f) for f in d.get("findings") or []]
        return cls(**d)
