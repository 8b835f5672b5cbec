"""The actors of one evaluation service, from the driver's side: how many evaluators and builders,
on which cores, started, replaced when one dies, and stopped (the actors themselves: actors.py)."""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cuda_agent.devices import Backend
from cuda_agent.service.actors import Builder, Evaluator
from cuda_agent.service.cores import CoreClaim, claim_cores
from cuda_agent.service.settings import ServiceError, ServiceSettings

if TYPE_CHECKING:
    from cuda_agent.service.scheduler import Item

MAX_BUILDERS = 8  # by default: enough to build ahead of a GPU; each is a process holding torch
RESTART_EVERY_S = 5.0  # an evaluator that died while starting is asked for again no sooner than this
STOP_WAIT_S = 30.0     # the evaluators' own stops (their workers closed), all together, at most
AFFINITY_TASKS = 2     # tasks an evaluator is remembered for (the reference workers a harness process keeps)

log = logging.getLogger(__name__)


@dataclass
class Slot:
    """An evaluator actor and the request it runs (set and cleared by the scheduler)."""

    index: int
    handle: Any
    item: "Item | None" = None
    started: float = 0.0
    starting: Any = None     # describe() of a replacement while Ray places and starts it, or of an idle evaluator
    since: float = 0.0       # checked after another died (`check_idle`): no work until it answers
    checking: bool = False   # `starting` is such a check (an evaluator that fails it is replaced at once)
    # the sources of the last tasks it evaluated: its reference workers are kept for them (harness spares.py,
    # two a process), so their next evaluations find the task compiled there (the scheduler's preference)
    tasks: deque = field(default_factory=lambda: deque(maxlen=AFFINITY_TASKS))


def kill(handle: Any) -> None:
    """Kill an actor; one that is already gone (or a Ray already shut down) is not an error."""
    import ray

    try:
        ray.kill(handle)
    except Exception:
        pass


class Fleet:
    """A service's evaluators (one `Slot` each) and builders (`free_builders`: those not building)."""

    def __init__(self, settings: ServiceSettings, device: str, stats: dict[str, int]):
        self.settings, self.device, self.stats = settings, device, stats
        self.slots: list[Slot] = []
        self.builders: list[Any] = []
        self.free_builders: list[Any] = []
        self.backend: Backend | None = None   # what the builders build for: the evaluators' device and arch
        self.cores = CoreClaim(None, None)   # the evaluators' cores, claimed host-wide in start(), given back in stop()

    def start(self) -> None:
        """An evaluator per device (or CPU slot) and the builders the cores left allow; raises
        ServiceError when Ray cannot give them."""
        import ray

        s = self.settings
        resources = ray.cluster_resources()
        if self.device == "cuda" and s.shared_gpu is not None:
            count = s.evaluators_per_device
        elif self.device == "cuda":
            gpus = int(resources.get("GPU", 0))
            if gpus == 0:
                raise ServiceError("the service was asked for cuda but Ray sees no GPU; use device='cpu' "
                                   "(--device cpu), or start Ray with the GPUs")
            gpus = min(gpus, s.gpus or gpus)
            count = gpus * s.evaluators_per_device
        else:
            count = s.cpu_evaluators
        cores = int(resources.get("CPU", os.cpu_count() or 1))
        self.cores = self.core_plan(count)
        for i in range(count):
            self.slots.append(Slot(i, self._new_evaluator(i)))
        try:
            described = ray.get([slot.handle.describe.remote() for slot in self.slots], timeout=600)
        except ray.exceptions.GetTimeoutError:
            raise ServiceError(f"Ray could not start {count} evaluator(s) in 10 minutes (its resources: "
                               f"{ray.available_resources()}); ask for fewer (--gpus, --workers)") from None
        arch = next((d["arch"] for d in described if d.get("arch")), None)
        self.backend = Backend(self.device, arch)  # type: ignore[arg-type]
        # Builders take a CPU each (their compilers use it); evaluators take none (their harness
        # processes are the device's), so several services can share one Ray.
        free = int(ray.available_resources().get("CPU", 0))
        wanted = s.build_workers if s.build_workers is not None else max(1, min(MAX_BUILDERS, cores - 2 * count - 1))
        self.builders = [self._new_builder() for _ in range(min(wanted, free))]
        self.free_builders = list(self.builders)

    def core_plan(self, evaluators: int) -> CoreClaim:
        """Two cores of its own for each evaluator's solution child (the process that times), the
        rest for builds, start-ups and reference workers; claimed host-wide (cores.py), so that
        other services on this host time elsewhere; only on a local Ray. Held until `stop()`."""
        if not self.settings.pin_cores or self.settings.resolved_address():
            return CoreClaim(None, None)
        claim = claim_cores(evaluators)
        if claim.reason in ("taken", "no_folder"):
            log.warning("evaluation service: %s", claim.note)
        return claim

    def _new_evaluator(self, index: int) -> Any:
        import ray

        s = self.settings
        foreground, background = self.cores.foreground, self.cores.background
        spares = s.spares if s.spares is not None else (3 if self.device == "cuda" else 1)
        options: dict[str, Any] = {"num_cpus": 0, "max_concurrency": 1}
        if self.device == "cuda" and s.shared_gpu is None:
            options["num_gpus"] = 1.0 / s.evaluators_per_device
        return ray.remote(Evaluator).options(**options).remote(
            self.device, spares, foreground[index] if foreground else None, background, s.shared_gpu)

    def _new_builder(self) -> Any:
        import ray

        return ray.remote(Builder).options(num_cpus=1).remote(self.cores.background, self.settings.quiet_builds)

    def restart(self, slot: Slot, died: bool = False) -> None:
        """A fresh evaluator in `slot`, the old one killed (dead, hung, or in a state not to trust).
        The slot takes no work until the new one answers (`poll_starting`): where Ray cannot place it
        (its node was lost, and with it the GPU it asks for) the requests go to the other evaluators,
        and it starts whenever the resources come back. `died`: the old one's process is gone, so the
        idle ones are checked too (`check_idle`)."""
        if died:
            self.check_idle()
        self.stats["restarts"] += 1
        kill(slot.handle)
        slot.tasks.clear()  # a new process keeps no reference worker
        slot.handle = self._new_evaluator(slot.index)
        slot.starting, slot.since = slot.handle.describe.remote(), time.monotonic()

    def poll_starting(self) -> None:
        """Replacements that answered take work again; one that died while starting is asked for again
        (at most every RESTART_EVERY_S seconds, so an evaluator that cannot start does not spin)."""
        import ray

        starting = [slot for slot in self.slots if slot.starting is not None]
        if not starting:
            return
        done, _ = ray.wait([slot.starting for slot in starting], num_returns=len(starting), timeout=0,
                           fetch_local=False)
        for slot in starting:
            if slot.starting not in done:
                continue
            try:
                ray.get(slot.starting)
                slot.starting, slot.checking = None, False
            except Exception:
                if slot.checking or time.monotonic() - slot.since > RESTART_EVERY_S:
                    slot.checking = False
                    self.restart(slot)

    def check_idle(self) -> None:
        """After an evaluator died: every idle one answers before it takes work again, so that a request
        retried after a lost node is not sent to another evaluator that was on it (and charged a second
        death it had no part in); one that does not answer is replaced."""
        for slot in self.slots:
            if slot.item is None and slot.starting is None:
                slot.starting, slot.since, slot.checking = slot.handle.describe.remote(), time.monotonic(), True

    def usable(self) -> list[Slot]:
        """The evaluators that can take work (not a replacement still starting)."""
        return [slot for slot in self.slots if slot.starting is None]

    def stalled_s(self) -> float:
        """Seconds since the service last had an evaluator that could take work (0 while one can)."""
        if not self.slots or self.usable():
            return 0.0
        return time.monotonic() - max(slot.since for slot in self.slots)

    def replace_builder(self, dead: Any) -> None:
        self.builders.remove(dead)
        if dead in self.free_builders:
            self.free_builders.remove(dead)
        fresh = self._new_builder()
        self.builders.append(fresh)
        self.free_builders.append(fresh)

    def stop(self, wait: bool) -> None:
        """Every actor stopped and killed, and their cores given back; `wait`: an evaluator closes
        what it started first (all at once, up to STOP_WAIT_S together), else it is killed at once."""
        import ray

        if not ray.is_initialized():   # the Ray went first (shut down by its owner): so did the actors;
            self.slots, self.builders = [], []   # calling them would start a new Ray by itself
        # Every evaluator asked at once, then waited for together: each closes its reference workers and spares,
        # seconds each, which one after another outlasted a device call's limit (3 evaluators, 2026-11-29).
        try:   # a busy actor answers after its evaluation, one not placed never
            stopping = [slot.handle.stop.remote() for slot in self.slots if wait and slot.starting is None]
            if stopping:
                ray.wait(stopping, num_returns=len(stopping), timeout=STOP_WAIT_S)
        except Exception:  # a dead Ray or actor: killed below
            pass
        for slot in self.slots:
            kill(slot.handle)
        for b in self.builders:
            kill(b)
        self.slots, self.builders, self.free_builders = [], [], []
        self.cores.close()   # the children pinned there died with their evaluators
