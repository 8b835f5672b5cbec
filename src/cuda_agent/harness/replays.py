"""The CUDA graphs a timing run is timed by, and the check of a timed call's outputs (harness/profiling.py drives
both): `capture` has every side captured as the reference chooses, `wrong_output` compares a call's outputs, or
each of a replay's calls', with the reference's on the inputs of its seed."""

from __future__ import annotations

from cuda_agent.harness.result import EvalResult
from cuda_agent.harness.session import Session, Stop, new_seed
from cuda_agent.measure import call_seed


def wrong_output(session: Session, tag: str, seed: int, calls: int) -> tuple[int, str] | None:
    """The last call's outputs (after a replay: those of its `calls` calls, each on the inputs of
    `call_seed(seed, j)`) compared with the reference's: (the call's index, why) for the first that
    is wrong, None where all are right. A replay's calls are handed over in one request to the child and
    checked in one to the reference worker (three round trips a call held the GPU alone for 0.15-0.28 s of
    an evaluation's 1.3 s, H200, 2026-11-28)."""
    if not calls:
        meta = session.ask_child({"op": "check", "tag": tag}, "profile").get("meta")
        session.ask_reference({"op": "reference", "tag": tag, "seed": seed})
        v = session.check_output(tag, meta)
        return None if v["ok"] else (0, str(v["reason"]))
    # by files, a batch's outputs lie in the exchange folder (tmpfs) together: at most FILES_BATCH calls' at once
    step = calls if session.route == "ipc" else FILES_BATCH
    for lo in range(0, calls, step):
        js = list(range(lo, min(lo + step, calls)))
        names = [f"{tag}_{j}" for j in js]
        metas = session.ask_child({"op": "check", "tags": names, "indices": js}, "profile").get("metas")
        if not isinstance(metas, list) or len(metas) != len(js):
            raise Stop("profile", f"asked for the outputs of {len(js)} calls of a replay, the solution's process "
                                  f"handed over {len(metas) if isinstance(metas, list) else 'none'}")
        verdicts = session.check_outputs([{"tag": n, "meta": m, "seed": call_seed(seed, j)}
                                          for j, n, m in zip(js, names, metas)])
        for j, v in zip(js, verdicts):
            if not v.get("ok"):
                return j, str(v.get("reason"))
    return None


FILES_BATCH = 8   # a replay's calls whose outputs are handed over as files in one request (GRAPH_BYTES: up to 2 GiB)


def checked_call(session: Session, calls: int) -> tuple[int, str] | None:
    """One call of the solution (a replay of its graph of `calls` calls; 0: a plain call) on new
    inputs, its outputs compared as `wrong_output` does."""
    tag, seed = session.next_tag(), new_seed()
    session.ask_child({"op": "call", "seed": seed}, "profile")
    return wrong_output(session, tag, seed, calls)


def capture(session: Session, result: EvalResult) -> tuple[int, int]:
    """CUDA graphs for every side, the method chosen by the reference: where eager and torch.compile
    can be captured (the reference worker picks how many calls a graph holds), the solution is
    captured with as many, and one replay on new inputs must give every call's right output. Where
    the solution cannot be captured, or its replays do not compute its outputs (kernels launched on
    the legacy default stream run during capture and are not in the graph), the baselines keep their
    graphs and the solution's calls are timed one at a time, its launches in its own figure (measure's
    GRAPH_BASELINES), and the verdict says why (flag `solution_not_captured`). Every side timed per call
    instead charged torch.compile's host work to it: a solution that refused capture, with the same work,
    read 1.50x faster than torch.compile (2x H200, 2026-11-28). A first call of the solution is checked
    then, since a failed capture can leave a process unable to compute (a side stream the current one never
    waits for stays in the dead capture). Returns the calls a graph holds: the baselines', the solution's
    (0: per call)."""
    seed = new_seed()
    ref = session.ask_reference({"op": "graph", "seed": seed})
    if not ref.get("captured"):
        result.details["graph"] = f"timed per call: the reference cannot be captured in a CUDA graph ({ref.get('reason')})"
        return 0, 0
    calls = int(ref["calls"])
    ours = session.ask_child({"op": "graph", "seed": seed, "calls": calls}, "profile")
    why = ours.get("reason")
    if ours.get("captured"):
        bad = checked_call(session, calls)   # one replay, its figures unused
        if bad is None:
            result.details["graph"] = f"timed by replays of CUDA graphs of {calls} calls"
            return calls, calls
        session.ask_child({"op": "graph_end"}, "profile")
        why = (f"its graph's replays do not compute its outputs (call {bad[0] + 1} of a replay on new inputs: "
               f"{bad[1]}): work launched outside the stream being captured is not in the graph")
    if "solution_not_captured" not in result.flags:   # once, where the speed-up is measured again
        result.flags.append("solution_not_captured")
    result.details["graph"] = (f"the baselines timed by replays of CUDA graphs of {calls} calls, the method they "
                               f"chose, and the solution per call, its launches in its figure: it could not be "
                               f"captured ({why}); launch every kernel on the current stream "
                               "(at::cuda::getCurrentCUDAStream(), not <<<grid, block>>> on the legacy default "
                               "stream), join every side stream before forward returns and keep forward free of "
                               "host synchronisation to be timed by graph replays as they are")
    if bad := checked_call(session, 0):
        raise Stop("profile", f"after its CUDA graph capture failed, a call of the solution computes a wrong output "
                              f"({bad[1]}): work on a side stream that the current stream never waits for (join "
                              "every side stream before forward returns), or state a failed capture leaves broken")
    return calls, 0


def short_of_memory(result: EvalResult) -> bool:
    """Whether `capture` timed a side per call because the GPU's memory ran out (beside other evaluations)."""
    return "out of memory" in str(result.details.get("graph", "")).lower()
