"""Where cuda-agent keeps what outlives one command: build cache, baselines, the signing key; and
how much room each part takes (`cuda-agent cache`)."""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path


def home() -> Path:
    """`$CUDA_AGENT_HOME`, or `~/.cache/cuda_agent`; created with owner-only permissions."""
    root = Path(os.environ.get("CUDA_AGENT_HOME") or Path.home() / ".cache" / "cuda_agent")
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    return root


RAY_TMP_PREFIX = "cuda-agent-ray-"


def private_ray_tmp() -> Path:
    """A new folder only this user can enter (0700), for a local Ray's sessions: Ray makes its own folders
    world-writable without the sticky bit (/tmp/ray/session_*/sockets, runtime_resources: 0777), so that
    under /tmp/ray any user, a sandbox user among them, could replace the sockets and runtime files that
    Ray's workers (root, as the harness) use. Under the system's temporary folder, not the home: a Unix
    socket's path must fit in 107 bytes. The caller removes it once its Ray has stopped."""
    return Path(tempfile.mkdtemp(prefix=RAY_TMP_PREFIX))


def subdir(name: str) -> Path:
    p = home() / name
    p.mkdir(parents=True, exist_ok=True, mode=0o700)
    return p


LOCKS_ENV = "CUDA_AGENT_LOCKS"
_warned: set[Path] = set()   # fallback folders already warned about (every sandboxed process's start asks)


def locks() -> Path:
    """Where the device locks live (measure/lock.py): one folder for the machine and this user, whatever
    CUDA_AGENT_HOME each harness, service, bench or test run uses, since they all time on the same GPUs. In
    a folder of each home, two homes timed on one GPU at once: a test suite with one home per xdist worker
    read an honest solution 1.15x faster than eager, with the same work, and 2.25x faster than torch.compile,
    while another worker's tests ran beside it (2026-11-28, H200). `$CUDA_AGENT_LOCKS` names another folder
    (a shared file system's, for homes on several machines that share GPUs). The folder is this user's
    alone (0700): a sandbox user who could open a lock file could hold it and stall timing. One of ours that
    only we could write is made 0700; one with another owner, or that others could write (they may have put
    lock files there), is not used: the home's own folder is, with a warning."""
    named = os.environ.get(LOCKS_ENV)
    if named:
        p = Path(named)
        p.mkdir(parents=True, exist_ok=True, mode=0o700)
        return p
    bases = (["/run"] if os.geteuid() == 0 else []) + [tempfile.gettempdir()]
    for base in bases:
        p = Path(base) / f"cuda-agent-locks-{os.geteuid()}"
        try:
            p.mkdir(exist_ok=True, mode=0o700)
            st = os.lstat(p)
        except OSError:
            continue
        if p.is_dir() and not p.is_symlink() and st.st_uid == os.geteuid() and not st.st_mode & 0o022:
            if st.st_mode & 0o077:
                os.chmod(p, 0o700)
            return p
    fallback = subdir("locks")
    if fallback in _warned:
        return fallback
    _warned.add(fallback)
    logging.getLogger(__name__).warning(
        "no folder of this user's alone for the machine's device locks under %s: using %s, so harnesses with "
        "other homes may time on the same GPU at once (set $%s to a folder only you can write)",
        " or ".join(bases), fallback, LOCKS_ENV)
    return fallback


def flock_within(fd, seconds: float, pause: float, max_pause: float | None = None) -> bool:
    """An exclusive flock of the lock file `fd` (a descriptor or a file), retried until `seconds` have passed:
    whether it was had. Between tries the pause doubles up to `max_pause` (None: it stays `pause`)."""
    import fcntl
    import time

    deadline = time.monotonic() + seconds
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            time.sleep(pause)
            pause = pause if max_pause is None else min(2 * pause, max_pause)


def folder_bytes(path: Path) -> int:
    """The bytes of the files under `path` (0 where it is missing or vanished meanwhile)."""
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def usage() -> dict[str, int]:
    """Bytes per folder of the home (build, baselines, synth, ...), largest first."""
    sizes = {p.name: folder_bytes(p) for p in home().iterdir() if p.is_dir()}
    return dict(sorted(sizes.items(), key=lambda kv: -kv[1]))
