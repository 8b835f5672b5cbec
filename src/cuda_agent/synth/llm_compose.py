"""The LLM composer: a model writes the task from chosen seeds, as in the paper.

The seeds are drawn from (run seed, index) like the program composer's; the prompt lists them and
the format rules; the reply's python block is parsed and checked for the KernelBench form. A reply
that is not usable, or an endpoint that fails, is an invalid candidate (ComposeError), counted in
the summary; it never stops the run.
"""

from __future__ import annotations

import random
import re
import time

from cuda_agent.synth.compose import Candidate, ComposeError, _snake
from cuda_agent.synth.seeds import Seed
from cuda_agent.tasks.task import TaskError
from cuda_agent.tasks.validate import validate_source

SYSTEM = "You write PyTorch reference programs for a GPU kernel benchmark. Reply with one python code block."
RULES = """Write one self-contained PyTorch program that stacks these operators (in an order that makes
sense, each used at least once; shapes must fit):
{ops}

Format rules:
- `import torch` and `import torch.nn as nn` (and `torch.nn.functional as F` if used); nothing else.
- `class Model(nn.Module)` with `__init__` taking the sizes it needs and `forward(self, ...)` returning one tensor.
- Module-level size constants, `get_inputs()` returning a list of input tensors made with torch.randn,
  and `get_init_inputs()` returning the list of `__init__` arguments.
- No randomness in forward (no dropout, no torch.rand*), no in-place ops on inputs, no prints, no files.
- Sizes such that one eager forward pass takes about {target_ms:g} ms on {device}.
Reply with the code in a single ```python block and nothing else."""
_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)


def extract_code(reply: str) -> str:
    """The python block of a reply (the last one if several); the whole reply if it has no fence
    but parses as a task. Raises ComposeError saying what is wrong."""
    blocks = _BLOCK.findall(reply or "")
    code = blocks[-1] if blocks else (reply or "")
    if not code.strip():
        raise ComposeError("empty reply")
    try:
        validate_source(code, "reply")
    except TaskError as e:
        raise ComposeError(f"invalid reply: {e.problem}") from None
    return code.strip() + "\n"


class LLMComposer:
    """Composes with a `Model` (agent.models protocol: `query(messages, tools)`)."""

    name = "llm"

    def __init__(self, model, seeds: list[Seed], run_seed: int = 0, target_ms: float = 10.0, device: str = "an H100",
                 max_ops: int = 5):
        self.model = model
        self.seeds = sorted(seeds, key=lambda s: s.name)
        self.run_seed = run_seed
        self.target_ms = target_ms
        self.device = device
        self.max_ops = max_ops
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "invalid": 0, "errors": 0}

    def choose(self, index: int) -> list[Seed]:
        rng = random.Random(f"llm:{self.run_seed}:{index}")
        k = rng.choices(range(1, self.max_ops + 1), (1, 3, 4, 3, 2)[: self.max_ops])[0]
        return rng.sample(self.seeds, min(k, len(self.seeds)))

    def prompt(self, seeds: list[Seed]) -> list[dict]:
        ops = "\n".join(f"- {s.name} ({s.category}): {s.ctor or s.call}".replace("{", "").replace("}", "")
                        for s in seeds)
        return [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": RULES.format(ops=ops, target_ms=self.target_ms, device=self.device)}]

    def compose(self, index: int) -> Candidate:
        from cuda_agent.llm import ModelError

        seeds = self.choose(index)
        t = time.perf_counter()
        try:
            reply = self.model.query(self.prompt(seeds), [])
        except ModelError as e:
            self.usage["errors"] += 1
            raise ComposeError(f"endpoint error: {e}") from None
        self.usage["prompt_tokens"] += reply.usage.prompt_tokens
        self.usage["completion_tokens"] += reply.usage.completion_tokens
        try:
            code = extract_code(reply.content)
        except ComposeError:
            self.usage["invalid"] += 1
            raise
        ops = [s.name for s in seeds]
        name = f"synth_{index:06d}_" + "_".join(_snake(o) for o in ops)[:80]
        return Candidate(index, name, code, ops, [s.category for s in seeds], self.name, structure="llm",
                         compose_s=time.perf_counter() - t,
                         extra={"prompt_tokens": reply.usage.prompt_tokens,
                                "completion_tokens": reply.usage.completion_tokens})
