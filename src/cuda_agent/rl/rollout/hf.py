"""verl 0.9.1 rollout `hf`: token-in/token-out generation with transformers `generate`, for SMALL models.

verl's agent loops ask a rollout server for tokens (`LLMServerClient.generate` -> `server.generate`),
and verl 0.9.1 registers only vLLM, SGLang and TRT-LLM servers, none of which can be installed on
our GPU machine. This rollout is the missing server, in verl's three roles:
- `HFTokenServer` (hf_server.py), a Ray actor on the training GPU (or the CPU, under
  `cuda_agent.rl.workers.cpu_platform`): `generate(prompt_ids, sampling_params, request_id, ...) ->
  TokenOutput` with the log-probs of the sampled tokens, plus the lifecycle calls verl makes
  (wake_up, sleep, abort, ...);
- `HFReplica(RolloutReplica)` (here), which verl's `LLMServerManager` asks to launch one server per replica;
- `HFServerAdapter(BaseRollout)` (here), which lives in the hybrid actor worker and hands the trained
  weights to the server (a CPU state dict through the Ray object store).

It runs the requests that arrive together (one training step's prompts) as one left-padded
`generate` batch, but has no paged KV cache, no continuous batching and no prefix reuse across
turns: fine for the 2 M-parameter test model and models of a few hundred million parameters, far
too slow for real training, which needs vLLM or SGLang. Each replica is one model copy on one device, so it needs
`actor_rollout_ref.rollout.tensor_model_parallel_size=1` (data and pipeline parallel 1 too).

`cuda_agent.rl.workers.plugin` registers this rollout as `hf`. Written against verl 0.9.1's
`verl/workers/rollout/{replica,base,llm_server}.py` and the vLLM replica there.
"""

from __future__ import annotations

import os
from typing import Optional

import ray
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica

from cuda_agent.rl.rollout.hf_server import ROLLOUT_NAME, HFTokenServer


def server_actor_name(prefix: str, replica: RolloutReplica) -> str:
    """The Ray name of a replica's server, which the adapter in the training worker looks up."""
    role = "reward_" if replica.is_reward_model else "teacher_" if replica.is_teacher_model else ""
    return f"{prefix}_server_{role}{replica.replica_rank}_0{replica.name_suffix}"


def _node_and_device(worker) -> tuple[str, Optional[str]]:
    """Run inside a training worker: its Ray node and the accelerator id Ray gave it."""
    from verl.utils.device import get_resource_name

    ctx = ray.get_runtime_context()
    ids = ctx.get_accelerator_ids().get(get_resource_name()) or []
    return ctx.get_node_id(), (str(ids[0]) if ids else None)


class HFReplica(RolloutReplica):
    """A replica of one `HFTokenServer`, placed on the node and device of the training worker it serves."""

    server_cls: type = HFTokenServer
    prefix = ROLLOUT_NAME

    def __init__(self, replica_rank, config, model_config, gpus_per_node: int = 8, is_reward_model: bool = False,
                 is_teacher_model: bool = False, name_suffix: str = ""):
        super().__init__(replica_rank, config, model_config, gpus_per_node, is_reward_model, is_teacher_model,
                         name_suffix)
        if self.world_size != 1:
            raise ValueError(f"the {self.prefix} rollout serves one model copy per device, but rollout tensor x data x "
                             f"pipeline parallel = {self.world_size}; set actor_rollout_ref.rollout."
                             "tensor_model_parallel_size=1 (its default is 2) and data/pipeline_model_parallel_size=1")

    async def launch_servers(self) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from verl.plugin.platform import get_platform

        if len(self.workers) != 1:
            raise RuntimeError(f"{type(self).__name__} {self.replica_rank}: expected 1 worker, got {len(self.workers)}")
        node_id, device = await self.workers[0].__ray_call__.remote(_node_and_device)
        platform = get_platform()
        env = {**{var: "1" for var in platform.ray_noset_envvars()}, **platform.rollout_env_vars()}
        server = ray.remote(self.server_cls).options(
            name=server_actor_name(self.prefix, self), num_cpus=0, max_concurrency=self.max_concurrency,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
            runtime_env={"env_vars": env},
        ).remote(config=self.config, model_config=self.model_config, rollout_mode=self.rollout_mode,
                 replica_rank=self.replica_rank, accelerator_id=device)
        await server.launch_server.remote()
        host, port = await server.get_server_address.remote()
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"{host}:{port}"


class HFServerAdapter(BaseRollout):
    """The rollout as the hybrid training worker sees it: wakes, puts to sleep and updates its replica's server."""

    prefix = ROLLOUT_NAME

    def __init__(self, config, model_config, device_mesh=None, replica_rank: int = -1, **kwargs):
        super().__init__(config, model_config, device_mesh)
        # one device per replica (HFReplica checks), so a worker's rank is its replica's rank
        self.replica_rank = int(os.environ.get("RANK", "0")) if replica_rank == -1 else replica_rank
        self.rollout_rank = 0
        self.is_leader_rank = True
        self._server = None
        self._name = f"{self.prefix}_server_{self.replica_rank}_0"

    def server(self):
        if self._server is None:  # the server starts after the worker, so look it up on first use
            self._server = ray.get_actor(self._name)
        return self._server

    async def resume(self, tags: list[str]) -> None:
        if self.config.free_cache_engine:
            await self.server().wake_up.remote(tags=tags)

    async def release(self) -> None:
        if self.config.free_cache_engine:
            await self.server().sleep.remote()

    async def update_weights(self, weights, wire_format: str = "named_tensors", global_steps: Optional[int] = None,
                             peft_config=None, **kwargs) -> None:
        """Gather the trainer's tensors on the CPU and load them into the server (fine for small models)."""
        if wire_format != "named_tensors":
            raise NotImplementedError(f"hf rollout: weight format {wire_format!r}; set actor_rollout_ref.rollout."
                                      "checkpoint_engine.backend=naive")
        if peft_config is not None:
            raise NotImplementedError("hf rollout: LoRA adapters are not loaded separately; set "
                                      "actor_rollout_ref.model.lora.merge=True")
        from verl.workers.rollout.utils import ensure_async_iterator

        state = {}
        async for name, tensor in ensure_async_iterator(weights):  # every rank drains it: it may all-gather
            state[name] = tensor.detach().to("cpu", copy=True)
        await self.server().update_weights.remote(ray.put(state), global_steps=global_steps)
