"""The evaluation service's settings (where it runs, on how many devices, with how many build
workers, how far builds may run ahead, and where its journal is), its priorities and its error."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# Priorities: lower is served first.
PRIORITY_REWARD = 0   # the RL trainer's reward: a training step waits on it
PRIORITY_AGENT = 1    # an agent's verify/profile: a conversation waits on it
PRIORITY_BENCH = 2
PRIORITY_SYNTH = 3


class ServiceError(RuntimeError):
    """The service cannot start or serve as asked; the message says what to do."""


@dataclass(frozen=True)
class ServiceSettings:
    address: str | None = None           # a Ray cluster ("auto", "ray://..."); None: $RAY_ADDRESS, else a local Ray
    device: str | None = None            # cuda | cpu; None: cuda where a GPU is present
    gpus: int | None = None              # GPUs to use; None: every one Ray sees
    shared_gpu: str | None = None        # run the evaluators on this GPU without asking Ray for it (one held by a trainer)
    evaluators_per_device: int = 1       # evaluators sharing a device (they take its lock to time)
    cpu_evaluators: int = 1              # the CPU backend: evaluators at once
    build_workers: int | None = None     # CPU-only build workers; None: the cores left, 1 to 8
    build_ahead: int = 8                 # requests built and waiting for an evaluator, at most
    spares: int | None = None            # evaluations' processes started ahead per evaluator; None: 3 on cuda, 1 on cpu
    retries: int = 1                     # a request whose evaluator died is run once more, then a harness error
    timeout_margin_s: float = 600.0      # beyond the config's own limits, before an evaluator is declared hung
    placement_timeout_s: float = 600.0   # no evaluator able to start this long (a node lost): queued requests end
    journal: Path | None = None          # requests and verdicts; a restarted driver redoes nothing that has one
    pin_cores: bool = True               # timing on cores of its own, builds and start-ups on the others
    # Builders compile only while no evaluator of the device times (EvalConfig.quiet_host, for builds):
    # False lets them build beside timing, faster where builds are the bottleneck (RESULTS.md, 2026-11-25 evening).
    quiet_builds: bool = True
    ray_init: dict | None = None         # more ray.init() arguments for a local Ray

    def resolved_address(self) -> str | None:
        """The cluster to join; None for a Ray of the service's own (also where the address is "local")."""
        address = self.address or os.environ.get("RAY_ADDRESS") or None
        return None if address == "local" else address
