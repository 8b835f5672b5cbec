"""Shared fixtures: the KernelBench data (read in place from ../shared, never copied), a private
CUDA_AGENT_HOME per checkout (and per xdist worker), and the `cuda` marker's skip."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
KERNELBENCH_JSONL = REPO.parent / "shared" / "kernelbench" / "kernelbench.jsonl"


# Under pytest-xdist (`-n 2`, as CI runs), the files whose tests each worker takes one by one: parametrized
# cases with nothing costly shared at module scope. Every other file goes to one worker whole
# (`--dist loadgroup`), so that its module-scoped fixtures (evaluations, services) are made once.
SPREAD = {"tests/hacks/test_corpus.py"}


def pytest_configure(config):
    # a home per checkout (its caches kept between runs of it): two checkouts' test runs at once on one
    # machine took each other's device lock, and the tests asserting the lock is free failed (2026-11-27)
    import hashlib

    name = f"cuda_agent_test_home_{hashlib.sha256(str(REPO).encode()).hexdigest()[:8]}"
    home = os.environ.setdefault("CUDA_AGENT_HOME", str(Path(os.environ.get("TMPDIR", "/tmp")) / name))
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        # a home of its own per worker: the device lock, the baseline cache and the build cache are a
        # home's, and a test that asserts the lock is free must not see the other worker's evaluation
        os.environ["CUDA_AGENT_HOME"] = f"{home}_{worker}"
    else:
        _remove_homes_of_removed_checkouts(Path(home).parent)
    mine = Path(os.environ["CUDA_AGENT_HOME"])
    if not _gpu_visible():
        # The device locks are the machine's (home.locks()): on the CPU each worker keeps its own, as its home
        # did, so that a test asserting the lock is free sees no other worker's or checkout's evaluation. On a
        # GPU they stay the machine's: workers that time on one GPU at once read honest work 1.15x faster than
        # eager (2026-11-28, H200, `-n 8`), and the tests that assert the lock is free run on the CPU.
        named = os.environ.get("CUDA_AGENT_LOCKS", "")
        if not named or Path(named).parent.name.startswith("cuda_agent_test_home_"):  # none, or the xdist parent's
            os.environ["CUDA_AGENT_LOCKS"] = str(mine / "locks")
    if mine.name.startswith("cuda_agent_test_home_"):  # not a home the user named
        mine.mkdir(parents=True, exist_ok=True)
        (mine / CHECKOUT_FILE).write_text(str(REPO))


CHECKOUT_FILE = "checkout"  # in each test home: the checkout whose tests made it


def _gpu_visible() -> bool:
    import torch

    return torch.cuda.is_available()


def _remove_homes_of_removed_checkouts(parent: Path) -> None:
    """Test homes whose checkout is gone: about 1.2 GB each (the build cache), three a run under xdist,
    kept for the next run of their checkout. Clones made and removed for CI runs left 73 GB in /tmp,
    and a later CI run failed for want of disk (2026-11-28)."""
    for home in parent.glob("cuda_agent_test_home_*"):
        try:
            checkout = Path((home / CHECKOUT_FILE).read_text().strip())
        except OSError:
            continue  # not a home, or one made before the marker: not ours to judge
        if checkout != REPO and not checkout.exists():
            shutil.rmtree(home, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    import torch

    for item in items:
        path = item.nodeid.split("::")[0]
        if path not in SPREAD:
            item.add_marker(pytest.mark.xdist_group(path))
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (run on the device)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def in_fork():
    """`run(target, *args)`: `target(queue, *args)` in a forked process (for what changes a process's
    own state: priority, affinity, environment), and the value it puts on the queue."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")

    def run(target, *args, timeout: float = 60):
        out = ctx.Queue()
        p = ctx.Process(target=target, args=(out, *args))
        p.start()
        try:
            return out.get(timeout=timeout)
        finally:
            p.join(20)
            if p.is_alive():
                p.kill()

    return run


@pytest.fixture(scope="session")
def kernelbench_jsonl() -> Path:
    if not KERNELBENCH_JSONL.exists():
        pytest.skip(f"KernelBench data not found at {KERNELBENCH_JSONL}")
    return KERNELBENCH_JSONL


@pytest.fixture(scope="module")
def service():
    """One evaluation service per test module, on a local Ray with the CPU backend: two evaluators
    and a builder (a Ray start costs seconds, so a module's tests share it). Module scope, not
    package: pytest ties a package-scoped fixture of this conftest to the whole tests folder, which
    would keep its Ray up under every later test (timing tests, and RL tests that start a Ray of
    their own)."""
    from cuda_agent.service import EvalService, ServiceSettings

    _test_doubles_importable()
    with EvalService(ServiceSettings(device="cpu", cpu_evaluators=2, build_workers=1, spares=1)) as svc:
        yield svc


def _test_doubles_importable() -> None:
    """The evaluators run test doubles defined in test modules: Ray's workers import them by name."""
    tests = str(Path(__file__).resolve().parent)
    if tests not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (tests, os.environ.get("PYTHONPATH")) if p)


@pytest.fixture
def test_doubles_importable():
    """For a test that starts its own service and sends it a job defined in a test module."""
    _test_doubles_importable()


@pytest.fixture(scope="module", autouse=True)
def _no_ray_left_behind(request):
    """A module that starts a Ray shuts it down: a Ray left up would sit under every later test."""
    yield
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():   # not shut down here: a service still on it would end the process
        pytest.fail(f"{request.module.__name__} left a Ray runtime up: close the service (or Ray) it started")
