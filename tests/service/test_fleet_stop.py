"""Fleet.stop: the evaluators are asked to stop all at once and waited for together, not one after another
(each closes its reference workers and spares; three in a row outlasted a device call's limit, 2026-11-29)."""

from __future__ import annotations

import ray

from cuda_agent.service import ServiceSettings
from cuda_agent.service.fleet import STOP_WAIT_S, Fleet, Slot


class _Method:
    def __init__(self, log: list, name: str):
        self.log, self.name = log, name

    def remote(self):
        self.log.append(("asked", self.name))
        return f"ref-{self.name}"


class _Handle:
    def __init__(self, log: list, name: str):
        self.stop = _Method(log, name)


def _fleet(monkeypatch, log: list) -> Fleet:
    fleet = Fleet(ServiceSettings(device="cpu"), "cpu", {})
    fleet.slots = [Slot(i, _Handle(log, f"e{i}")) for i in range(3)]
    fleet.slots[2].starting = "describe-ref"   # one not placed yet: it never answers, so it is not waited for
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "kill", lambda handle: log.append(("killed", handle.stop.name)))
    return fleet


def test_every_evaluator_is_asked_before_any_is_waited_for_and_all_are_killed(monkeypatch):
    log: list = []
    fleet = _fleet(monkeypatch, log)

    def wait(refs, num_returns, timeout):
        log.append(("waited", tuple(refs), num_returns, timeout))
        return refs, []
    monkeypatch.setattr(ray, "wait", wait)
    fleet.stop(wait=True)
    assert log == [("asked", "e0"), ("asked", "e1"), ("waited", ("ref-e0", "ref-e1"), 2, STOP_WAIT_S),
                   ("killed", "e0"), ("killed", "e1"), ("killed", "e2")]
    assert fleet.slots == [] and fleet.builders == []


def test_a_wait_that_fails_still_kills_every_evaluator_and_no_wait_asks_none(monkeypatch):
    log: list = []
    fleet = _fleet(monkeypatch, log)

    def wait(refs, num_returns, timeout):
        raise ray.exceptions.RaySystemError("the Ray went away")
    monkeypatch.setattr(ray, "wait", wait)
    fleet.stop(wait=True)
    assert [e for e in log if e[0] == "killed"] == [("killed", "e0"), ("killed", "e1"), ("killed", "e2")]
    log.clear()
    fleet = _fleet(monkeypatch, log)
    fleet.stop(wait=False)
    assert log == [("killed", "e0"), ("killed", "e1"), ("killed", "e2")]
