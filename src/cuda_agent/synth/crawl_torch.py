"""Seeds crawled from torch.nn beyond activations: convolutions in their variants (grouped, strided,
dilated, transposed), recurrent cells and layers, and losses.

Found by class hierarchy (`_ConvNd`, `RNNCellBase`, `RNNBase`, `_Loss`), never by a list of names;
each class is tried on tiny real tensors here, in several call forms, and the first form that
returns a tensor of a usable shape becomes the seed. A class that no form fits is dropped with the
reason. (The catalog check runs every kept seed again in the child, on the run's device.)
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from cuda_agent.synth.seeds import SMALL_SHAPES, Seed, _is_stochastic, group_size, render


@dataclass(frozen=True)
class Dropped:
    """A crawled operator that did not become a seed, and why."""
    name: str
    source: str
    reason: str


def trial(seed: Seed) -> tuple[str | None, tuple[int, ...]]:
    """Run `seed` once in this process on its layout's small shape: (why it is unusable or None,
    the output's shape). Usable: it draws no random numbers and returns a floating-point tensor of at
    least 2 dims (a loss, which ends a task, may return a scalar)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    layout = "NCHW" if seed.layout == "any" else seed.layout
    dims = SMALL_SHAPES[layout]
    c = dims[-1] if layout == "BTD" else dims[1]
    g = group_size(c)
    values = {"c": c, "c_out": 12 if g in (1, 2, 4) else 16, "heads": g, "groups": g}
    ns: dict = {"torch": torch, "nn": nn, "F": F}
    try:
        for imp in seed.imports:
            exec(imp, ns)
        torch.manual_seed(0)
        ns["m"] = eval(render(seed.ctor, values), ns) if seed.ctor else None
        ns["x"] = torch.randn(dims)
        state = torch.get_rng_state()
        with torch.no_grad():
            out = eval(render(seed.call, {**values, "m": "m", "x": "x"}), ns)
    except Exception as e:  # the reason is the seed's record
        return f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}", ()
    if not torch.equal(torch.get_rng_state(), state):  # a dropout a config left on, a router's jitter, ...
        return "its call draws random numbers (a task must give the same output every run)", ()
    if not isinstance(out, torch.Tensor) or not out.is_floating_point():
        return f"returns {type(out).__name__}, not a floating-point tensor", ()
    if seed.category != "loss" and out.dim() < 2:
        return f"returns shape {tuple(out.shape)}; a seed in the middle of a task needs (batch, ...)", ()
    return None, tuple(out.shape)


def _try(seed: Seed) -> str | None:
    return trial(seed)[0]


def _first_form(forms: list[Seed]) -> tuple[Seed | None, str]:
    reasons = []
    for seed in forms:
        why = _try(seed)
        if why is None:
            return seed, ""
        reasons.append(why)
    return None, reasons[-1] if reasons else "no call form"


_CONV_LAYOUT = {"1d": "NCL", "2d": "NCHW", "3d": "NCDHW"}
# Variants beyond the plain 3x3 that the curated table has; kernel size 4 with stride 2 for transposed
# ones (an exact doubling), as in the curated table.
_CONV_VARIANTS = {
    "Grouped": "3, padding=1, groups={groups}", "Strided": "3, stride=2, padding=1",
    "Dilated": "3, padding=2, dilation=2", "Pointwise": "1",
}
_TRANSPOSED_VARIANTS = {
    "Grouped": "4, stride=2, padding=1, groups={groups}", "Stride1": "3, padding=1",
    "OutputPadding": "3, stride=2, padding=1, output_padding=1",
}


def _nn_classes(base) -> list[tuple[str, type]]:
    import torch.nn as nn

    return [(n, c) for n, c in sorted(vars(nn).items())
            if inspect.isclass(c) and issubclass(c, base) and c is not base and not n.startswith(("_", "Lazy"))]


def crawl_convolutions() -> tuple[list[Seed], list[Dropped]]:
    """Every torch.nn convolution class in grouped, strided, dilated and transposed variants."""
    from torch.nn.modules.conv import _ConvNd

    seeds, dropped = [], []
    for name, _ in _nn_classes(_ConvNd):
        layout = _CONV_LAYOUT.get(name[-2:])
        if layout is None:
            dropped.append(Dropped(name, "torch.nn", "not a 1d/2d/3d convolution"))
            continue
        variants = _TRANSPOSED_VARIANTS if "Transpose" in name else _CONV_VARIANTS
        for tag, args in variants.items():
            seed = Seed(f"{name}{tag}", "conv", "torch.nn", "{m}({x})", layout,
                        ctor=f"nn.{name}({{c}}, {{c_out}}, {args})", note="crawled: conv variant")
            why = _try(seed)
            (dropped.append(Dropped(seed.name, "torch.nn", why)) if why else seeds.append(seed))
    return seeds, dropped


def crawl_recurrent() -> tuple[list[Seed], list[Dropped]]:
    """Recurrent cells on (batch, features) and recurrent layers on (batch, tokens, dim)."""
    from torch.nn.modules.rnn import RNNBase, RNNCellBase

    seeds, dropped = [], []
    for name, _ in _nn_classes(RNNCellBase):
        ctor = f"nn.{name}({{c}}, {{c_out}})"
        forms = [Seed(name, "recurrent", "torch.nn", call, "NF", ctor=ctor, note="crawled: recurrent cell")
                 for call in ("{m}({x})", "{m}({x})[0]")]
        seed, why = _first_form(forms)
        (seeds.append(seed) if seed else dropped.append(Dropped(name, "torch.nn", why)))
    for name, _ in _nn_classes(RNNBase):
        forms = [Seed(f"{name}{tag}", "recurrent", "torch.nn", "{m}({x})[0]", "BTD",
                      ctor=f"nn.{name}({{c}}, {{c_out}}, {args}batch_first=True)", note="crawled: recurrent layer")
                 for tag, args in (("", ""), ("2Layer", "num_layers=2, "))]
        for seed in forms:
            why = _try(seed)
            (dropped.append(Dropped(seed.name, "torch.nn", why)) if why else seeds.append(seed))
    return seeds, dropped


# What a loss compares the task's output with, tried in order: a float target of the same shape, a
# class index per row, a +-1 label per element, then the three-tensor forms (pairs, triplets).
_LOSS_CALLS = (
    "{m}({x}, torch.sigmoid({x}.flip(0)))",
    "{m}({x}, {x}.flip(0).argmax(dim=1))",
    "{m}({x}, torch.sign({x}.flip(0)))",
    "{m}(torch.sigmoid({x}), torch.sigmoid({x}.flip(0)))",
    "{m}(F.log_softmax({x}, dim=1), F.softmax({x}.flip(0), dim=1))",
    "{m}({x}, {x}.flip(0), torch.sign({x}.sum(dim=1)))",
    "{m}({x}, {x}.flip(0), {x}.roll(1, 0))",
    "{m}({x}, {x}.flip(0), torch.ones_like({x}))",
)


def crawl_losses() -> tuple[list[Seed], list[Dropped]]:
    """Every torch.nn loss that builds with no arguments, with the first target form it accepts. A
    loss ends a task (its output is the mean loss, a scalar, as in KernelBench's level-1 losses)."""
    from torch.nn.modules.loss import _Loss

    seeds, dropped = [], []
    for name, cls in _nn_classes(_Loss):
        if _is_stochastic(name):  # PoissonNLLLoss is deterministic, but the source filter reads it as random
            dropped.append(Dropped(name, "torch.nn", "its name reads as a random op to the stochastic filter"))
            continue
        required = [p for p in list(inspect.signature(cls.__init__).parameters.values())[1:]
                    if p.default is inspect.Parameter.empty and p.kind == p.POSITIONAL_OR_KEYWORD]
        if required:
            dropped.append(Dropped(name, "torch.nn", f"needs arguments: {', '.join(p.name for p in required)}"))
            continue
        forms = [Seed(name, "loss", "torch.nn", call, "NF", ctor=f"nn.{name}()", note="crawled: loss")
                 for call in _LOSS_CALLS]
        seed, why = _first_form(forms)
        (seeds.append(seed) if seed else dropped.append(Dropped(name, "torch.nn", why)))
    return seeds, dropped


def crawl_torch_blocks() -> tuple[list[Seed], list[Dropped]]:
    seeds, dropped = [], []
    for crawl in (crawl_convolutions, crawl_recurrent, crawl_losses):
        s, d = crawl()
        seeds += s
        dropped += d
    return seeds, dropped
