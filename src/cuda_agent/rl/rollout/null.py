"""verl 0.9.1 rollout `null`: a rollout for stages that never generate.

Value pretraining replays recorded trajectories (an agent loop that returns recorded tokens and
never calls the server), but verl's trainer still builds a rollout, syncs weights into it and puts
it to sleep. This one does all of that for free: it loads no model, drops the weights it is sent,
and fails loudly if anything asks it for tokens. Select it with `actor_rollout_ref.rollout.name=null`
(`cuda_agent.rl.workers.plugin` registers it).
"""

from __future__ import annotations

from typing import Any, Optional

from cuda_agent.rl.rollout.hf import HFReplica, HFServerAdapter
from cuda_agent.rl.rollout.hf_server import TokenServerLifecycle

ROLLOUT_NAME = "null"


class NullTokenServer(TokenServerLifecycle):
    """A server with no model: every lifecycle call succeeds, `generate` raises."""

    def __init__(self, config=None, model_config=None, rollout_mode=None, replica_rank: int = 0, **kwargs):
        self.replica_rank = replica_rank
        self.address = f"127.0.0.1:{replica_rank}"

    async def launch_server(self, **kwargs) -> None:
        pass

    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str,
                       **kwargs) -> Any:
        raise RuntimeError(f"request {request_id}: the null rollout never generates. This stage's agent loop asked "
                           "for tokens; use an agent loop that replays recorded trajectories, or set "
                           "actor_rollout_ref.rollout.name=hf")

    async def update_weights(self, state_dict: Optional[dict] = None, global_steps: Optional[int] = None) -> None:
        self.global_steps = global_steps


class NullReplica(HFReplica):
    """A replica whose server is a `NullTokenServer` (placed like the hf one: one per training worker)."""

    server_cls = NullTokenServer
    prefix = ROLLOUT_NAME


class NullServerAdapter(HFServerAdapter):
    """The training worker's side: consumes the weights it is given (they may be all-gathered) and drops them."""

    prefix = ROLLOUT_NAME

    async def resume(self, tags: list[str]) -> None:
        pass

    async def release(self) -> None:
        pass

    async def update_weights(self, weights, wire_format: str = "named_tensors", global_steps: Optional[int] = None,
                             **kwargs) -> None:
        from verl.workers.rollout.utils import ensure_async_iterator

        async for _ in ensure_async_iterator(weights):  # every rank must drain it: FSDP gathers collectively
            pass
