"""Host-wide core claims (service/cores.py): services sharing a host time on different cores. On
2026-11-27 three RL runs' services each pinned evaluator i onto the same two cores of a 64-core
host (34 s for a 1-2 s evaluation); these tests stop that coming back."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from cuda_agent.service.cores import CLAIMS_ENV, claim_cores, claims_folder
from cuda_agent.service.fleet import Fleet
from cuda_agent.service.settings import ServiceSettings

CORES = range(8)   # a fake host of 8 cores: pairs [6,7], [4,5], [2,3] to claim; [0,1] never


@pytest.fixture
def folder(tmp_path, monkeypatch):
    path = tmp_path / "claims"
    monkeypatch.setenv(CLAIMS_ENV, str(path))   # apart from any real service on this host
    return path


def test_two_services_on_one_host_get_disjoint_pairs(folder):
    with claim_cores(2, CORES) as first, claim_cores(1, CORES) as second:
        assert first.foreground == [[6, 7], [4, 5]] and first.background == [0, 1, 2, 3]
        assert second.foreground == [[2, 3]] and second.background == [0, 1, 4, 5, 6, 7]
        assert second.busy == [6, 7, 4, 5]


def test_a_released_claim_frees_its_cores_for_the_next(folder):
    first = claim_cores(2, CORES)
    first.close()
    with claim_cores(3, CORES) as next_one:
        assert next_one.foreground == [[6, 7], [4, 5], [2, 3]]


def test_a_killed_holder_frees_its_cores(folder):
    """The driver holding a claim dies without closing it (SIGKILL): the kernel drops its locks."""
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent("""
            import sys, time
            from cuda_agent.service.cores import claim_cores
            claim = claim_cores(1, range(8))
            print(claim.foreground, flush=True)
            time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert holder.stdout.readline().strip() == "[[6, 7]]"
        with claim_cores(1, CORES) as beside:
            assert beside.foreground == [[4, 5]]
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        with claim_cores(1, CORES) as after:
            assert after.foreground == [[6, 7]]
    finally:
        holder.kill()
        holder.wait(10)


def test_too_few_free_pairs_pins_no_evaluator_and_says_why(folder):
    """All or nothing: a service's evaluators time under one condition, whichever the scheduler picks."""
    with claim_cores(2, CORES):
        short = claim_cores(2, CORES)
        assert short.foreground is None and short.background is None and not short.pinned
        assert short.reason == "taken" and "only 1 of the 2" in short.note and "4-7" in short.note
        with claim_cores(1, CORES) as later:   # the pair it tried, [2,3], was not kept
            assert later.foreground == [[2, 3]]


def test_a_host_too_small_is_not_pinned_and_takes_no_lock(folder):
    claim = claim_cores(3, range(6))
    assert not claim.pinned and claim.reason == "few_cores" and not folder.exists()


def test_an_unusable_folder_leaves_the_service_unpinned_and_says_what_to_do(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv(CLAIMS_ENV, str(tmp_path / "file" / "claims"))
    claim = claim_cores(1, CORES)
    assert claim.reason == "no_folder" and CLAIMS_ENV in claim.note


def test_the_claims_folder_is_host_wide_not_under_the_home(monkeypatch):
    monkeypatch.delenv(CLAIMS_ENV, raising=False)
    monkeypatch.setenv("CUDA_AGENT_HOME", "/somewhere/else")
    assert claims_folder().name == "cuda_agent_cores" and "/somewhere/else" not in str(claims_folder())


def test_two_fleets_on_one_host_plan_disjoint_cores_and_give_them_back(folder, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(CORES))
    fleets = [Fleet(ServiceSettings(device="cpu"), "cpu", {}) for _ in range(2)]
    plans = [fleet.core_plan(1) for fleet in fleets]
    assert plans[0].foreground == [[6, 7]] and plans[1].foreground == [[4, 5]]
    fleets[0].cores = plans[0]
    fleets[0].stop(wait=False)   # no Ray here: nothing to stop but the claim
    with fleets[0].core_plan(1) as again, plans[1]:
        assert again.foreground == [[6, 7]]
