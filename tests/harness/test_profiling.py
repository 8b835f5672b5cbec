"""The profile stage (harness/profiling.py) on the CPU backend: the solution and its baselines are
timed paired in one run, the baselines' windows with the solution's processes stopped; the
solution's child is sent seeds and nothing of the figures; the verdict carries how every figure
was taken (method, rounds, windows, standard errors, what ended the run) and the reward is the
paired speed-ups'. One evaluation, watched, serves every test here."""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Callable

import pytest

from cuda_agent.harness import EvalConfig, TimingPlan, evaluate
from cuda_agent.harness.result import EvalResult
from cuda_agent.tasks import load_task
from cuda_agent.measure import call_seed

HACKS = Path(__file__).resolve().parent.parent / "hacks"
PLAN = TimingPlan(min_runs=5, max_runs=40, budget_s=0.3, warmup_s=0.0, min_warmup=2, min_rounds=4)
RECHECKS: list[list[bool]] = []   # the watched evaluation's recheck requests: the lock's holds (shared?) as each was made

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def watched(tmp_path_factory):
    """One evaluation of the honest fused kernel with every request to the two workers recorded,
    each with whether the solution's user was stopped (sandbox.Freezer) when it was made."""
    from cuda_agent.harness.session import Session
    from cuda_agent.measure import lock
    from cuda_agent.sandbox import Freezer

    mp = pytest.MonkeyPatch()
    log: list[tuple[str, dict, tuple]] = []
    stopped: list[tuple] = []
    frozen = Freezer.frozen

    def recording_frozen(self):
        uids = tuple(self.uids)

        class Block:
            def __enter__(self_):
                self_.inner = frozen(self)
                stopped.append(uids)
                return self_.inner.__enter__()

            def __exit__(self_, *exc):
                stopped.pop()
                return self_.inner.__exit__(*exc)
        return Block()

    ask_ref, ask_child = Session.ask_reference, Session.ask_child

    def ref(self, message, *a, **kw):
        log.append(("reference", dict(message), tuple(stopped)))
        return ask_ref(self, message, *a, **kw)

    def child(self, message, stage):
        log.append(("child", dict(message or {}), tuple(stopped)))
        if (message or {}).get("op") == "recheck":   # the device lock's holds of this thread as it is asked
            RECHECKS.append([hold.shared for hold in lock._holds().values()])
        return ask_child(self, message, stage)

    mp.setattr(Freezer, "frozen", recording_frozen)
    mp.setattr(Session, "ask_reference", ref)
    mp.setattr(Session, "ask_child", child)
    solution = tmp_path_factory.mktemp("profiling") / "solution"
    shutil.copytree(HACKS / "cpu" / "honest_fused", solution, ignore=shutil.ignore_patterns("expect.json"))
    try:
        result = evaluate(load_task(HACKS / "tasks" / "sbr_small.py"), solution,
                          EvalConfig(device="cpu", timing=PLAN, use_baseline_cache=False))
    finally:
        mp.undo()
    assert result.correct and result.paired is not None, result.reason
    return result, log


def _timing(log: list) -> list:
    """The requests of the profile stage: from the baselines' time_start to the last time_end."""
    first = next(i for i, (who, m, _) in enumerate(log) if who == "reference" and m.get("op") == "time_start")
    last = max(i for i, (_, m, _) in enumerate(log) if m.get("op") == "time_end")
    return log[first:last + 1]


def test_the_baselines_are_called_only_while_the_solutions_processes_are_stopped(watched):
    import os

    result, log = watched
    calls = [(who, m, stopped) for who, m, stopped in _timing(log) if m.get("op") == "call"]
    ref_calls = [stopped for who, _, stopped in calls if who == "reference"]
    child_calls = [stopped for who, _, stopped in calls if who == "child"]
    assert ref_calls and child_calls
    assert all(stopped == () for stopped in child_calls)
    if os.geteuid() == 0:   # sandbox users exist: the child's own is the one stopped
        assert all(len(s) == 1 and len(s[0]) == 1 and s[0][0] > 0 for s in ref_calls)
    else:
        assert all(len(s) == 1 for s in ref_calls)
    assert {m["which"] for who, m, _ in calls if who == "reference"} == {"eager", "compile"}


def test_each_block_begins_with_the_wait_for_the_gpu_alone_while_the_solution_is_stopped(watched):
    """measure/alone.py: before a block's baseline windows the reference worker waits until no other context's
    work is left on the GPU (on the CPU it answers at once); asked once a block, with the solution stopped."""
    result, log = watched
    timing = _timing(log)
    asks = [i for i, (who, m, _) in enumerate(timing) if who == "reference" and m.get("op") == "gpu_alone"]
    assert asks and all(timing[i][2] != () for i in asks)   # asked inside a block
    for i in asks:   # and before any baseline call of that block
        block = [m.get("op") for who, m, stopped in timing[i + 1:] if stopped != ()]
        assert block and block[0] == "call", block[:3]
    assert len(asks) == result.details["gpu_alone"]["blocks"] >= result.paired.rounds
    assert result.details["gpu_alone"]["max_waited_ms"] == 0.0 and "waited_for_gpu" not in result.flags


def test_the_solution_is_sent_seeds_and_nothing_of_the_figures(watched):
    """The solution's process computes no statistic and sees none: in the profile stage it is sent
    its plan once, a seed per call, a tag per check, and the end."""
    _, log = watched
    sent = [m for who, m, _ in _timing(log) if who == "child"]
    assert {m["op"] for m in sent} == {"time_start", "call", "check", "time_end"}
    for m in sent:
        allowed = {"time_start": {"op", "plan", "route"}, "call": {"op", "seed"}, "check": {"op", "tag"},
                   "time_end": {"op"}}[m["op"]]
        assert set(m) == allowed, m
    seeds = [m["seed"] for m in sent if m["op"] == "call"]
    assert len(set(seeds)) == len(seeds) or len(set(seeds)) > 0.5 * len(seeds)


def test_the_reference_times_the_same_inputs_as_the_solution_round_by_round(watched):
    _, log = watched
    calls = [(who, m) for who, m, _ in _timing(log) if m.get("op") == "call"]
    ours = {m["seed"] for who, m in calls if who == "child"}
    eager = {m["seed"] for who, m in calls if who == "reference" and m["which"] == "eager"}
    assert eager and eager <= ours


def test_the_verdict_says_how_each_figure_was_taken_and_the_reward_is_the_paired_one(watched):
    result, _ = watched
    p = result.paired
    assert p.method == "per_call" and p.stopped in ("target", "budget", "max_runs", "wall_limit")
    assert p.met == (p.stopped == "target") and p.target_se == PLAN.target_se
    assert p.rounds >= 2 and p.window >= 1 and p.warmup_rounds >= PLAN.min_warmup
    assert set(p.ratios) == {"eager", "compile"} and all(math.isfinite(r.se) for r in p.ratios.values())
    assert (result.speedup_vs_eager, result.speedup_vs_compile) == (p.ratios["eager"].value, p.ratios["compile"].value)
    for stats in (result.eager, result.compile, result.solution):
        assert stats.windows == p.rounds and stats.runs >= p.rounds and stats.window_spread >= 0
    assert "paired (per call)" in result.render("eval") and f"{p.rounds} rounds" in result.render("eval")


def test_the_paired_record_survives_a_journal_line(watched):
    result, _ = watched
    back = EvalResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert back.paired.rounds == result.paired.rounds and back.paired.stopped == result.paired.stopped
    assert back.paired.ratios["eager"].value == pytest.approx(result.paired.ratios["eager"].value, rel=1e-4)
    assert back.eager.windows == result.eager.windows


class _Workers:
    """Stands in for a Session in the graph negotiation: each worker's reply by op, and what was sent."""

    route = "ipc"   # a replay's outputs checked in one request (by files: FILES_BATCH calls a request)

    def __init__(self, reference: dict, child: dict, right: Callable[[str], bool] = lambda tag: True):
        self.replies = {"reference": {"reference": {"ok": True}, **reference},
                        "child": {"call": {"ok": True, "t": [1.0, 1.0, 0.0]}, "check": {"ok": True, "meta": {}},
                                  "graph_end": {"ok": True}, **child}}
        self.sent: list[tuple[str, dict]] = []
        self.right = right   # is the output checked under this tag the reference's?
        self.tags = 0

    def ask_reference(self, message: dict) -> dict:
        self.sent.append(("reference", message))
        return self.replies["reference"][message["op"]]

    def ask_child(self, message: dict, stage: str) -> dict:
        self.sent.append(("child", message))
        if message["op"] == "check" and "tags" in message:   # a replay's calls in one request
            return {"ok": True, "metas": [{} for _ in message["tags"]]}
        return self.replies["child"][message["op"]]

    def next_tag(self) -> str:
        self.tags += 1
        return f"t{self.tags}"

    def check_output(self, tag: str, meta) -> dict:
        return {"ok": True} if self.right(tag) else {"ok": False, "reason": "output differs from the reference"}

    def check_outputs(self, items: list[dict]) -> list[dict]:
        self.sent.append(("reference", {"op": "compare_all", "items": items}))
        verdicts = []
        for item in items:
            verdicts.append(self.check_output(item["tag"], item["meta"]))
            if not verdicts[-1]["ok"]:
                break
        return verdicts

    def ops(self, who: str) -> list[str]:
        return [m["op"] for w, m in self.sent if w == who]


def _verdict() -> EvalResult:
    return EvalResult(task="t", reward=1.0, correct=True, stage="profile", reason="correct")


def test_a_solution_whose_process_is_gone_before_its_timing_is_not_timed(monkeypatch, tmp_path):
    """The freezer stops the users of the child's pid: were the child gone while something of the solution's
    answered in its place, it would stop no one (2026-11-28 review). The evaluation ends before any window."""
    from cuda_agent.harness import profiling

    monkeypatch.setattr(profiling, "_uid_of", lambda pid: None)
    solution = tmp_path / "solution"
    shutil.copytree(HACKS / "cpu" / "honest_fused", solution, ignore=shutil.ignore_patterns("expect.json"))
    r = evaluate(load_task(HACKS / "tasks" / "sbr_small.py"), solution,
                 EvalConfig(device="cpu", timing=PLAN, use_baseline_cache=False))
    assert r.reward == -1 and r.stage == "profile" and "exited before its timing" in r.reason, r.reason
    assert r.fault is None


def test_graphs_where_the_reference_and_the_solution_can_be_captured():
    from cuda_agent.harness.replays import capture as _capture

    w = _Workers({"graph": {"ok": True, "captured": True, "calls": 16}},
                 {"graph": {"ok": True, "captured": True, "calls": 16}})
    r = _verdict()
    assert _capture(w, r) == (16, 16) and not r.flags and "graphs of 16 calls" in r.details["graph"]
    (_, asked_ref), (_, asked_child) = w.sent[:2]
    assert asked_child == {"op": "graph", "seed": asked_ref["seed"], "calls": 16}   # the reference's count, its seed
    # one replay on new inputs, every one of its 16 calls' outputs checked before the graphs are timed: handed over
    # in one request, compared in one, each on its call's seed
    assert w.ops("child")[1:] == ["call", "check"] and w.ops("reference")[1:] == ["compare_all"]
    (_, call), (_, check) = [m for m in w.sent if m[0] == "child"][1:]
    items = [m for who, m in w.sent if m["op"] == "compare_all"][0]["items"]
    assert check["tags"] == [item["tag"] for item in items] and check["indices"] == list(range(16))
    assert [item["seed"] for item in items] == [call_seed(call["seed"], j) for j in range(16)]


def test_by_files_a_replays_outputs_are_checked_a_few_calls_a_request():
    """By files the outputs of a request's calls lie in the exchange folder (tmpfs) together: FILES_BATCH calls a
    request, the first wrong one ending the check."""
    from cuda_agent.harness.replays import FILES_BATCH, wrong_output as _wrong_output

    w = _Workers({}, {}, right=lambda tag: tag != "t1_11")
    w.route = "files"
    assert _wrong_output(w, "t1", 5, 16) == (11, "output differs from the reference")
    checks = [m for who, m in w.sent if who == "child" and m["op"] == "check"]
    assert [c["indices"] for c in checks] == [list(range(FILES_BATCH)), list(range(FILES_BATCH, 16))]


def test_a_solution_whose_replays_do_not_compute_is_timed_per_call_and_told_why():
    """Kernels launched on the legacy default stream run during capture and are not in the graph
    (an H200, 2026-11-27): the replay's outputs are stale. Not a -1 for an honest solution: its calls
    are timed one at a time beside the baselines' graphs, and its first call per call is checked."""
    from cuda_agent.harness.replays import capture as _capture

    w = _Workers({"graph": {"ok": True, "captured": True, "calls": 4}, "graph_end": {"ok": True}},
                 {"graph": {"ok": True, "captured": True, "calls": 4}},
                 right=lambda tag: tag != "t1_2")   # call 3 of the checked replay is stale
    r = _verdict()
    assert _capture(w, r) == (4, 0)
    assert r.flags == ["solution_not_captured"] and "replays do not compute" in r.details["graph"]
    assert "call 3 of a replay" in r.details["graph"] and "legacy default stream" in r.details["graph"]
    # the child's graphs dropped, the baselines' kept: their method stays theirs
    assert ("child", {"op": "graph_end"}) in w.sent and "graph_end" not in w.ops("reference")
    assert w.ops("child")[-2:] == ["call", "check"]   # the per-call check after the graphs were dropped


def test_a_process_a_failed_capture_left_unable_to_compute_is_refused_with_the_reason():
    from cuda_agent.harness.replays import capture as _capture
    from cuda_agent.harness.session import Stop

    w = _Workers({"graph": {"ok": True, "captured": True, "calls": 4}, "graph_end": {"ok": True}},
                 {"graph": {"ok": True, "captured": False, "reason": "RuntimeError: capture unjoined"}},
                 right=lambda tag: False)
    with pytest.raises(Stop, match="after its CUDA graph capture failed.*side stream"):
        _capture(w, _verdict())


def test_a_solution_that_cannot_be_captured_where_the_reference_could_is_timed_per_call_and_told_why():
    """Not a crash: the solution's calls are timed one at a time, the baselines keep their graphs (timed
    per call as well, torch.compile's host work was charged to it: a solution that refused capture read
    1.50x faster than it with the same work, 2x H200, 2026-11-28), and the verdict carries a flag and the
    reason capture gave."""
    from cuda_agent.harness.replays import capture as _capture

    why = "RuntimeError: operation not permitted when stream is capturing"
    w = _Workers({"graph": {"ok": True, "captured": True, "calls": 8}, "graph_end": {"ok": True}},
                 {"graph": {"ok": True, "captured": False, "reason": why}})
    r = _verdict()
    assert _capture(w, r) == (8, 0)
    assert r.flags == ["solution_not_captured"] and why in r.details["graph"] and "current stream" in r.details["graph"]
    assert "graph_end" not in w.ops("reference") and "baselines timed by replays of CUDA graphs of 8" in r.details["graph"]
    assert w.ops("child")[-2:] == ["call", "check"]   # a failed capture may have broken it: one call checked


def test_a_baselines_replay_against_a_solution_timed_per_call_names_its_extra_input_sets():
    """GRAPH_BASELINES: the reference's replay drew 8 input sets where the solution's call draws one; 7 of its 8 sets'
    drawing time is `extra_ms` (left out of the watch's overhead). Not in the other methods, and a reply without the
    time is a harness fault, not a figure taken on trust."""
    from cuda_agent.harness.profiling import _baseline_times
    from cuda_agent.harness.session import Stop

    reply = {"ok": True, "t": [1.0, 0.01, 0.0], "prep_ms": 0.8}
    assert _baseline_times(reply, 8, 0).extra_ms == pytest.approx(0.7)
    assert _baseline_times(reply, 8, 8).extra_ms == 0.0 and _baseline_times(reply, 0, 0).extra_ms == 0.0
    for bad in ({"ok": True, "t": [1.0, 0.01, 0.0]}, {**reply, "prep_ms": -1.0}, {**reply, "prep_ms": True}):
        with pytest.raises(Stop, match="input-drawing time") as e:
            _baseline_times(bad, 8, 0)
        assert e.value.fault == "harness"


def _scripted_run(solution_ms: float, eager_ms: float, compile_ms: float, overhead_ms: float = 0.5):
    """A paired run of scripted sides on a clock they move (each request: its figure plus `overhead_ms`)."""
    from cuda_agent.measure import CallTimes, Side, drive_paired

    now = [0]

    def side(name: str, ms: float) -> Side:
        def call(seed: int) -> CallTimes:
            now[0] += int((ms + overhead_ms) * 1e6)
            return CallTimes(ms, 0.0, 0.0)
        return Side(name, call)
    return drive_paired(side("solution", solution_ms), [side("eager", eager_ms), side("compile", compile_ms)], PLAN,
                        clock=lambda: now[0])


@pytest.mark.parametrize("calls,ours,method,vs_eager,vs_compile", [
    (8, 0, "graph_baselines", 2.0, 0.8),   # the baselines' replays of 8 calls against the solution's single calls
    (8, 8, "graph", 2.0, 0.8),             # every side a replay of 8 calls: the solution's figure too
    (0, 0, "per_call", 2.0, 0.8)])
def test_each_sides_figures_are_per_call_whatever_its_method(monkeypatch, calls, ours, method, vs_eager, vs_compile):
    """What `_watched_run` makes of a run: each side's median and the speed-ups per call, divided by the calls its
    timed call stands for (2 ms an eager replay of 8 calls is 0.25 ms a call), and the method the verdict names."""
    from cuda_agent.harness import profiling

    per_solution = ours or 1
    run = _scripted_run(0.125 * per_solution, 2.0 if calls else 0.25, 0.8 if calls else 0.1)
    monkeypatch.setattr(profiling, "_paired_run", lambda session, result, cuda, device: (run, (calls, ours)))
    session = type("S", (), {"config": EvalConfig(device="cpu", timing=PLAN)})()
    r = _verdict()
    paired = profiling._watched_run(session, r, cuda=False, device=None)
    assert paired.method == method and paired.graph_calls == calls
    spent = r.details["timing_split_ms"]   # every call of the run counted, its own time apart from the rest
    assert {side: spent[side]["calls"] for side in spent} == {s: len(run.calls(s)) + sum(map(len, run.warmup[s]))
                                                              for s in run.windows}
    assert spent["solution"]["over"] == pytest.approx(0.5 * spent["solution"]["calls"], rel=1e-6)
    assert paired.ratios["eager"].value == pytest.approx(vs_eager, rel=1e-6)
    assert paired.ratios["compile"].value == pytest.approx(vs_compile, rel=1e-6)
    assert r.solution.median_ms == pytest.approx(0.125) and r.eager.median_ms == pytest.approx(0.25)
    assert r.compile.median_ms == pytest.approx(0.1) and r.details["watch"]["ok"]


def test_a_reference_that_cannot_be_captured_times_every_side_per_call():
    from cuda_agent.harness.replays import capture as _capture

    w = _Workers({"graph": {"ok": True, "captured": False, "reason": "NotCapturable: a host sync"}}, {})
    r = _verdict()
    assert _capture(w, r) == (0, 0) and not r.flags and "reference cannot be captured" in r.details["graph"]
    assert [who for who, _ in w.sent] == ["reference"]   # the solution is never asked


def test_on_the_cpu_nothing_is_captured():
    import torch

    from cuda_agent.harness.workers.calls import CallServer
    from cuda_agent.measure import module_from_source

    task = module_from_source((HACKS / "tasks" / "sbr_small.py").read_text(), "task", "task.py")
    server = CallServer({"eager": torch.relu}, task, torch.device("cpu"), PLAN)
    try:
        assert server.capture(1, None) == {"ok": True, "captured": False, "reason": "CUDA graphs need a CUDA device"}
        reply = server.call(7, "eager")
        assert reply["ok"] and server.output(None) is server.last and reply["prep_ms"] >= 0   # its inputs' drawing
    finally:
        server.close()


def test_a_replays_input_drawing_time_covers_every_set_it_loads():
    """The reference's `prep_ms` for a replay: drawing and loading each of its graph's input sets, before the timed
    replay and outside its figure (what the watch leaves out beyond one set, profiling._baseline_times). A stand-in
    graph on the CPU whose every load takes 5 ms."""
    import time as clock

    import torch

    from cuda_agent.harness.workers.calls import CallServer
    from cuda_agent.measure import module_from_source

    class SlowLoads:
        calls, outputs = 4, None
        done: list[str] = []

        def load(self, j, inputs):
            clock.sleep(0.005)
            self.done.append("load")

        def replay(self):
            self.done.append("replay")

    task = module_from_source((HACKS / "tasks" / "sbr_small.py").read_text(), "task", "task.py")
    server = CallServer({"eager": torch.relu}, task, torch.device("cpu"), PLAN)
    try:
        graph = server.graphs["eager"] = SlowLoads()
        reply = server.call(7, "eager")
        assert reply["ok"] and reply["prep_ms"] >= 4 * 5.0
        # every load before the timed replay, so in no figure of it (the order asserted, no speed of this machine)
        assert graph.done[:5] == ["load"] * 4 + ["replay"]
    finally:
        server.graphs.clear()
        server.close()


@pytest.mark.cuda
def test_on_the_device_every_side_is_timed_by_graph_replays():
    """The demo's fused kernel and its baselines can all be captured: every side is timed by
    replays of graphs of the same calls, and the verdict says so (the figures per call)."""
    r = evaluate(load_task("scale_bias_relu"), HACKS / "cuda" / "honest_fused",
                 EvalConfig(device="cuda", timing=TimingPlan(budget_s=1.0)))
    assert r.reward >= 2, r.reason
    p = r.paired
    assert p.method == "graph" and p.graph_calls >= 1 and f"graphs of {p.graph_calls} calls" in r.details["graph"]
    assert "solution_not_captured" not in r.flags
    assert "gpu_contexts_unchecked" not in r.flags   # NVML named the child under its pid: orphan contexts are watched
    assert 0 < r.solution.median_ms < r.eager.median_ms
    assert f"replays of a graph of {p.graph_calls} calls" in r.render("profile")


@pytest.mark.parametrize("holder", [True, False])
def test_a_gpu_never_free_is_the_solutions_fault_only_where_its_own_process_holds_it(monkeypatch, holder):
    """A block whose wait for the GPU alone ends without it (measure/alone.py) takes no timing. Where a process of
    the solution's user other than its child holds the GPU (a daemon whose queued kernels run on through the stop),
    the verdict names it, as the block's end would have; otherwise the work is no one's that the harness can tell:
    a harness fault."""
    from cuda_agent.harness.session import Session
    from cuda_agent.sandbox import Freezer, FrozenBlock

    ask = Session.ask_reference

    def never_alone(self, message, *a, **kw):
        if message.get("op") == "gpu_alone":
            return {"alone": False, "waited_ms": 2000.0, "slowest_ms": 2.4}
        return ask(self, message, *a, **kw)

    monkeypatch.setattr(Session, "ask_reference", never_alone)
    monkeypatch.setattr(Freezer, "gpu_look", lambda self: FrozenBlock(stopped=True, gpu_holders=(4242,) if holder else ()))
    r = evaluate(load_task(HACKS / "tasks" / "sbr_small.py"), HACKS / "cpu" / "honest_fused",
                 EvalConfig(device="cpu", timing=PLAN, use_baseline_cache=False))
    assert r.reward == -1 and r.stage == "profile" and r.paired is None
    if holder:
        assert r.fault is None and "(pid 4242) held the GPU while the baselines were timed" in r.reason, r.reason
    else:
        assert r.fault == "harness" and "not free of other work" in r.reason, r.reason


def test_an_honest_solution_queued_behind_another_timing_longer_than_its_timeout_keeps_its_time(monkeypatch):
    """Waits for the device behind other evaluations are off the solution's clock (Session.off_clock): under -n 8 on
    one H200 (2026-11-28) an honest kernel's evaluation spent its timeout queueing, its last request was given the
    1 s floor, and it was refused as timed out. Every request here must be given more than that."""
    import threading
    import time

    from cuda_agent.devices import lock_name
    from cuda_agent.harness.session import Session
    from cuda_agent.measure import device_lock

    given: list[float] = []
    left, init = Session._left, Session.__init__
    monkeypatch.setattr(Session, "_left", lambda self: given.append(left(self)) or given[-1])
    made = threading.Event()   # the session is made just before its wait for the lock: its clock starts there

    def making(self, *a, **kw):
        init(self, *a, **kw)
        made.set()

    monkeypatch.setattr(Session, "__init__", making)
    taken = threading.Event()

    def another_timing():   # holds the lock alone until the evaluation has waited 17 s (its timeout: 15 s)
        with device_lock(lock_name("cpu")):
            taken.set()
            made.wait(600)
            time.sleep(17.0)

    holder = threading.Thread(target=another_timing)
    holder.start()
    taken.wait(10)
    try:
        r = evaluate(load_task(HACKS / "tasks" / "sbr_small.py"), HACKS / "cpu" / "honest_fused",
                     EvalConfig(device="cpu", timing=PLAN, use_baseline_cache=False, timeout_s=15.0))
    finally:
        made.set()
        holder.join()
    assert r.stage_seconds["wait"] > 15.0, r.stage_seconds
    assert r.correct and r.reward >= 1, r.reason
    assert given and min(given) > 1.0, given   # 1.0: the floor, all the queued deadline would leave (no speed asked)


def test_time_that_is_not_the_solutions_is_added_to_its_deadline():
    """Waits for the device behind other evaluations and the reference's compile: off the solution's clock."""
    import time

    from cuda_agent.harness.session import Session

    s = Session(None, None, EvalConfig(device="cpu"), {}, deadline=time.monotonic() + 5)
    before = s.deadline
    with s.off_clock():
        time.sleep(0.05)
    assert s.deadline - before >= 0.05
    with pytest.raises(RuntimeError), s.off_clock():
        time.sleep(0.02)
        raise RuntimeError("the wait failed")
    assert s.deadline - before >= 0.07


def test_the_baselines_are_compiled_while_the_solutions_processes_are_stopped(watched):
    """Inductor's autotuning picks the compiled baseline's kernels by timing them: nothing of the solution may run
    beside it (a daemon that slows it would leave a slower baseline, and a larger speed-up vs torch.compile)."""
    import os

    _, log = watched
    compiles = [stopped for who, m, stopped in log if who == "reference" and m.get("op") == "compile"]
    assert len(compiles) == 1
    if os.geteuid() == 0:   # sandbox users exist: the child's own is the one stopped
        assert len(compiles[0]) == 1 and len(compiles[0][0]) == 1 and compiles[0][0][0] > 0


def test_the_reference_is_told_whether_to_let_go_of_the_lock_while_its_compile_works_on_the_cpu(watched):
    """EvalConfig.compile_lets_go goes with the compile request, beside the lock to let go of: on the CPU backend
    the compile's work is the timed device's own, so the lock is kept (the default lets go on a GPU)."""
    _, log = watched
    asked = [m for who, m, _ in log if who == "reference" and m.get("op") == "compile"]
    assert [(m["off_lock"], bool(m["lock"])) for m in asked] == [(False, True)]
    config = EvalConfig(device="cpu")
    assert (config.compile_lets_go(True), config.compile_lets_go(False)) == (True, False)
    assert not replace(config, compile_off_lock=False).compile_lets_go(True)
    assert not replace(config, quiet_host=False).compile_lets_go(True)


def test_the_recheck_is_asked_inside_the_timings_hold_of_the_device_not_after_a_second_wait(watched):
    """The child's recheck comes last, while the device is still held alone for the timing: a shared lock taken for
    it after would queue behind the next evaluation's whole timing (2x H200, 2026-11-28: 1.2 s of `wait` an
    evaluation with 3 evaluators a GPU) for a round trip of milliseconds."""
    result, log = watched
    assert RECHECKS == [[False]], RECHECKS   # one recheck, the thread holding one lock, alone
    last_end = max(i for i, (who, m, _) in enumerate(log) if who == "child" and m.get("op") == "time_end")
    recheck = next(i for i, (who, m, _) in enumerate(log) if who == "child" and m.get("op") == "recheck")
    assert recheck > last_end and result.details["outputs_rechecked"] >= 1


def _lock_mode():
    from cuda_agent.measure import lock

    holds = list(lock._holds().values())
    return None if not holds else ("shared" if holds[0].shared else "alone", holds[0].depth)


def test_a_second_run_started_inside_the_alone_hold_neither_raises_nor_waits():
    """_Device: the first run's start held shared, then alone once; a second run (speedup_remeasured, watch_retimed)
    starts inside the alone hold: its shared hold is a re-entry (no flock, no LockOrderError), and alone is not
    taken twice (a review, 2026-11-29)."""
    from contextlib import ExitStack

    from cuda_agent.harness.profiling import _Device
    from cuda_agent.harness.session import Session

    class _S:
        hold_device, off_clock, deadline = Session.hold_device, Session.off_clock, 0.0

    with ExitStack() as held:
        device = _Device(_S(), _verdict(), "cpu", held)
        started = ExitStack()
        device.shared(started)
        assert _lock_mode() == ("shared", 1)
        started.close()
        started.close()   # the finally's close again: nothing
        assert _lock_mode() is None
        device.alone()
        assert _lock_mode() == ("alone", 1) and device.taken
        again = ExitStack()
        device.shared(again)
        assert _lock_mode() == ("alone", 2)
        again.close()
        device.alone()
        assert _lock_mode() == ("alone", 1)
    assert _lock_mode() is None


@pytest.mark.parametrize("verdicts,sound", [
    ([{"ok": True}] * 3, True), ([{"ok": True}, {"ok": False, "reason": "x"}], True), ([{"ok": False}], True),
    ([{"ok": True}, "x"], False), ([None], False), ([{"ok": True}] * 4, False), ([], False), (None, False),
    ([{"ok": False}, {"ok": True}, {"ok": True}], False), ([{"ok": True}, {"ok": True}], False)])
def test_the_reference_workers_verdicts_on_a_replay_are_read_strictly(verdicts, sound):
    """In order, up to and with the first wrong one: anything else is the harness's fault, never a crash or a pass."""
    from cuda_agent.harness.session import Session, Stop

    s = Session.__new__(Session)
    s.job, s.route, s.config = {"public": "/x"}, "files", EvalConfig(device="cpu")
    s.ask_reference = lambda msg, timeout_s=900: {"ok": True, "verdicts": verdicts}
    items = [{"tag": f"a_{j}", "meta": [], "seed": j} for j in range(3)]
    if sound:
        assert s.check_outputs(items) == verdicts
    else:
        with pytest.raises(Stop) as e:
            s.check_outputs(items)
        assert e.value.fault == "harness"


def test_a_capture_short_of_memory_beside_other_runs_is_known_as_such():
    """A side that ran out of memory in a capture beside other evaluations' graphs is captured again alone
    (profiling._captured_alone), not timed per call."""
    from cuda_agent.harness.replays import capture, short_of_memory

    oom = "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    w = _Workers({"graph": {"ok": True, "captured": False, "reason": oom}}, {})
    r = _verdict()
    assert capture(w, r) == (0, 0) and short_of_memory(r)
    w = _Workers({"graph": {"ok": True, "captured": True, "calls": 8}, "graph_end": {"ok": True}},
                 {"graph": {"ok": True, "captured": False, "reason": oom}})
    r = _verdict()
    assert capture(w, r) == (8, 0) and short_of_memory(r) and "solution_not_captured" in r.flags
    w = _Workers({"graph": {"ok": True, "captured": False, "reason": "RuntimeError: capture unjoined"}}, {})
    r = _verdict()
    assert capture(w, r) == (0, 0) and not short_of_memory(r)
