"""The filters a composed task must pass, each a small function with a version string.

Static filters (source only) run in the parent, before anything executes: parse + KernelBench
form, no stochastic operators, not a near-copy of a KernelBench task, not a duplicate. The execution
filters (eager, deterministic, stochastic, degenerate, window, compile) run in the child worker
(worker.py); their verdicts come back as `Outcome`s. The versions are written into every dataset
row, so a dataset says which rules it was built under.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass

from cuda_agent.synth.seeds import STOCHASTIC_NAMES
from cuda_agent.tasks.task import TaskError
from cuda_agent.tasks.validate import validate_source
from cuda_agent.usage import UsageError

# The order in which a candidate meets them (and the rows of the summary's funnel). `stochastic` is two checks: the
# source's (here, early) and the run's (with `deterministic`, after the size search), counted in its one row.
FILTER_VERSIONS: dict[str, str] = {
    "compose": "1",        # the composer produced a program / a parseable reply
    "format": "1",         # class Model, get_inputs, get_init_inputs; parses
    "stochastic": "2",     # no random ops in the source; run again under another RNG state, the outputs are the same
                           # (repeat.compare_runs) and, where the forward drew from the generator, bit for bit; at the
                           # size the task ships at (v1: bit for bit, at every size tried)
    "kernelbench": "1",    # normalized-AST similarity to every KernelBench task below the threshold
    "duplicate": "1",      # no other accepted task with the same normalized source
    "memory": "2",         # the model's weights (parameters and buffers) within the run's limit (2 GiB) and its memory
                           # budget for a task, counted on the meta device before any draw (v1: the budget, 8 GiB)
    "eager": "2",          # builds and runs in eager mode in the child (out of GPU memory: again alone, then smaller)
    "degenerate": "2",     # outputs finite, not all zero, not constant, with variance (a scalar loss: finite, non-zero),
                           # at every size the size search tries
    "window": "1",         # eager time in the window (after the size search; again with torch.compile's baselines)
    "deterministic": "2",  # two runs from the same seed are the same to within 1e-4 of their scale and a tenth of the
                           # judge's tolerance (repeat.compare_runs), at the size the task ships at (v1: bit for bit, at
                           # every size tried)
    "compile": "1",        # runs under torch.compile and matches eager within tolerance
}
FILTERS = tuple(FILTER_VERSIONS)


@dataclass(frozen=True)
class Outcome:
    """One candidate's fate: passed every filter (`filter` == "accepted") or the first it failed."""
    filter: str
    reason: str = ""

    @property
    def accepted(self) -> bool:
        return self.filter == "accepted"


ACCEPTED = Outcome("accepted")


def check_format(code: str, name: str) -> Outcome | None:
    try:
        validate_source(code, name)
    except TaskError as e:
        return Outcome("format", e.problem)
    return None


# Names that draw or steer random numbers, matched whole (as parts of names they are common words): torch.rand,
# torch.normal, randperm, a private torch.Generator, fork_rng and the generator's state, numpy's and Python's random.
RANDOM_WORDS = frozenset({"rand", "randperm", "normal", "Generator", "fork_rng", "get_rng_state", "set_rng_state",
                          "manual_seed", "seed", "random"})


def check_stochastic_source(code: str) -> Outcome | None:
    """A random op named anywhere in the source (dropout, rand*, bernoulli, a generator...) outside get_inputs."""
    tree = ast.parse(code)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "get_inputs":
            continue  # inputs are drawn at random by design
        for sub in ast.walk(node):
            word = sub.attr if isinstance(sub, ast.Attribute) else sub.id if isinstance(sub, ast.Name) else None
            if isinstance(sub, (ast.Import, ast.ImportFrom)):  # import random; from numpy import random
                word = next((a.name for a in sub.names if a.name.split(".")[-1] in RANDOM_WORDS), None) or (
                    sub.module if isinstance(sub, ast.ImportFrom) and sub.module
                    and sub.module.split(".")[-1] in RANDOM_WORDS else None)
            if word and (word in RANDOM_WORDS or word.split(".")[-1] in RANDOM_WORDS
                         or any(s in word.lower() for s in STOCHASTIC_NAMES)):
                return Outcome("stochastic", f"uses {word} (line {sub.lineno}); tasks must be deterministic")
    return None


def weights_reason(weights: int, most: int, when: str = "") -> str:
    """Why a task is refused by the memory filter for its weights (`when`: after what they were counted)."""
    return (f"its weights take {weights / 2**20:,.0f} MiB{when}, more than the run's limit of {most / 2**20:,.0f} MiB "
            "for a task's weights")


def degenerate_reason(stats: list[dict]) -> str | None:
    """Why outputs are useless for timing a kernel, from per-output stats computed in the child:
    {"finite": bool, "numel": int, "nonzero": fraction, "std": float, "absmax": float}. A single
    number (a loss) has no spread to check: finite and non-zero is enough."""
    for i, s in enumerate(stats):
        tag = f"output {i}" if len(stats) > 1 else "output"
        if not s["finite"]:
            return f"{tag} has inf or NaN"
        if s["nonzero"] == 0.0:
            return f"{tag} is all zero"
        if s.get("numel", 2) == 1:
            continue
        if not s["std"] > 1e-6 * max(1.0, s["absmax"]):
            return f"{tag} is constant (std {s['std']:.2e})"
        if s["nonzero"] < 0.01:
            return f"{tag} is {100 * (1 - s['nonzero']):.1f}% zeros"
    return None


@dataclass(frozen=True)
class Window:
    """Eager runtime bounds in ms: [1, 100] on the GPU as in the paper; scaled for the CPU backend."""
    low_ms: float
    high_ms: float

    @property
    def target_ms(self) -> float:
        """Where the size search aims: the geometric middle, the farthest from both edges."""
        return math.sqrt(self.low_ms * self.high_ms)

    def contains(self, ms: float) -> bool:
        return self.low_ms <= ms <= self.high_ms

    @classmethod
    def for_device(cls, device: str) -> "Window":
        return cls(1.0, 100.0) if device == "cuda" else cls(0.05, 50.0)

    @classmethod
    def parse(cls, text: str) -> "Window":
        """`LOW,HIGH` in ms, e.g. `1,100`."""
        try:
            low, high = (float(v) for v in text.split(","))
        except ValueError:
            raise UsageError(f"--window {text!r}: give LOW,HIGH in milliseconds, e.g. 1,100") from None
        if not 0 < low < high:
            raise UsageError(f"--window {text!r}: need 0 < LOW < HIGH")
        return cls(low, high)


def scaled_batch(batch: int, measured_ms: float, window: Window, max_batch: int) -> int | None:
    """The batch size that should land the eager time at the window's target (time ~ batch), or
    None when no batch in [2, max_batch] gets there."""
    want = round(batch * window.target_ms / max(measured_ms, 1e-6))
    new = min(max(want, 2), max_batch)
    if new == batch:
        return None
    return new
