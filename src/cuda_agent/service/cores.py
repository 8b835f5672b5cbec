"""The cores of a host that one evaluation service claims for its evaluators' timing, so that
several services on one host time on different cores.

A service pins each evaluator's solution child (the process that times) onto two cores of its
own. Every service used to work out the same plan by itself: on 2026-11-27 three RL runs and a
test run on one 64-core, 4-GPU host all pinned their evaluator i onto the same two cores, so
their children fought over 20 cores while 40 idled; a correctness-only evaluation of a tiny task
took a median 34 s (1-2 s alone) and a 73-prompt validation 8.5 minutes.

A claim is one lock file per core, held with `flock`, in a folder every process of the host sees
(`claims_folder`: not under CUDA_AGENT_HOME, since services with different homes share the
cores). The kernel drops a flock when its holder dies, so a killed driver leaves no stale claim.
The locks are advisory: they keep services of this package apart, nothing else.

When the free pairs are fewer than the evaluators, the claim takes none and pins nobody (its
`note` says why; the fleet logs it). All or nothing, rather than pinning some evaluators: the
scheduler hands a request to whichever evaluator is free, and a verdict's timing should not
depend on which one that was; and it is the rule the plan already had for a host with too few
cores.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

CLAIMS_ENV = "CUDA_AGENT_CORE_CLAIMS"   # the folder of the host's core locks, where the default will not do

# Why a claim pinned nobody: the host has too few cores for the evaluators (as on a small CI
# machine: nothing to say), other services hold the pairs, or the lock folder cannot be used.
Unpinned = Literal["few_cores", "taken", "no_folder"]


def claims_folder() -> Path:
    """Where the host's core locks live: $CUDA_AGENT_CORE_CLAIMS, else /dev/shm/cuda_agent_cores
    (memory: nothing left on disk), else the system's temporary folder."""
    if os.environ.get(CLAIMS_ENV):
        return Path(os.environ[CLAIMS_ENV])
    shm = Path("/dev/shm")
    return (shm if shm.is_dir() else Path(tempfile.gettempdir())) / "cuda_agent_cores"


@dataclass
class CoreClaim:
    """Cores claimed for one service: a pair per evaluator (`foreground`) and the rest of the
    cores (`background`: builds, start-ups, reference workers), or None for both: not pinned, and
    `reason` and `note` say why. Held until `close()` (or the end of a `with` block, or the
    holder's death)."""

    foreground: list[list[int]] | None
    background: list[int] | None
    reason: Unpinned | None = None
    note: str = ""
    busy: list[int] = field(default_factory=list)   # cores seen held by other services at claim time
    _locks: list[int] = field(default_factory=list, repr=False)   # open descriptors, each holding a flock

    @property
    def pinned(self) -> bool:
        return self.foreground is not None

    def close(self) -> None:
        """Give the cores back (closing a descriptor drops its flock)."""
        for fd in self._locks:
            os.close(fd)
        self._locks.clear()

    def __enter__(self) -> "CoreClaim":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def claim_cores(evaluators: int, cores: Iterable[int] | None = None, folder: Path | None = None) -> CoreClaim:
    """Two cores for each of `evaluators`, from the end of `cores` (default: this process's
    affinity), skipping pairs another live claim holds; the first two cores are never claimed
    (they take most of the machine's interrupts and housekeeping, and the background needs some)."""
    cores = sorted(os.sched_getaffinity(0) if cores is None else cores)
    if evaluators < 1 or len(cores) < 2 * evaluators + 2:
        return CoreClaim(None, None, "few_cores",
                         f"{len(cores)} cores are too few to give {evaluators} evaluator(s) two each")
    folder = folder or claims_folder()
    try:
        _make_shared(folder)
    except OSError as e:
        return CoreClaim(None, None, "no_folder", f"cannot use the core-claim folder {folder} ({e}); point "
                                                  f"${CLAIMS_ENV} at a folder every user of the host can write")
    claim = CoreClaim(None, None)
    pairs: list[list[int]] = []
    for end in range(len(cores), 3, -2):   # pairs from the end: cores[end-2:end], never cores[0:2]
        if len(pairs) == evaluators:
            break
        pair = cores[end - 2:end]
        held = [fd for fd in (_lock(folder, c) for c in pair) if fd is not None]
        if len(held) == 2:
            pairs.append(pair)
            claim._locks += held
        else:
            for fd in held:
                os.close(fd)
            claim.busy += pair   # one of the pair is held: both are skipped, pairs stay aligned
    if len(pairs) < evaluators:
        claim.close()
        claim.reason = "taken"
        claim.note = (f"only {len(pairs)} of the {evaluators} core pairs wanted are free (other services on this "
                      f"host hold cores {_ranges(claim.busy)}; claims in {folder}): no evaluator pinned, so timing "
                      f"shares cores; run fewer evaluators on this host, or set pin_cores=False to say so")
        return claim
    mine = {c for pair in pairs for c in pair}
    claim.foreground, claim.background = pairs, [c for c in cores if c not in mine]
    return claim


def _make_shared(folder: Path) -> None:
    """The folder, made by whoever comes first, writable by every user (sticky, as /tmp is)."""
    if folder.is_dir():
        return
    folder.mkdir(parents=True, exist_ok=True)
    try:
        folder.chmod(0o1777)
    except OSError:   # made by another user between the two calls: theirs to set
        pass


def _lock(folder: Path, core: int) -> int | None:
    """A descriptor holding the core's lock, or None where another holds it (or its file cannot be
    opened: a file of another user's, say; the core is left alone)."""
    try:   # read-only is enough for flock, so a file another user made serves everyone
        fd = os.open(folder / f"core-{core}", os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _ranges(cores: list[int]) -> str:
    """`[2, 3, 4, 5, 9]` as "2-5,9"."""
    spans: list[list[int]] = []
    for c in sorted(set(cores)):
        if spans and c == spans[-1][1] + 1:
            spans[-1][1] = c
        else:
            spans.append([c, c])
    return ",".join(f"{a}-{b}" if a != b else f"{a}" for a, b in spans)
