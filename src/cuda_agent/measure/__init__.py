"""Running a task's model and timing it. This module is its one door; code outside imports only
from here.

- `modules.py`: a task's source made a module, its model built and seeded, its inputs drawn from
  a seed; `variants.py`: the input sets made from a drawn one (near duplicates, shifted sets).
- `plan.py`: `TimingPlan`, how a model is timed, and `TimingStats`, what timing gives back.
- `timing.py`: the timing loop, in two halves (`CallTimer` where the callable runs, `drive` where
  the clock is trusted) and both in one (`time_callable`); `watch`, a reported figure held
  against the driver's clock.
- `paired.py`: the solution and its baselines timed in alternating windows, the speed-up measured
  as a ratio until its standard error meets the plan's target (`drive_paired`, `time_paired`,
  `PairedTiming`); `ratio.py`: the statistics of those windows (`Ratio`); `graphs.py`: calls
  captured in a CUDA graph and timed by its replays (`Graph`).
- `baselines.py`: eager and torch.compile timed one way (`time_baselines`).
- `lock.py`: the device lock, which keeps the device and the host quiet while a figure is taken;
  `alone.py`: waiting, before the baselines' windows, until no other context's work is left on the GPU.

Used by the harness (its two worker processes, its baseline cache, its session's timing loop) and
by synth (its worker builds, runs and times candidates with these, without the judge).
"""

from cuda_agent.measure.alone import Alone, gpu_probe, wait_alone
from cuda_agent.measure.baselines import autotune_alone, compile_for_timing, compile_off_lock, time_baselines
from cuda_agent.measure.graphs import Graph, NotCapturable, graph_calls, graph_unsupported
from cuda_agent.measure.lock import (LockOrderError, alone_within, beside_timing, compile_turn, device_lock,
                                     held_alone_s, waited_s)
from cuda_agent.measure.modules import (NEAR, SHIFTED, Steps, make_inputs, make_model, module_from_source, release,
                                        seed_generators, timing_draw, varied_inputs)
from cuda_agent.measure.paired import (GRAPH, GRAPH_BASELINES, PER_CALL, PairedRun, PairedTiming, Side, calls_per,
                                       drive_paired, side_stats, time_paired)
from cuda_agent.measure.plan import TimingPlan, TimingStats
from cuda_agent.measure.ratio import Ratio
from cuda_agent.measure.timing import (CallTimer, CallTimes, Run, Timed, Watch, as_timer, call_seed, drive,
                                       stats_of, time_callable, watch)

__all__ = [
    "Alone", "GRAPH", "GRAPH_BASELINES", "NEAR", "PER_CALL", "SHIFTED", "CallTimer", "CallTimes", "Graph",
    "LockOrderError", "NotCapturable",
    "PairedRun", "PairedTiming", "Ratio", "Run", "Side", "Steps", "Timed", "TimingPlan", "TimingStats", "Watch",
    "alone_within", "as_timer", "autotune_alone", "beside_timing", "call_seed", "calls_per", "compile_for_timing", "compile_off_lock",
    "compile_turn",
    "device_lock", "drive", "drive_paired", "graph_calls", "graph_unsupported",
    "make_inputs", "make_model", "module_from_source", "release", "seed_generators", "side_stats", "stats_of", "time_baselines",
    "time_callable", "time_paired", "timing_draw", "varied_inputs", "wait_alone", "waited_s", "held_alone_s", "watch", "gpu_probe",
]
