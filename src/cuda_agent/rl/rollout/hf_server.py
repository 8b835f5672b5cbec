"""The token server of rollout `hf` (rl/rollout/hf.py): one transformers model answering verl's
token-in/token-out `generate` with the log-probs of the sampled tokens, the requests that arrive
together run as one left-padded `generate` batch, plus the lifecycle calls verl makes on a server
(wake_up, sleep, abort, ...; `TokenServerLifecycle`, shared with the null rollout's server).

Log-probs are those of the sampled token under softmax(logits / temperature) over the whole
vocabulary (temperature 1 for greedy), which is what verl's actor computes for `old_log_probs`;
top-k/top-p shape the sampling only. No paged KV cache, no continuous batching, no prefix reuse:
for small models only.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import Any, Optional

import ray
import torch
from transformers import (GenerationConfig, LogitsProcessor, LogitsProcessorList, StoppingCriteria,
                          StoppingCriteriaList)
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.config import HFModelConfig, RolloutConfig
from verl.workers.rollout.replica import RolloutMode, TokenOutput

ROLLOUT_NAME = "hf"
# sampling_params keys generate() understands; anything else is an error, not a silent change of sampling
SAMPLING_KEYS = {"temperature", "top_p", "top_k", "repetition_penalty", "logprobs", "max_tokens", "max_new_tokens",
                 "stop_token_ids", "ignore_eos", "seed", "do_sample"}


BATCH_WINDOW_S = 0.005  # how long a new batch waits for the other requests of the same step
PER_REQUEST_KEYS = {"max_tokens", "max_new_tokens", "logprobs"}  # what requests of one batch may differ in


@dataclass(eq=False)
class _Request:
    prompt_ids: list[int]
    params: dict[str, Any]
    budget: int
    reply: asyncio.Future

    @property
    def key(self) -> Any:
        """Requests with equal keys sample alike and can share a batch (a seeded one goes alone)."""
        if self.params.get("seed") is not None:
            return id(self)
        return tuple(sorted((k, repr(v)) for k, v in self.params.items() if k not in PER_REQUEST_KEYS))


class _LogProbRecorder(LogitsProcessor):
    """Records the log-prob of each sampled token under softmax(raw logits / temperature), holding one
    step's distribution at a time ([batch, vocab], where keeping every step's logits would take
    batch x length x vocab). transformers runs custom processors before its temperature/top-k/top-p
    warpers, so `scores` here are the model's logits."""

    def __init__(self, temperature: float):
        self.temperature = temperature
        self.previous: Optional[torch.Tensor] = None
        self.steps: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        self._take(input_ids[:, -1])  # the token sampled from the previous step's distribution
        self.previous = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def _take(self, tokens: torch.Tensor) -> None:
        if self.previous is not None:
            self.steps.append(self.previous.gather(-1, tokens[:, None]).squeeze(-1))
            self.previous = None

    def log_probs(self, sequences: torch.Tensor) -> torch.Tensor:
        """[batch, new tokens], once generate() is done (the last token was sampled after the last call)."""
        self._take(sequences[:, -1])
        if not self.steps:
            return torch.zeros((len(sequences), 0))
        return torch.stack(self.steps, dim=1)


class _StopOnAbort(StoppingCriteria):
    """Ends the running batch as soon as `aborted()` says so."""

    def __init__(self, aborted):
        self.aborted = aborted

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        return torch.full((input_ids.shape[0],), self.aborted(), dtype=torch.bool, device=input_ids.device)


def device_for(device_name: str, accelerator_id: Optional[str], visible: Optional[str]) -> torch.device:
    """The device of the training worker's GPU `accelerator_id` (an id as Ray reports it), seen from a
    process where `visible` (CUDA_VISIBLE_DEVICES, or unset) lists the GPUs. Setting CUDA_VISIBLE_DEVICES
    in the server would be too late: importing verl already counted the devices."""
    if device_name == "cpu" or accelerator_id is None:
        return torch.device(device_name)
    ids = [i.strip() for i in visible.split(",")] if visible else None
    return torch.device(device_name, ids.index(str(accelerator_id)) if ids else int(accelerator_id))


class TokenServerLifecycle:
    """The control calls verl's replicas, checkpoint manager and load balancer make on a server.
    For a plain transformers model most have nothing to do; `HFTokenServer` overrides the rest."""

    global_steps: Optional[int] = None
    address: str = "127.0.0.1:0"

    def get_server_address(self) -> tuple[str, int]:
        host, port = self.address.rsplit(":", 1)
        return host, int(port)

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    async def wake_up(self, tags: Optional[list[str]] = None) -> None:
        pass

    async def sleep(self) -> None:
        pass

    async def clear_kv_cache(self) -> None:
        pass  # no cache outlives a request

    async def release_kv_cache(self) -> None:
        pass

    async def resume_kv_cache(self) -> None:
        pass

    async def wait_for_requests_to_drain(self) -> None:
        pass

    async def abort_all_requests(self, reset_prefix_cache: bool = True, reject_request: bool = False) -> dict:
        return {"aborted_count": 0, "request_ids": []}

    async def resume_generation(self) -> None:
        pass

    async def abort_request(self, request_id: str, reset_prefix_cache: bool = True) -> dict:
        return {"aborted": False, "request_id": request_id}

    async def start_profile(self, **kwargs) -> None:
        pass

    async def stop_profile(self) -> None:
        pass


class HFTokenServer(TokenServerLifecycle):
    """One transformers model serving verl's token-in/token-out `generate`, in batches of concurrent requests.

    A plain class: `HFReplica` runs it as a Ray actor, tests call it directly (`await
    server.launch_server()` first). `device` defaults to the platform's device ("cuda" with
    `visible_devices` as CUDA_VISIBLE_DEVICES, or "cpu" under the CPU platform)."""

    def __init__(self, config: RolloutConfig, model_config: HFModelConfig | Any,
                 rollout_mode: RolloutMode = RolloutMode.HYBRID, replica_rank: int = 0,
                 accelerator_id: Optional[str] = None, device: Optional[str] = None):
        from verl.utils.device import get_device_name, get_visible_devices_keyword

        self.config: RolloutConfig = omega_conf_to_dataclass(config)
        self.model_config: HFModelConfig = (model_config if isinstance(model_config, HFModelConfig)
                                            else omega_conf_to_dataclass(model_config, dataclass_type=HFModelConfig))
        self.rollout_mode = rollout_mode
        self.replica_rank = replica_rank
        self.device = torch.device(device) if device else device_for(
            get_device_name(), accelerator_id, os.environ.get(get_visible_devices_keyword()))
        self.address = f"{ray.util.get_node_ip_address() if ray.is_initialized() else '127.0.0.1'}:{replica_rank}"
        self.model = None
        self.max_model_len: int = 0
        self.stop_token_ids: list[int] = []
        self._model_lock = asyncio.Lock()  # one batch (or weight load, or offload) at a time
        self._queue: list[_Request] = []
        self._batcher: Optional[asyncio.Task] = None
        self._running = 0  # requests in the running batch
        self._abort = False  # set by abort_all_requests, cleared by resume_generation; stops the running batch
        self._admit = asyncio.Event()
        self._admit.set()
        self._reject = False

    async def launch_server(self, **kwargs) -> None:
        """Load the model (verl then overwrites its weights at every sync)."""
        from transformers import AutoModelForCausalLM

        from verl.utils.torch_dtypes import PrecisionType

        engine = dict(self.config.engine_kwargs.get(ROLLOUT_NAME, None) or {})
        self.model = AutoModelForCausalLM.from_pretrained(
            self.model_config.local_path, dtype=PrecisionType.to_dtype(self.config.dtype),
            attn_implementation=engine.get("attn_implementation", "sdpa"),
            trust_remote_code=self.model_config.trust_remote_code).to(self.device).eval()
        hf_config = self.model.config
        self.max_model_len = self.config.max_model_len or hf_config.max_position_embeddings
        eos = hf_config.eos_token_id if hf_config.eos_token_id is not None else self.model_config.tokenizer.eos_token_id
        self.stop_token_ids = [int(t) for t in (eos if isinstance(eos, (list, tuple)) else [eos]) if t is not None]
        self.pad_token_id = hf_config.pad_token_id if hf_config.pad_token_id is not None else self.stop_token_ids[0]

    def response_budget(self, prompt_len: int, sampling_params: dict[str, Any]) -> int:
        """How many tokens a reply to a prompt of `prompt_len` tokens may have: the request's max_tokens,
        else what is left of prompt_length + response_length (at most response_length), within max_model_len."""
        asked = sampling_params.get("max_tokens", sampling_params.get("max_new_tokens"))
        if asked is None:
            c = self.config
            asked = min(c.response_length, c.prompt_length + c.response_length - prompt_len)
        return max(0, min(int(asked), self.max_model_len - prompt_len))

    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str,
                       image_data: Optional[list[Any]] = None, video_data: Optional[list[Any]] = None,
                       audio_data: Optional[list[Any]] = None, mm_processor_kwargs: Optional[dict] = None,
                       priority: int = 0, **kwargs) -> TokenOutput:
        """Sample a reply to `prompt_ids`; return its token ids (eos included when it stopped there)
        and, when `sampling_params["logprobs"]` is set, their log-probs."""
        if self.model is None:
            raise RuntimeError("HFTokenServer.generate before launch_server(); the replica launches it")
        if image_data or video_data or audio_data:
            raise NotImplementedError("the hf rollout is text-only; use vllm or sglang for multimodal data")
        unknown = set(sampling_params) - SAMPLING_KEYS
        if unknown:
            raise ValueError(f"hf rollout: unsupported sampling_params {sorted(unknown)} (request {request_id}); "
                             f"it understands {sorted(SAMPLING_KEYS)}")
        from verl.utils.tokenizer.tokenizer import normalize_token_ids

        prompt_ids = normalize_token_ids(prompt_ids)
        while not self._admit.is_set():  # abort_all_requests closed the gate until resume_generation
            if self._reject:
                return TokenOutput(token_ids=[], stop_reason="aborted", extra_fields=self._extra())
            await self._admit.wait()
        budget = self.response_budget(len(prompt_ids), sampling_params)
        if budget == 0:
            return TokenOutput(token_ids=[], log_probs=[] if sampling_params.get("logprobs") else None,
                               stop_reason="completed", extra_fields=self._extra())
        request = _Request(prompt_ids, sampling_params, budget, asyncio.get_running_loop().create_future())
        self._queue.append(request)
        if self._batcher is None or self._batcher.done():
            self._batcher = asyncio.create_task(self._run_batches())
        token_ids, log_probs, aborted = await request.reply
        return TokenOutput(token_ids=token_ids, log_probs=log_probs if sampling_params.get("logprobs") else None,
                           stop_reason="aborted" if aborted else "completed", extra_fields=self._extra())

    def _aborted(self) -> bool:
        return self._abort

    def _extra(self) -> dict[str, Any]:
        return {"global_steps": self.global_steps}

    async def _run_batches(self) -> None:
        """Serve the queue in batches of requests that sample alike, until it is empty."""
        await asyncio.sleep(BATCH_WINDOW_S)  # let the requests sent together arrive together
        limit = int(self.config.max_num_seqs or 1)
        while self._queue:
            key = self._queue[0].key
            batch = [r for r in self._queue if r.key == key][:limit]
            self._queue = [r for r in self._queue if r not in batch]
            async with self._model_lock:
                self._running = len(batch)
                try:
                    if self._abort:  # queued when abort_all_requests came: they end now, empty
                        replies = [([], [], True)] * len(batch)
                    else:
                        replies = await asyncio.to_thread(self._sample, [r.prompt_ids for r in batch],
                                                          batch[0].params, [r.budget for r in batch])
                except Exception as error:  # the requests' callers see it
                    replies = [error] * len(batch)
                finally:
                    self._running = 0
            for request, reply in zip(batch, replies):
                if isinstance(reply, Exception):
                    request.reply.set_exception(reply)
                else:
                    request.reply.set_result(reply)

    @torch.no_grad()
    def _sample(self, prompts: list[list[int]], params: dict[str, Any],
                budgets: list[int]) -> list[tuple[list[int], list[float], bool]]:
        """One `generate` over left-padded prompts; per prompt: (reply ids, their log-probs, aborted)."""
        temperature = float(params.get("temperature", self.config.temperature))
        do_sample = bool(params.get("do_sample", self.config.do_sample)) and temperature > 0
        top_k = int(params.get("top_k", self.config.top_k))
        stop = [] if params.get("ignore_eos", self.config.ignore_eos) else self.stop_token_ids
        stop = stop + [int(t) for t in params.get("stop_token_ids") or []]
        # when sampling, explicit "off" values: a None would be filled in from transformers' defaults (top_k=50)
        warpers = dict(temperature=temperature, top_p=float(params.get("top_p", self.config.top_p)),
                       top_k=max(top_k, 0)) if do_sample else {}
        gen = GenerationConfig(max_new_tokens=max(budgets), do_sample=do_sample, **warpers,
                               repetition_penalty=float(params.get("repetition_penalty", 1.0)),
                               eos_token_id=stop or None, pad_token_id=self.pad_token_id)
        width = max(len(p) for p in prompts)
        x = torch.tensor([[self.pad_token_id] * (width - len(p)) + p for p in prompts], device=self.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=self.device)
        seed = params.get("seed")
        devices = [] if self.device.type == "cpu" else [self.device]
        with torch.random.fork_rng(devices=devices, enabled=seed is not None):
            if seed is not None:
                torch.manual_seed(int(seed))
            recorder = _LogProbRecorder(temperature if do_sample else 1.0)
            sequences = self.model.generate(x, attention_mask=mask, generation_config=gen,
                                            logits_processor=LogitsProcessorList([recorder]),
                                            stopping_criteria=StoppingCriteriaList([_StopOnAbort(self._aborted)]))
        new = sequences[:, width:]
        new_logp = recorder.log_probs(sequences)
        replies = []
        for row, budget in enumerate(budgets):
            ids = new[row].tolist()[:budget]
            end = next((i + 1 for i, t in enumerate(ids) if t in stop), len(ids))  # the stop token stays in
            aborted = self._abort and end == len(ids) < budget and not (ids and ids[-1] in stop)
            replies.append((ids[:end], new_logp[row, :end].tolist(), aborted))
        return replies

    async def update_weights(self, state_dict: dict[str, torch.Tensor], global_steps: Optional[int] = None) -> None:
        """Load the trainer's weights (HF names, full tensors on the CPU). Names the model lacks are an error."""
        async with self._model_lock:
            own = self.model.state_dict()
            unknown = sorted(set(state_dict) - set(own))
            if unknown:
                raise KeyError(f"hf rollout: weights {unknown[:5]} (of {len(unknown)}) are not in the served model "
                               f"{type(self.model).__name__}; do actor and rollout load the same model path?")
            for name, tensor in state_dict.items():
                own[name].copy_(tensor)  # in place: keeps tied weights tied, casts to the served dtype
        self.global_steps = global_steps if global_steps is not None else self.global_steps

    async def wake_up(self, tags: Optional[list[str]] = None) -> None:
        if self.model is not None and self.device.type != "cpu" and (tags is None or "weights" in tags):
            self.model.to(self.device)

    async def sleep(self) -> None:
        """In the hybrid mode, hand the GPU memory to training while the trainer updates."""
        if (self.model is not None and self.device.type != "cpu" and self.config.free_cache_engine
                and self.rollout_mode == RolloutMode.HYBRID):
            async with self._model_lock:
                self.model.to("cpu")
            from verl.utils.device import get_torch_device

            get_torch_device().empty_cache()

    async def wait_for_requests_to_drain(self) -> None:
        while self._queue or self._model_lock.locked():
            await asyncio.sleep(0.01)

    async def abort_all_requests(self, reset_prefix_cache: bool = True, reject_request: bool = False) -> dict:
        """End the running batch (each reply returns what it has, stop_reason 'aborted') and the queued
        requests (empty), and hold new ones until `resume_generation`, or turn them away when `reject_request`."""
        self._admit.clear()
        self._reject = reject_request
        count = len(self._queue) + self._running
        self._abort = True
        await self.wait_for_requests_to_drain()
        return {"aborted_count": count, "request_ids": []}

    async def resume_generation(self) -> None:
        self._abort = self._reject = False
        self._admit.set()
