"""The fill-the-kernel family: the policy writes code, the real harness judges it.

Each task is y = f(x * scale + bias) with a per-feature scale and bias, where f is one of the
operators below with its constants (`elu(v, alpha=0.5)`, `clamp(v, -0.25, 1.5)`, ...). The prompt
shows the reference `forward` and a fused CUDA (or C++) kernel whose one line `y[i] = ...;` is left
open; the reply is that C expression of the float `v`. The expression goes into the kernel
(rl/data/sanity_kernels/<device>/fast.*, through sanity.kernel_files), and the harness builds, checks
and times the solution as it does any other: -1 when it does not build or is wrong, 1 when correct,
2-3 when also faster than eager and torch.compile (a fused pass usually is, on the GPU).

The split is by what a model must generalise to: training tasks use the training constants of the
training operators; held-out tasks use constants never seen in training (of the same operators)
and three operators never seen at all (hardsigmoid, softsign, celu).

A format guard stands before the harness (`expression`): the reply's expression may use `v`,
numbers, operators and a list of C math functions, nothing else, so a reply can only change the
one line it was asked for; the harness's own static scan then runs as always.

Tier 2 adds a choice that changes speed but not correctness, so that the reward's 2 and 3 (faster
than eager, than torch.compile) are what the policy learns from: EPT, the elements each thread takes
a step (1, 2, 4 or 8, loaded as one float2 / float4 vector where it can: sanity_kernels/*/ept.*).
The reply is two lines, the expression and `ept=N` (`tier2_reply`: the second line from that set
and nothing else); the harness times every correct reply (`profile: true`), on tasks large enough
on CUDA (TIER2_SIZES) for the choice to show in the timing. Its RFT examples show the correct
expression with DEFAULT_EPT (one element a thread, as tier 1's kernel), so that speed is left to PPO.

`write_fill_data` writes verl's RL Parquet (train, val); `write_fill_sft` writes correct examples of
the training operators as SFT data (the RFT seed: the paper's warm-up on correct examples). Rows
carry their `tier`.
"""

from __future__ import annotations

import hashlib
import itertools
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cuda_agent.rl.data.rows import FILL, rl_row, sft_row, write_parquet
from cuda_agent.tasks import Task

MAX_CHARS = 200


@dataclass(frozen=True)
class FillOp:
    name: str
    params: tuple[str, ...]   # the constants' names, in the templates' order
    torch: str                # f(v) in PyTorch, constants as {name}
    c: str                    # a correct C expression of the float v, constants as {name}
    train: tuple[tuple[float, ...], ...]     # training constants
    heldout: tuple[tuple[float, ...], ...]   # constants never trained on
    seen: bool = True         # False: an operator held out whole


F = "torch.nn.functional"
OPS = (
    FillOp("affine", ("a", "b"), "{a} * v + {b}", "{a} * v + {b}",
           ((2.0, 1.0), (0.5, -1.0), (-1.0, 0.5), (3.0, 0.0), (1.5, 2.0), (-2.0, -0.5), (0.25, 1.0), (4.0, -2.0)),
           ((1.25, 0.75), (-0.75, 2.5), (2.5, -1.5), (-3.0, 0.25), (-1.25, -0.25))),
    FillOp("clamp", ("lo", "hi"), "torch.clamp(v, {lo}, {hi})", "fminf(fmaxf(v, {lo}), {hi})",
           ((0.0, 1.0), (-1.0, 1.0), (-0.5, 0.5), (0.0, 2.0), (-2.0, 0.0), (-1.0, 3.0), (0.5, 1.5), (-3.0, -1.0)),
           ((-0.25, 1.5), (-1.5, 0.75), (0.25, 2.5), (-2.5, 1.25), (-0.75, 0.25))),
    FillOp("leaky_relu", ("slope",), F + ".leaky_relu(v, {slope})", "v > 0.f ? v : {slope} * v",
           ((0.01,), (0.1,), (0.2,), (0.05,), (0.5,), (0.02,), (0.3,), (0.15,)),
           ((0.25,), (0.07,), (0.4,), (0.12,), (0.6,))),
    FillOp("hardtanh", ("lo", "hi"), F + ".hardtanh(v, {lo}, {hi})", "fminf(fmaxf(v, {lo}), {hi})",
           ((-1.0, 1.0), (-2.0, 2.0), (-0.5, 0.5), (0.0, 1.0), (-1.0, 2.0), (-3.0, 3.0), (-2.0, 0.5), (0.0, 4.0)),
           ((-0.75, 0.75), (-1.5, 2.5), (-0.25, 1.25), (-2.5, 1.5), (-0.5, 2.5))),
    FillOp("abs", ("k",), "{k} * torch.abs(v)", "{k} * fabsf(v)",
           ((1.0,), (2.0,), (0.5,), (-1.0,), (3.0,), (0.25,), (-2.0,), (1.5,)),
           ((0.75,), (-0.5,), (2.5,), (1.25,), (-1.5,))),
    FillOp("square", ("k",), "{k} * v * v", "{k} * v * v",
           ((1.0,), (2.0,), (0.5,), (-1.0,), (3.0,), (0.25,), (-0.5,), (1.5,)),
           ((0.75,), (-2.0,), (2.5,), (1.25,), (0.4,))),
    FillOp("sigmoid", ("k",), "{k} * torch.sigmoid(v)", "{k} / (1.f + expf(-v))",
           ((1.0,), (2.0,), (0.5,), (-1.0,), (3.0,), (0.25,), (-2.0,), (1.5,)),
           ((0.75,), (-0.5,), (2.5,), (1.25,), (-1.5,))),
    FillOp("tanh", ("k",), "{k} * torch.tanh(v)", "{k} * tanhf(v)",
           ((1.0,), (2.0,), (0.5,), (-1.0,), (3.0,), (0.25,), (-2.0,), (1.5,)),
           ((0.75,), (-0.5,), (2.5,), (1.25,), (-1.5,))),
    FillOp("silu", ("k",), "{k} * " + F + ".silu(v)", "{k} * v / (1.f + expf(-v))",
           ((1.0,), (2.0,), (0.5,), (-1.0,), (3.0,), (0.25,), (-2.0,), (1.5,)),
           ((0.75,), (-0.5,), (2.5,), (1.25,), (-1.5,))),
    FillOp("softplus", ("beta",), F + ".softplus(v, beta={beta})", "log1pf(expf({beta} * v)) / {beta}",
           ((1.0,), (2.0,), (0.5,), (3.0,), (0.25,), (1.5,), (4.0,), (0.75,)),
           ((1.25,), (2.5,), (0.4,), (3.5,), (0.6,))),
    FillOp("elu", ("alpha",), F + ".elu(v, alpha={alpha})", "v > 0.f ? v : {alpha} * (expf(v) - 1.f)",
           ((1.0,), (0.5,), (2.0,), (0.1,), (1.5,), (0.25,), (3.0,), (0.75,)),
           ((1.25,), (0.4,), (2.5,), (0.6,), (0.3,))),
    FillOp("hardsigmoid", ("k",), "{k} * " + F + ".hardsigmoid(v)", "{k} * fminf(fmaxf(v / 6.f + 0.5f, 0.f), 1.f)",
           (), ((1.0,), (2.0,), (0.5,), (-1.0,), (3.0,), (0.75,)), seen=False),
    FillOp("softsign", ("k",), "{k} * " + F + ".softsign(v)", "{k} * v / (1.f + fabsf(v))",
           (), ((1.0,), (2.0,), (0.5,), (-1.0,), (3.0,), (1.5,)), seen=False),
    FillOp("celu", ("alpha",), F + ".celu(v, alpha={alpha})", "v > 0.f ? v : {alpha} * (expf(v / {alpha}) - 1.f)",
           (), ((1.0,), (0.5,), (2.0,), (1.5,), (0.25,), (0.75,)), seen=False),
)
SIZES = {"cpu": ((128, 1024), (256, 512)), "cuda": ((4096, 2048), (2048, 4096))}
# tier 2 on CUDA: 128 MiB a tensor, so that one fused pass (256 MiB read and written) takes about
# 80 us on an H100 and the kernel's speed, not the launch, is what the timing sees
TIER2_SIZES = {"cpu": SIZES["cpu"], "cuda": ((8192, 4096), (4096, 8192))}
TIERS = (1, 2)
EPT_CHOICES = (1, 2, 4, 8)
DEFAULT_EPT = 1    # what tier 1's kernel does; the RFT examples of tier 2 show it

REFERENCE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """y = f(x * scale + bias), f = {label} (cuda-agent's fill-the-kernel family)."""

    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = x * self.scale + self.bias
        return {expr}


batch = {batch}
features = {features}


def get_inputs():
    return [torch.randn(batch, features)]


def get_init_inputs():
    return [features]
'''

MODEL_NEW = '''import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """y = f(x * scale + bias) in one fused kernel; f is the policy's expression."""

    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return cuda_extension.sanity_forward(x, self.scale, self.bias)
'''

SYSTEM = ("You complete CUDA kernels. Each task shows a PyTorch reference and a kernel with one expression "
          "missing. Reply with that C expression of the float v only, on one line.")
USER = '''PyTorch reference:
```python
v = x * scale + bias
y = {expr}
```
CUDA kernel:
```cuda
float v = x[i] * scale[c] + bias[c];
y[i] = ???;
```
The C expression for ???:'''

SYSTEM2 = ("You complete CUDA kernels. Each task shows a PyTorch reference and a kernel with one expression "
           "missing and one choice open: EPT, the elements each thread takes a step (1, 2, 4 or 8, loaded as one "
           "vector where it can). Every EPT is correct; some are faster. Reply with two lines: the C expression "
           "of the float v, then ept=N.")
USER2 = '''PyTorch reference:
```python
v = x * scale + bias
y = {expr}
```
CUDA kernel (each thread: EPT consecutive elements, one vector load):
```cuda
constexpr int EPT = N;  // 1, 2, 4 or 8
for (int k = 0; k < EPT; ++k) {{
  float v = x[i + k] * scale[c + k] + bias[c + k];
  y[i + k] = ???;
}}
```
The C expression for ???, then ept=N:'''


@dataclass(frozen=True)
class FillItem:
    """One task of the family: an operator, its constants and a size."""

    op: FillOp
    values: tuple[float, ...]
    size: tuple[int, int]
    split: str     # train | val
    tier: int = 1  # 1: the expression; 2: the expression and EPT (timed)

    @property
    def consts(self) -> dict[str, str]:
        return {p: _py(v) for p, v in zip(self.op.params, self.values)}

    @property
    def torch_expr(self) -> str:
        expr = self.op.torch.format(**self.consts)
        return expr[len("1.0 * "):] if expr.startswith("1.0 * ") else expr

    @property
    def answer(self) -> str:
        """A correct C expression (the SFT seed's reply)."""
        expr = self.op.c.format(**{p: _c(v) for p, v in zip(self.op.params, self.values)})
        return expr.replace("1.0f * ", "", 1) if expr.startswith("1.0f * ") else expr

    @property
    def reply(self) -> str:
        """The SFT seed's reply: the correct expression (tier 2: and DEFAULT_EPT, the choice left to PPO)."""
        return self.answer if self.tier == 1 else f"{self.answer}\nept={DEFAULT_EPT}"

    def task(self, device: str) -> Task:
        batch, features = self.size
        label = self.torch_expr.replace(F + ".", "F.")
        code = REFERENCE.format(label=label, expr=self.torch_expr, batch=batch, features=features)
        digest = hashlib.sha256(code.encode()).hexdigest()[:8]
        return Task(name=f"fill_{self.op.name}_{digest}", code=code, origin=f"fill:{self.op.name}")

    def messages(self) -> list[dict[str, str]]:
        system, user = (SYSTEM, USER) if self.tier == 1 else (SYSTEM2, USER2)
        return [{"role": "system", "content": system},
                {"role": "user", "content": user.format(expr=self.torch_expr.replace(F + ".", "F."))}]


def _py(value: float) -> str:
    return repr(float(value))


def _c(value: float) -> str:
    text = repr(float(value))
    return f"({text}f)" if value < 0 else f"{text}f"


def items(split: str, device: str = "cuda", tier: int = 1) -> list[FillItem]:
    """Every task of one split, in a fixed order: `train` (the training constants of the seen
    operators, at each size) or `val` (held-out constants of the seen operators and the unseen
    operators, at the first size)."""
    if tier not in TIERS:
        raise ValueError(f"fill: tier {tier!r}; the family has tiers {', '.join(map(str, TIERS))}")
    sizes = (SIZES if tier == 1 else TIER2_SIZES)[device]
    out = []
    for op in OPS:
        if split == "train":
            out += [FillItem(op, v, s, split, tier) for v, s in itertools.product(op.train, sizes)]
        else:
            out += [FillItem(op, v, sizes[0], split, tier) for v in op.heldout]
    return out


# --- the format guard ---------------------------------------------------------------------------

MATH = frozenset("""expf exp logf log log1pf log1p expm1f expm1 tanhf tanh fabsf fabs fmaxf fmax fminf fmin sqrtf sqrt
rsqrtf powf pow erff erf sinf cosf floorf ceilf copysignf __expf __logf __fdividef""".split())
_TOKEN = re.compile(r"\s*(?:(\d+\.?\d*(?:[eE][-+]?\d+)?[fF]?|\.\d+(?:[eE][-+]?\d+)?[fF]?)|([A-Za-z_]\w*)|"
                    r"(<=|>=|==|!=|&&|\|\||[-+*/()?:<>!,]))")
_FENCE = re.compile(r"```[\w+]*\s*\n?(.*?)(?:```|$)", re.S)


_EPT = re.compile(r"ept\s*=\s*(\d+)", re.I)


def _lines(reply: str) -> list[str]:
    """The reply's non-empty lines, inside its first code fence if it has one."""
    text = reply.strip()
    fenced = _FENCE.search(text)
    if fenced:
        text = fenced[1].strip()
    return [ln.strip() for ln in text.splitlines() if ln.strip()]


def expression(reply: str) -> tuple[str | None, str]:
    """The C expression a reply gives, or None and why not.

    Lenient about the wrapping (a code fence, backticks, a leading `y[i] =` or `return`, a trailing
    semicolon), strict about the content: `v`, numbers, operators, parentheses and C math functions."""
    line = next(iter(_lines(reply)), "").strip("`").strip()
    line = re.sub(r"^(?:y\s*\[\s*i\s*(?:\+\s*k\s*)?\]\s*=|return\b|float\s+y\s*=)\s*", "", line).rstrip(";").strip()
    if not line:
        return None, "the reply has no expression"
    if "//" in line or "/*" in line or "*/" in line:
        return None, f"the expression has a comment ({line[:40]!r}): only v, numbers, operators and C math functions"
    if len(line) > MAX_CHARS:
        return None, f"the expression is longer than {MAX_CHARS} characters"
    pos, depth, names = 0, 0, set()
    while pos < len(line):
        m = _TOKEN.match(line, pos)
        if not m or m.end() == pos:
            return None, f"the expression has {line[pos:].strip()[:20]!r}: only v, numbers, operators and C math functions"
        name, op = m[2], m[3]
        if name is not None:
            if name != "v" and name not in MATH:
                return None, f"the expression uses {name!r}: only v and C math functions ({', '.join(sorted(MATH))})"
            names.add(name)
        depth += (op == "(") - (op == ")")
        if depth < 0:
            return None, "the expression's parentheses do not match"
        pos = m.end()
    if depth:
        return None, "the expression's parentheses do not match"
    if "v" not in names:
        return None, "the expression does not use v"
    return line, "one expression"


def tier2_reply(reply: str) -> tuple[tuple[str, int] | None, str]:
    """Tier 2: the expression (first line, as `expression` reads it) and the EPT (the second line,
    `ept=N` with N in EPT_CHOICES and nothing else), or None and why not."""
    expr, why = expression(reply)
    if expr is None:
        return None, why
    lines = _lines(reply)
    choice = lines[1].strip("`").strip().rstrip(";").strip() if len(lines) > 1 else ""
    m = _EPT.fullmatch(choice)
    if not m or int(m[1]) not in EPT_CHOICES:
        said = f", not {choice[:30]!r}" if choice else ""
        return None, f"the second line must be ept=N with N one of {', '.join(map(str, EPT_CHOICES))}{said}"
    return (expr, int(m[1])), f"expression {expr}, ept={m[1]}"


def solution_files(expr: str, device: str, ept: int | None = None) -> dict[str, str]:
    """The workspace files of the solution with this expression in the fused kernel (the sanity
    family's one-pass kernel and binding; with `ept`, tier 2's kernel of that EPT)."""
    from cuda_agent.rl.data.sanity import kernel_files

    kernels = kernel_files("fast", expr, device) if ept is None else kernel_files("ept", expr, device, ept=str(ept))
    return {"model_new.py": MODEL_NEW, **kernels}


def reply_files(reply: str, extra_info: dict[str, Any]) -> tuple[dict[str, str] | None, str]:
    """The files of the reply's solution, or None and why (for workers/reward.py); the row's `tier` says
    which guard reads the reply."""
    device = extra_info.get("device") or "cuda"
    if int(extra_info.get("tier") or 1) == 2:
        parsed, why = tier2_reply(reply)
        return (None, why) if parsed is None else (solution_files(parsed[0], device, parsed[1]), why)
    expr, why = expression(reply)
    if expr is None:
        return None, why
    return solution_files(expr, device), f"expression {expr}"


# --- datasets ------------------------------------------------------------------------------------


def fill_row(item: FillItem, index: int, device: str) -> dict[str, Any]:
    return rl_row(item.task(device), index, item.messages(), "single_turn_agent", device, item.split,
                  data_source=FILL, op=item.op.name, seen=item.op.seen, answer=item.answer, tier=item.tier)


def write_fill_data(out: str | Path, device: str, seed: int = 0, tier: int = 1) -> tuple[Path, Path]:
    """train.parquet (shuffled by `seed`) and val.parquet (the held-out prompts) in `out`."""
    out = Path(out)
    train = items("train", device, tier)
    random.Random(seed).shuffle(train)
    rows = [fill_row(it, i, device) for i, it in enumerate(train)]
    val = [fill_row(it, i, device) for i, it in enumerate(items("val", device, tier))]
    return write_parquet(rows, out / "train.parquet"), write_parquet(val, out / "val.parquet")


def write_fill_sft(path: str | Path, device: str, seed: int = 0, copies: int = 1,
                   ops: list[str] | None = None, tier: int = 1) -> Path:
    """Correct examples of the training tasks as SFT rows (system, user, the correct reply: `FillItem.reply`);
    `ops`: only those operators' tasks (None: every training operator)."""
    train = [it for it in items("train", device, tier) if ops is None or it.op.name in ops] * copies
    random.Random(seed).shuffle(train)
    rows = [sft_row(it.messages() + [{"role": "assistant", "content": it.reply}], None, op=it.op.name, tier=tier)
            for it in train]
    return write_parquet(rows, path)


def summary_of(verdicts: list[dict[str, Any]]) -> dict[str, float]:
    """pass / compile / reward_mean of judged replies (workers/reward.py's verdicts), and the shares that
    reached the speed milestones (tier 2, where replies are timed)."""
    n = max(1, len(verdicts))
    built = [v for v in verdicts if v.get("parsed") and v.get("stage") not in ("parse", "static", "build")]
    fast = [v.get("milestone") for v in verdicts]
    return {"pass": sum(v.get("correct", 0.0) for v in verdicts) / n, "compile": len(built) / n,
            "faster_than_eager": sum(m in ("faster_than_eager", "faster_than_compile") for m in fast) / n,
            "faster_than_compile": fast.count("faster_than_compile") / n,
            "reward_mean": sum(v["score"] for v in verdicts) / n, "n": len(verdicts)}


