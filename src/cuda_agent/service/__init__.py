"""The evaluation service on Ray, shared by every caller above it (bench, synth, the agent, RL):
device evaluators holding warm harness processes, CPU-only builders ahead of them, a priority
queue, retries and a journal. `EvalService` (service.py) is its door: its life and the ways to ask
it; scheduler.py the queues, retries and verdicts; fleet.py and actors.py the Ray actors;
cores.py the host's cores each service claims for its evaluators' timing; inflight.py the one loop
that keeps N requests in flight."""

from cuda_agent.service.actors import JobContext
from cuda_agent.service.inflight import in_flight
from cuda_agent.service.service import EvalService, request_id, using
from cuda_agent.service.settings import (PRIORITY_AGENT, PRIORITY_BENCH, PRIORITY_REWARD, PRIORITY_SYNTH,
                                         ServiceError, ServiceSettings)

__all__ = ["PRIORITY_AGENT", "PRIORITY_BENCH", "PRIORITY_REWARD", "PRIORITY_SYNTH", "EvalService", "JobContext",
           "ServiceError", "ServiceSettings", "in_flight", "request_id", "using"]
