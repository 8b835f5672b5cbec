"""The category mix a synth run targets, and the plan that makes the ACCEPTED set meet it.

A mix is a share per task class (categories.PRIORITY). For a run of N tasks it becomes quotas
(largest remainders, so they sum to N). Every candidate index has a class fixed by (run seed, index)
alone (`class_at`, drawn by the shares), so the indices of a class form a stream. A worker asks for
work; the plan picks a class that is still short (accepted tasks count against their class, and
candidates in flight by their class's acceptance rate so far, so a class that is hard to get accepted
keeps being worked until it fills) and hands out that class's lowest index not yet run. Each class's
candidates are therefore always a prefix of its stream, whatever the number of workers and whatever
order they finish in, and the dataset - the first accepted tasks of each class, in index order, up to
its quota - is the same for 1 or 16 workers (given the same verdicts per candidate: filters that time
the candidate may still decide differently on a loaded machine).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from cuda_agent.synth.categories import CORE, PRIORITY
from cuda_agent.usage import UsageError

# Close to KernelBench levels 1-3 (250 tasks) as categories.py classifies them from their code: conv
# 49.6%, gemm 24.4%, reduction 6.8%, activation 4.8%, attention 3.6% (NetVLAD's softmax-weighted
# matmuls count), recurrent 3.2%, pool 2.4%, norm 1.6%, loss 1.6%, elementwise 1.2%, softmax 0.8%
# (77.6% with a core). Attention, norms and embeddings get a little more, from transformers' blocks;
# elementwise-only tasks none. tests/synth/test_mix.py recomputes KernelBench's shares and keeps
# these within 0.1 of them (total variation).
KERNELBENCH_SHARES: dict[str, float] = {
    "attention": 0.06, "recurrent": 0.04, "conv": 0.45, "gemm": 0.25, "loss": 0.02, "embedding": 0.01,
    "norm": 0.04, "pool": 0.03, "reduction": 0.05, "softmax": 0.01, "activation": 0.04,
}


class MixError(UsageError):
    """A mix that cannot be used as given; the message says how to write one."""


@dataclass(frozen=True)
class Mix:
    """Target share per task class; `min_core`: the least share of tasks with a GEMM, convolution or
    attention core; `max_ops`: the most operators in a task."""
    shares: dict[str, float] = field(default_factory=lambda: dict(KERNELBENCH_SHARES))
    min_core: float = 0.6
    max_ops: int = 5

    def __post_init__(self) -> None:
        unknown = sorted(set(self.shares) - set(PRIORITY))
        if unknown:
            raise MixError(f"unknown task class(es) {', '.join(unknown)} in the mix; use {', '.join(PRIORITY)}")
        if any(v < 0 for v in self.shares.values()) or sum(self.shares.values()) <= 0:
            raise MixError("mix shares must be >= 0 and not all zero")
        if self.core_share < self.min_core - 1e-9:
            raise MixError(f"the mix gives {self.core_share:.0%} of tasks a {'/'.join(CORE)} core, under the "
                           f"minimum {self.min_core:.0%}: raise those shares")

    @property
    def normalized(self) -> dict[str, float]:
        total = sum(self.shares.values())
        return {c: self.shares[c] / total for c in PRIORITY if self.shares.get(c, 0) > 0}

    @property
    def core_share(self) -> float:
        return sum(v for c, v in self.normalized.items() if c in CORE)

    def quotas(self, count: int) -> dict[str, int]:
        """Tasks per class for a set of `count`: largest remainders, ties to the earlier class."""
        exact = {c: s * count for c, s in self.normalized.items()}
        out = {c: int(v) for c, v in exact.items()}
        left = count - sum(out.values())
        # remainders rounded so that float noise does not break a tie the class order should
        for c in sorted(exact, key=lambda c: (-round(exact[c] - out[c], 9), PRIORITY.index(c)))[:left]:
            out[c] += 1
        return {c: n for c, n in out.items() if n > 0}

    def without(self, missing: set[str]) -> "Mix":
        """The mix with classes the catalog cannot build removed (their share spread over the rest)."""
        return Mix({c: v for c, v in self.shares.items() if c not in missing}, self.min_core, self.max_ops)

    def to_dict(self) -> dict:
        return {"shares": dict(self.shares), "min_core": self.min_core, "max_ops": self.max_ops}

    @classmethod
    def from_dict(cls, d: dict) -> "Mix":
        return cls(dict(d["shares"]), d.get("min_core", 0.6), d.get("max_ops", 5))

    def text(self) -> str:
        """The mix as `--mix` takes it (`parse(mix.text())` gives it back, min_core and max_ops aside)."""
        if self.shares == KERNELBENCH_SHARES:
            return "kernelbench"
        return ",".join(f"{c}={v:g}" for c, v in self.shares.items())

    @classmethod
    def parse(cls, text: str) -> "Mix | None":
        """`kernelbench` (the default), `free` (no target: the composer draws any seed), or
        `CLASS=SHARE,...` such as `conv=0.4,gemm=0.3,attention=0.1,norm=0.1,activation=0.1`."""
        if text == "kernelbench":
            return cls()
        if text == "free":
            return None
        shares = {}
        for part in text.split(","):
            key, sep, value = part.partition("=")
            try:
                shares[key.strip()] = float(value)
            except ValueError:
                raise MixError(f"--mix {text!r}: write CLASS=SHARE,... (e.g. conv=0.5,gemm=0.3,norm=0.2), "
                               "`kernelbench` or `free`") from None
            if not sep:
                raise MixError(f"--mix {text!r}: {part!r} has no `=SHARE`")
        return cls(shares)


class Plan:
    """Which candidate index runs next, and for which class, from what the run has accepted so far."""

    def __init__(self, mix: Mix, count: int, run_seed: int):
        self.quotas = mix.quotas(count)
        self.run_seed = run_seed
        shares = mix.normalized
        self._classes = [c for c in PRIORITY if c in shares]   # the streams: every class of the mix,
        self._weights = [shares[c] for c in self._classes]      # so a change of count keeps class_at
        self._class_at: list[str] = []
        self.accepted = {c: 0 for c in self.quotas}
        self.tried = {c: 0 for c in self.quotas}
        self.in_flight: dict[int, str] = {}
        self.finished: set[int] = set()
        self._cursor = {c: 0 for c in self.quotas}   # below it, the class's indices are finished or in flight

    def class_at(self, index: int) -> str:
        """The class candidate `index` is composed for: (run seed, index) alone."""
        while len(self._class_at) <= index:
            rng = random.Random(f"mix:{self.run_seed}:{len(self._class_at)}")
            self._class_at.append(rng.choices(self._classes, self._weights)[0])
        return self._class_at[index]

    def record(self, index: int, task_class: str | None, accepted: bool) -> None:
        """A finished candidate (resumed from the journal, or just done)."""
        self.finished.add(index)
        if task_class in self.quotas:
            self.tried[task_class] += 1
            self.accepted[task_class] += accepted

    def rate(self, c: str) -> float:
        return (self.accepted[c] + 1) / (self.tried[c] + 2)  # Laplace: unknown is one in two

    def short(self) -> dict[str, float]:
        """What each class still lacks, counting candidates in flight at their class's rate."""
        flying = {c: 0 for c in self.quotas}
        for c in self.in_flight.values():
            flying[c] += 1
        return {c: q - self.accepted[c] - flying[c] * self.rate(c) for c, q in self.quotas.items()}

    @property
    def done(self) -> bool:
        return all(self.accepted[c] >= q for c, q in self.quotas.items())

    @property
    def started(self) -> int:
        """Candidates finished or in flight (a run's limit counts these, not indices)."""
        return len(self.finished) + len(self.in_flight)

    def claim(self) -> tuple[int, str] | None:
        """The next candidate, (index, class), recorded as in flight; None when every class is full.
        The class: the one that lacks the largest part of its quota (a tie to the earlier class in
        PRIORITY), so that the set accepted so far keeps the mix at every point of the run (short by
        the most tasks instead, a run stopped at 216 of 1,000 tasks held 96% convolutions: H100,
        2026-11-27); when every short class is covered by candidates in flight, the one with the
        most of its quota left to accept, so the workers stay busy. The index: that class's lowest
        one not run yet."""
        short = {c: v for c, v in self.short().items() if v > 1e-9}
        if not short:
            short = {c: q - self.accepted[c] for c, q in self.quotas.items() if self.accepted[c] < q}
        if not short:
            return None
        want = max((c for c in PRIORITY if c in short), key=lambda c: short[c] / self.quotas[c])
        index = self._cursor[want]
        while self.class_at(index) != want or index in self.finished or index in self.in_flight:
            index += 1
        self._cursor[want] = index + 1
        self.in_flight[index] = want
        return index, want

    def finish(self, index: int, task_class: str | None, accepted: bool) -> None:
        self.in_flight.pop(index, None)
        self.record(index, task_class, accepted)

    def cancel(self, index: int) -> None:
        """A candidate cut short (no verdict): not counted, and its index is the class's next again."""
        want = self.in_flight.pop(index, None)
        if want is not None:
            self._cursor[want] = min(self._cursor[want], index)

    def select(self, accepted_rows: list[dict], class_of) -> list[dict]:
        """The dataset: the first accepted rows of each class up to its quota, in index order."""
        taken = {c: 0 for c in self.quotas}
        out = []
        for row in accepted_rows:
            c = class_of(row)
            if c in taken and taken[c] < self.quotas[c]:
                taken[c] += 1
                out.append(row)
        return out
