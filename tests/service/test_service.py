"""The evaluation service on a local Ray with the CPU backend: parallel evaluations with one verdict
each, builds ahead of the evaluators, priorities, an evaluator killed mid-run, and a killed driver
that resumes from the journal without redoing finished evaluations."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cuda_agent.harness import EvalConfig, TimingPlan, read_solution
from cuda_agent.journal import read_rows
from cuda_agent.service import PRIORITY_BENCH, PRIORITY_REWARD, EvalService, ServiceError, ServiceSettings
from cuda_agent.tasks import load_task

HACKS = Path(__file__).resolve().parents[1] / "hacks"
TASK = load_task(HACKS / "tasks" / "sbr_small.py")
QUICK = EvalConfig(device="cpu", profile=False)
TIMED = EvalConfig(device="cpu", timing=TimingPlan(min_runs=3, max_runs=5, budget_s=0.02, warmup_s=0.0, min_warmup=1))

pytestmark = pytest.mark.slow


def files(name: str, tmp_path: Path) -> dict[str, str]:
    return read_solution(HACKS / "cpu" / name, tmp_path / name)


def test_parallel_evaluations_get_one_verdict_each_with_its_own_reason(service, tmp_path):
    names = ["honest_fused", "torch_relu_fallback", "segfault", "honest_tuple", "empty_output"]
    futures = {n: service.submit(load_task(HACKS / "tasks" / "sbr_small.py"), files(n, tmp_path), QUICK)
               for n in names}
    verdicts = {n: f.result(timeout=300) for n, f in futures.items()}
    assert verdicts["honest_fused"].correct and verdicts["honest_fused"].reward == 1.0
    assert verdicts["torch_relu_fallback"].stage == "static" and verdicts["torch_relu_fallback"].reward == -1
    assert "SIGSEGV" in verdicts["segfault"].reason and verdicts["segfault"].reward == -1
    assert all(not v.harness_error for v in verdicts.values())


def test_static_and_build_failures_are_judged_by_a_builder_ahead_of_the_evaluators(service, tmp_path):
    before = service.stats["prebuilt_failures"]
    bad = service.submit(TASK, files("torch_relu_fallback", tmp_path), QUICK).result(timeout=300)
    assert bad.stage == "static" and "torch.relu" in bad.reason
    assert service.stats["prebuilt_failures"] == before + 1


def test_the_same_request_twice_is_judged_once_per_submission_but_keyed_the_same(service, tmp_path):
    from cuda_agent.service import request_id

    f = files("honest_fused", tmp_path)
    assert request_id(TASK, f, QUICK) == request_id(TASK, dict(f), QUICK)
    assert request_id(TASK, f, QUICK) != request_id(TASK, f, TIMED)


def _block(ctx, seconds: float, log: str, name: str) -> str:
    time.sleep(seconds)
    with open(log, "a") as out:
        out.write(name + "\n")
    return name


def test_the_reward_goes_before_the_bench(tmp_path, test_doubles_importable):
    """One evaluator, kept busy: of the requests waiting, the RL reward's is served first."""
    log = str(tmp_path / "order.log")
    with EvalService(ServiceSettings(device="cpu", cpu_evaluators=1, build_workers=0, spares=0)) as svc:
        first = svc.call(_block, 1.5, log, "busy")
        time.sleep(0.5)  # the evaluator has taken it
        bench = [svc.call(_block, 0.0, log, f"bench{i}", priority=PRIORITY_BENCH) for i in range(3)]
        reward = svc.call(_block, 0.0, log, "reward", priority=PRIORITY_REWARD)
        for f in [first, *bench, reward]:
            f.result(timeout=60)
    assert Path(log).read_text().split() == ["busy", "reward", "bench0", "bench1", "bench2"]


def test_closing_without_waiting_abandons_what_runs_and_kills_the_evaluator(tmp_path, test_doubles_importable):
    """close(wait=False), as a process that is going away closes: the job running now (an hour
    long) ends at once with an error, the evaluation queued behind it as a harness error."""
    svc = EvalService(ServiceSettings(device="cpu", cpu_evaluators=1, build_workers=0, spares=0)).start()
    try:
        running = svc.call(_block, 3600.0, str(tmp_path / "never.log"), "never")
        queued = svc.submit(TASK, files("honest_fused", tmp_path), QUICK)
        deadline = time.monotonic() + 60
        while not any(slot.item is not None for slot in svc.fleet.slots):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        started = time.monotonic()
    finally:
        svc.close(wait=False)
    assert time.monotonic() - started < 20
    with pytest.raises(ServiceError, match="closed while this request ran"):
        running.result(timeout=5)
    verdict = queued.result(timeout=5)
    assert verdict.harness_error and verdict.reward == -1 and "closed" in verdict.reason
    assert not (tmp_path / "never.log").exists()


def _die(ctx) -> None:
    os._exit(3)  # the evaluator's own process dies (a fault below the harness)


@pytest.mark.long   # 22-50 s on 2 cores: `pytest -m long` (CI stays under 20 minutes)
def test_an_evaluator_killed_mid_run_is_replaced_and_its_request_run_once_more(tmp_path, test_doubles_importable):
    with EvalService(ServiceSettings(device="cpu", cpu_evaluators=1, build_workers=1, spares=1)) as svc:
        import ray

        slow = EvalConfig(device="cpu", timing=TimingPlan(min_runs=30, max_runs=60, budget_s=1.0))
        future = svc.submit(TASK, files("honest_fused", tmp_path), slow)
        deadline = time.monotonic() + 120
        while not any(slot.item is not None for slot in svc.fleet.slots):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(1.0)
        ray.kill(svc.fleet.slots[0].handle)  # killed while it evaluates
        verdict = future.result(timeout=600)
        assert verdict.correct and "retried" in verdict.flags and not verdict.harness_error
        assert svc.stats["restarts"] >= 1
        # a job that kills its evaluator every time: one retry, then an error (never a result)
        with pytest.raises(ServiceError, match="died twice"):
            svc.call(_die).result(timeout=300)
        after = svc.submit(TASK, files("honest_fused", tmp_path), QUICK).result(timeout=300)
        assert after.correct  # the replaced evaluator serves the next request


def test_a_local_service_starts_a_ray_of_its_own_even_where_a_gone_cluster_is_named(tmp_path, monkeypatch,
                                                                                   test_doubles_importable):
    """A bare ray.init() joins the cluster named in /tmp/ray/ray_current_cluster (the last `ray start` on
    the host) and waits on it when it is gone (found 2026-11-27: the service tests hung after a cluster
    benchmark's head was stopped). The service asks for a Ray of its own."""
    from ray._common.utils import get_ray_address_file

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    latest = Path(get_ray_address_file(None))
    before = latest.read_text() if latest.exists() else None
    latest.parent.mkdir(parents=True, exist_ok=True)
    latest.write_text("127.0.0.1:9")  # nothing listens there
    try:
        t0 = time.monotonic()
        with EvalService(ServiceSettings(device="cpu", cpu_evaluators=1, build_workers=0, spares=0)) as svc:
            assert svc.call(_block, 0.0, str(tmp_path / "log"), "served").result(timeout=120) == "served"
        assert time.monotonic() - t0 < 120
    finally:
        if before is None:
            latest.unlink(missing_ok=True)
        else:
            latest.write_text(before)


OWN_RAY = """
import json, os
from cuda_agent.service import EvalService, ServiceSettings
svc = EvalService(ServiceSettings(device="cpu", cpu_evaluators=1, build_workers=0, spares=0)).start()
private = svc._ray_tmp
sessions = [d for d in (private / "ray").glob("session_*") if not d.is_symlink() and (d / "sockets").is_dir()]
seen = {"mode": oct(os.stat(private).st_mode & 0o777), "sockets": len(sessions)}
svc.close()
seen["removed"] = not private.exists()
print(json.dumps(seen))
"""


def test_a_local_services_ray_keeps_its_sessions_where_only_we_can_enter():
    """Ray makes /tmp/ray and its sessions 0777 without the sticky bit, where a sandbox user could replace the
    sockets and runtime files of Ray's root workers: a service's own Ray keeps them in a 0700 folder, removed
    with it. (A process of its own: in this one a Ray may be up already, which a service joins.)"""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_TMPDIR")}
    done = subprocess.run([sys.executable, "-c", OWN_RAY], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"mode": "0o700", "sockets": 1, "removed": True}


def _unplaceable(index: int):
    """An evaluator that asks for a resource no node has: what a replacement asks for once its node, with
    the GPU it needs, is gone."""
    import ray

    from cuda_agent.service.actors import Evaluator

    return ray.remote(Evaluator).options(num_cpus=0, resources={"lost_node": 1}).remote("cpu", 0, None, None, None)


def test_a_lost_node_ends_in_retries_and_a_service_with_no_evaluator_left_says_so(tmp_path, test_doubles_importable):
    """Two evaluators, each replacement unplaceable (as after a node loss). One killed mid-job: its job runs
    again on the other, which serves what follows, and nothing waits on the replacement Ray cannot place.
    The other killed too: a request ends, after placement_timeout_s, with the reason, instead of waiting."""
    import ray

    log = str(tmp_path / "jobs.log")
    settings = ServiceSettings(device="cpu", cpu_evaluators=2, build_workers=0, spares=0, placement_timeout_s=3.0)
    with EvalService(settings) as svc:
        svc.fleet._new_evaluator = _unplaceable
        running = svc.call(_block, 3.0, log, "first")
        deadline = time.monotonic() + 60
        while not any(slot.item is not None for slot in svc.fleet.slots):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        victim = next(slot for slot in svc.fleet.slots if slot.item is not None)
        survivor = next(slot for slot in svc.fleet.slots if slot is not victim)
        ray.kill(victim.handle)  # its node is gone
        assert running.result(timeout=120) == "first"
        later = [svc.call(_block, 0.0, log, f"later{i}") for i in range(3)]
        assert [f.result(timeout=60) for f in later] == ["later0", "later1", "later2"]
        assert svc.stats["restarts"] == 1 and victim.starting is not None and survivor.starting is None
        ray.kill(survivor.handle)  # idle: found dead when the next request is sent to it
        deadline = time.monotonic() + 30
        while True:  # ray.kill returns before the actor is gone: a call sent now could still run there
            try:
                ray.get(survivor.handle.describe.remote(), timeout=30)
            except ray.exceptions.RayActorError:
                break
            assert time.monotonic() < deadline
            time.sleep(0.1)
        t0 = time.monotonic()
        with pytest.raises(ServiceError, match="no evaluator could be started"):
            svc.call(_block, 0.0, log, "never").result(timeout=60)
        assert 3.0 < time.monotonic() - t0 < 30
    assert Path(log).read_text().split() == ["first", "later0", "later1", "later2"]


_DRIVER = """
import sys, time
from pathlib import Path
from cuda_agent.harness import EvalConfig, read_solution
from cuda_agent.service import EvalService, ServiceSettings
from cuda_agent.tasks import load_task
task = load_task(Path({hacks!r}) / "tasks" / "sbr_small.py")
names = {names!r}
with EvalService(ServiceSettings(device="cpu", cpu_evaluators=1, build_workers=1, spares=1,
                                 journal=Path({journal!r}))) as svc:
    futures = [svc.submit(task, read_solution(Path({hacks!r}) / "cpu" / n, Path({tmp!r}) / n), EvalConfig(device="cpu", profile=False), id=n)
               for n in names]
    for f in futures:
        f.result()
    print("all done", flush=True)
"""


@pytest.mark.long   # 28 s on 2 cores: `pytest -m long` (CI stays under 20 minutes)
def test_a_killed_driver_resumes_from_the_journal_without_redoing_finished_evaluations(service, tmp_path):
    import ray

    names = ["honest_fused", "honest_tuple", "honest_shape_math", "honest_multi_kernel", "honest_out_param",
             "honest_slow"]
    journal = tmp_path / "journal.jsonl"
    script = _DRIVER.format(hacks=str(HACKS), names=names, journal=str(journal), tmp=str(tmp_path / "d"))
    env = dict(os.environ, RAY_ADDRESS=ray.get_runtime_context().gcs_address)
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while sum(r.get("event") == "verdict" for r in read_rows(journal)) < 2:
            assert proc.poll() is None, "the driver ended before it could be killed"
            assert time.monotonic() < deadline, "no verdicts within 300 s"
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    done = {r["id"] for r in read_rows(journal) if r.get("event") == "verdict"}
    assert 2 <= len(done) < len(names)
    requested = [r["id"] for r in read_rows(journal) if r.get("event") == "request"]
    assert sorted(set(requested)) == sorted(names)  # every request was written before it ran

    settings = ServiceSettings(device="cpu", cpu_evaluators=1, build_workers=1, spares=1, journal=journal)
    with EvalService(settings) as svc:
        verdicts = [svc.submit(load_task(HACKS / "tasks" / "sbr_small.py"),
                               files(n, tmp_path), QUICK, id=n).result(timeout=600) for n in names]
        assert svc.stats["from_journal"] == len(done)
        assert svc.stats["evaluations"] == len(names) - len(done)
    assert all(v.correct for v in verdicts)
    rows = read_rows(journal)
    per_id = {n: sum(r.get("event") == "verdict" and r["id"] == n for r in rows) for n in names}
    assert set(per_id.values()) == {1}, per_id  # exactly one verdict each, over both drivers



@pytest.mark.long   # 23 s on 2 cores: CI stays under 20 minutes (`pytest -m long` runs it)
def test_the_service_that_started_the_ray_closes_the_others_on_it_first(tmp_path):
    """Ray ends the whole process when a thread touches it after a shutdown: closing the service that
    started the Ray first closes a second service on the same Ray (its request in flight finishes, as
    at any close), and the process lives on without a Ray."""
    script = _RAY_OWNER.format(hacks=str(HACKS), tmp=str(tmp_path / "s"))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]


_RAY_OWNER = """
import time
import ray
from pathlib import Path
from cuda_agent.harness import EvalConfig, TimingPlan, read_solution
from cuda_agent.service import EvalService, ServiceError, ServiceSettings
from cuda_agent.tasks import load_task
hacks = Path({hacks!r})
task = load_task(hacks / "tasks" / "sbr_small.py")
slow = EvalConfig(device="cpu", timing=TimingPlan(min_runs=30, max_runs=60, budget_s=1.0))
owner = EvalService(ServiceSettings(device="cpu", cpu_evaluators=1, build_workers=0, spares=0)).start()
other = EvalService(ServiceSettings(device="cpu", cpu_evaluators=1, build_workers=0, spares=0)).start()
assert owner.owns_ray and not other.owns_ray
future = other.submit(task, read_solution(hacks / "cpu" / "honest_fused", Path({tmp!r})), slow)
while not any(s.item is not None for s in other.fleet.slots):
    time.sleep(0.05)
owner.close()
verdict = future.result(timeout=120)
assert verdict.correct and not verdict.harness_error, verdict
try:
    other.submit(task, {{"model_new.py": ""}}, slow)
    raise SystemExit("a closed service took a request")
except ServiceError as e:
    assert "start a new one" in str(e), e
other.close()   # closed already: nothing to do, and no Ray started
time.sleep(1.0)
assert not ray.is_initialized(), "a Ray was started by itself"
print("ok", flush=True)
"""



_RESTART = """
import dataclasses
from pathlib import Path
from cuda_agent.harness import EvalConfig, TimingPlan, read_solution
from cuda_agent.service import EvalService, ServiceSettings
from cuda_agent.tasks import load_task
hacks = Path({hacks!r})
task = load_task(hacks / "tasks" / "sbr_small.py")
task = dataclasses.replace(task, code=task.code + "# {unique}\\n")   # baselines never timed before
timed = EvalConfig(device="cpu", timing=TimingPlan(min_runs=3, max_runs=5, budget_s=0.02, warmup_s=0.0, min_warmup=1))
flags = []
for run in range(2):   # two services one after the other: a restart
    with EvalService(ServiceSettings(device="cpu", cpu_evaluators=1, build_workers=0, spares=0)) as svc:
        verdict = svc.submit(task, read_solution(hacks / "cpu" / "honest_fused", Path({tmp!r}) / str(run)), timed).result()
        assert verdict.correct and verdict.eager is not None, verdict
        flags.append("baseline_cached" in verdict.flags)
print(flags, flush=True)
"""


@pytest.mark.long
def test_the_baseline_cache_survives_a_restart_of_the_service(tmp_path):
    """A task whose baselines were never timed: the first service times them, the next one (a
    restart) finds them in the cache."""
    script = _RESTART.format(hacks=str(HACKS), tmp=str(tmp_path / "s"), unique=tmp_path.name + str(time.time()))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "[False, True]", out.stdout


def test_builders_wait_while_the_device_times_unless_quiet_builds_is_off(tmp_path):
    """A builder (called here in-process, as its Ray actor would) compiles only once timing on its
    device ends; ServiceSettings(quiet_builds=False) gives it builders that do not wait."""
    from cuda_agent.devices import lock_name
    from cuda_agent.devices import Backend
    from cuda_agent.measure import device_lock
    from cuda_agent.service.actors import Builder

    broken = {**files("honest_fused", tmp_path), "kernels/sbr.cpp": "int sbr_launch( {\n"}  # fails at once
    held, done = threading.Event(), threading.Event()

    def timer() -> None:
        with device_lock(lock_name("cpu")):
            held.set()
            done.wait(3)

    waited = {}
    for quiet in (False, True):
        done.clear()
        held.clear()
        t = threading.Thread(target=timer)
        t.start()
        held.wait(10)
        verdict = Builder(None, quiet).build(TASK, broken, QUICK, Backend("cpu"))
        done.set()
        t.join(10)
        assert verdict is not None and verdict.stage == "build" and verdict.build is not None, verdict
        waited[quiet] = verdict.build.waited_s
    assert waited[False] < 0.05 and waited[True] >= 2.0, waited


def _evaluator_env(out) -> None:
    from cuda_agent.devices import TIMING_CORES_ENV
    from cuda_agent.service.actors import Evaluator

    cores = sorted(os.sched_getaffinity(0))
    evaluator = Evaluator("cpu", 0, [cores[-1]], [cores[0]])
    try:
        out.put((os.environ.get(TIMING_CORES_ENV), str(cores[-1])))
    finally:
        evaluator.stop()


def test_an_evaluator_with_cores_of_its_own_times_baselines_on_them(in_fork):
    """Baseline jobs run in the evaluator's process, which lives on the background cores: its
    foreground cores (its solution child's) are named as its timing cores, for harness.as_timer
    and for the reference workers it starts."""
    named, expected = in_fork(_evaluator_env)
    assert named == expected


def test_rays_token_auth_notice_is_not_printed_on_every_command():
    """Ray 2.60 warns on every local start that it turned token authentication on (issue 26): the service
    silences that logger, and only it; the authentication stays on."""
    import inspect
    import logging

    from ray._private.authentication import authentication_token_setup as auth

    from cuda_agent.service.service import _quiet_token_auth_notice

    said = inspect.getsource(auth._warn_token_auth_enabled)
    assert "logger.warning(" in said and "=disabled to opt out" in said     # where Ray 2.60 says it
    _quiet_token_auth_notice()
    assert not auth.logger.isEnabledFor(logging.WARNING) and auth.logger.isEnabledFor(logging.ERROR)
