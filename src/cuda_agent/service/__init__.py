"""The evaluation service on Ray, shared by every caller above it (bench, synth, the agent, RL):
device evaluators holding warm harness processes, CPU-only builders ahead of them, a priority
queue, retries and a journal. `EvalService` (service.py) is its door."""

from cuda_agent.service.evaluator import JobContext
from cuda_agent.service.service import HARNESS_ERROR, EvalService, ServiceError, request_id, using
from cuda_agent.service.settings import (PRIORITY_AGENT, PRIORITY_BENCH, PRIORITY_REWARD, PRIORITY_SYNTH,
                                         ServiceSettings)

__all__ = ["HARNESS_ERROR", "PRIORITY_AGENT", "PRIORITY_BENCH", "PRIORITY_REWARD", "PRIORITY_SYNTH", "EvalService",
           "JobContext", "ServiceError", "ServiceSettings", "request_id", "using"]
