"""The seed catalog: operator classes a composed task is built from.

A seed is a source snippet, not an object: `ctor` builds a submodule in `__init__` (None for a
functional op) and `call` applies it in `forward`. Placeholders: `{m}` the submodule, `{x}` the
input, `{c}` its feature size (dim 1 for the N,C,... layouts, the last dim for BTD), `{c_out}` a new
feature size the composer chooses, `{heads}` / `{groups}` a divisor of `{c}`.

Layouts: NF (batch, features), NCL, NCHW, NCDHW (conv layouts), BTD (batch, tokens, dim), and
`any` for ops that keep any shape. A curated table covers the common operators with shapes that
work; the crawl here adds every torch.nn module and torch.nn.functional op that runs on a tensor
with no extra arguments and the unary ops of torch's operator test database where it is importable;
crawl_torch.py adds convolution variants, recurrent cells and losses, crawl_transformers.py the
building blocks of transformers' models, and crawl.py puts them together. Checking (one run on
small inputs, in a child process) is in seedcheck.py. Categories are those of categories.py.
"""

from __future__ import annotations

import inspect
from dataclasses import asdict, dataclass, field, replace
from typing import Any

LAYOUTS = ("NF", "NCL", "NCHW", "NCDHW", "BTD")
SMALL_SHAPES = {"NF": (4, 16), "NCL": (2, 8, 32), "NCHW": (2, 8, 16, 16), "NCDHW": (2, 8, 8, 8, 8),
                "BTD": (2, 16, 32)}
# Random or training-only behaviour, and ops that need arguments we cannot guess: never seeds.
STOCHASTIC_NAMES = ("dropout", "rrelu", "bernoulli", "multinomial", "randn", "rand_like", "randint",
                    "normal_", "uniform_", "gumbel", "poisson", "alpha_dropout", "feature_alpha_dropout")


@dataclass(frozen=True)
class Seed:
    name: str
    category: str
    source: str              # "torch.nn", "torch.nn.functional", "torch", "op_db", "transformers"
    call: str                # e.g. "{m}({x})" or "torch.tanh({x})"
    layout: str              # input layout, or "any"
    ctor: str | None = None  # e.g. "nn.Conv2d({c}, {c_out}, 3, padding=1)"
    out_layout: str | None = None  # None: the same as the input
    imports: tuple[str, ...] = ()
    dtype: str = "float32"
    checked: bool | None = None    # None: not run yet; False: failed its check
    note: str = ""

    @property
    def changes_features(self) -> bool:
        return "{c_out}" in (self.ctor or "") or "{c_out}" in self.call

    @property
    def terminal(self) -> bool:
        """A loss ends a task: its output (the mean loss) feeds nothing."""
        return self.category == "loss"

    @property
    def shape_preserving(self) -> bool:
        return not self.changes_features and self.out_layout is None and self.category in (
            "activation", "elementwise", "norm", "softmax")

    def accepts(self, layout: str) -> bool:
        return self.layout in ("any", layout)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["imports"] = list(self.imports)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Seed":
        return cls(**{**d, "imports": tuple(d.get("imports") or ())})


def _m(name, category, ctor, layout, call="{m}({x})", out_layout=None) -> Seed:
    return Seed(name, category, "torch.nn", call, layout, ctor=ctor, out_layout=out_layout)


def _f(name, category, call, layout="any", source="torch", out_layout=None) -> Seed:
    return Seed(name, category, source, call, layout, out_layout=out_layout)


CURATED: tuple[Seed, ...] = (
    _m("Conv1d", "conv", "nn.Conv1d({c}, {c_out}, 3, padding=1)", "NCL"),
    _m("Conv2d", "conv", "nn.Conv2d({c}, {c_out}, 3, padding=1)", "NCHW"),
    _m("Conv2dStride2", "conv", "nn.Conv2d({c}, {c_out}, 3, stride=2, padding=1)", "NCHW"),
    _m("Conv2d1x1", "conv", "nn.Conv2d({c}, {c_out}, 1)", "NCHW"),
    _m("DepthwiseConv2d", "conv", "nn.Conv2d({c}, {c}, 3, padding=1, groups={c})", "NCHW"),
    _m("Conv3d", "conv", "nn.Conv3d({c}, {c_out}, 3, padding=1)", "NCDHW"),
    _m("ConvTranspose1d", "conv", "nn.ConvTranspose1d({c}, {c_out}, 4, stride=2, padding=1)", "NCL"),
    _m("ConvTranspose2d", "conv", "nn.ConvTranspose2d({c}, {c_out}, 4, stride=2, padding=1)", "NCHW"),
    _m("ConvTranspose3d", "conv", "nn.ConvTranspose3d({c}, {c_out}, 4, stride=2, padding=1)", "NCDHW"),
    _m("Linear", "gemm", "nn.Linear({c}, {c_out})", "NF"),
    _m("TokenLinear", "gemm", "nn.Linear({c}, {c_out})", "BTD"),
    _m("Bilinear", "gemm", "nn.Bilinear({c}, {c}, {c_out})", "NF", call="{m}({x}, {x})"),
    _m("BatchNorm1d", "norm", "nn.BatchNorm1d({c})", "NF"),
    _m("BatchNorm1dSeq", "norm", "nn.BatchNorm1d({c})", "NCL"),
    _m("BatchNorm2d", "norm", "nn.BatchNorm2d({c})", "NCHW"),
    _m("BatchNorm3d", "norm", "nn.BatchNorm3d({c})", "NCDHW"),
    _m("InstanceNorm1d", "norm", "nn.InstanceNorm1d({c}, affine=True)", "NCL"),
    _m("InstanceNorm2d", "norm", "nn.InstanceNorm2d({c}, affine=True)", "NCHW"),
    _m("InstanceNorm3d", "norm", "nn.InstanceNorm3d({c}, affine=True)", "NCDHW"),
    _m("GroupNorm", "norm", "nn.GroupNorm({groups}, {c})", "NCHW"),
    _m("GroupNorm3d", "norm", "nn.GroupNorm({groups}, {c})", "NCDHW"),
    _m("LayerNorm", "norm", "nn.LayerNorm({c})", "NF"),
    _m("TokenLayerNorm", "norm", "nn.LayerNorm({c})", "BTD"),
    _m("RMSNorm", "norm", "nn.RMSNorm({c})", "BTD"),
    _m("MaxPool1d", "pool", "nn.MaxPool1d(2)", "NCL"),
    _m("AvgPool1d", "pool", "nn.AvgPool1d(2)", "NCL"),
    _m("MaxPool2d", "pool", "nn.MaxPool2d(2)", "NCHW"),
    _m("AvgPool2d", "pool", "nn.AvgPool2d(2)", "NCHW"),
    _m("MaxPool3d", "pool", "nn.MaxPool3d(2)", "NCDHW"),
    _m("AvgPool3d", "pool", "nn.AvgPool3d(2)", "NCDHW"),
    _m("GlobalAvgPool2d", "pool", "nn.AdaptiveAvgPool2d(1)", "NCHW", call="torch.flatten({m}({x}), 1)",
       out_layout="NF"),
    _m("MultiheadAttention", "attention", "nn.MultiheadAttention({c}, {heads}, batch_first=True)", "BTD",
       call="{m}({x}, {x}, {x}, need_weights=False)[0]"),
    _f("ScaledDotProductAttention", "attention",
       "F.scaled_dot_product_attention({x}, {x}, {x})", "BTD"),
    _f("SelfSimilarity", "attention", "torch.softmax(torch.bmm({x}, {x}.transpose(1, 2)), dim=-1) @ {x}", "BTD"),
    _f("Gram", "gemm", "torch.matmul({x}.transpose(1, 2), {x})", "BTD"),
    _f("Softmax", "softmax", "torch.softmax({x}, dim=1)"),
    _f("LogSoftmax", "softmax", "torch.log_softmax({x}, dim=1)"),
    _f("TokenSoftmax", "softmax", "torch.softmax({x}, dim=-1)", "BTD"),
    _f("Add", "elementwise", "{x} + 1.0"),
    _f("Scale", "elementwise", "{x} * 2.0"),
    _f("Clamp", "elementwise", "torch.clamp({x}, min=-1.0, max=1.0)"),
    _f("Swish", "activation", "{x} * torch.sigmoid({x})"),
    _f("Square", "elementwise", "{x} * {x}"),
    _f("SumChannels", "reduction", "torch.sum({x}, dim=1, keepdim=True)", "NCHW"),
    _f("MeanSpatial", "reduction", "torch.mean({x}, dim=(2, 3))", "NCHW", out_layout="NF"),
    _f("MaxSpatial", "reduction", "torch.amax({x}, dim=(2, 3))", "NCHW", out_layout="NF"),
    _f("MeanLength", "reduction", "torch.mean({x}, dim=2)", "NCL", out_layout="NF"),
    _f("MeanVolume", "reduction", "torch.mean({x}, dim=(2, 3, 4))", "NCDHW", out_layout="NF"),
    _f("MeanTokens", "reduction", "torch.mean({x}, dim=1)", "BTD", out_layout="NF"),
    _f("LogSumExp", "reduction", "torch.logsumexp({x}, dim=1, keepdim=True)", "NCHW"),
    _f("Cumsum", "reduction", "torch.cumsum({x}, dim=1)"),
)

# torch.nn classes the crawl must not take: stochastic, containers, or better covered above.
_SKIP_MODULES = {"Module", "Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict",
                 "Identity", "Flatten", "Unflatten", "Container", "Softmax2d", "Threshold"}


def _is_stochastic(name: str) -> bool:
    low = name.lower()
    return any(s in low for s in STOCHASTIC_NAMES)


def crawl_nn_modules() -> list[Seed]:
    """Every torch.nn module class that builds with no arguments: shape-keeping activations."""
    import torch.nn as nn

    seeds = []
    for name, cls in sorted(vars(nn).items()):
        if not (inspect.isclass(cls) and issubclass(cls, nn.Module)) or name in _SKIP_MODULES:
            continue
        if _is_stochastic(name) or name.startswith(("_", "Lazy")) or any(
                w in name for w in ("Loss", "Transformer", "Upsampl", "RNN", "LSTM", "GRU", "Pad", "Embedding")):
            continue
        params = inspect.signature(cls.__init__).parameters.values()
        if any(p.default is inspect.Parameter.empty and p.kind == p.POSITIONAL_OR_KEYWORD
               for p in list(params)[1:]):
            continue
        category = "softmax" if "Softmax" in name or "Softmin" in name else "activation"
        call = "{m}({x})"
        ctor = f"nn.{name}(dim=1)" if category == "softmax" else f"nn.{name}()"
        seeds.append(Seed(name, category, "torch.nn", call, "any", ctor=ctor, note="crawled"))
    return seeds


_FUNCTIONAL_ACTIVATIONS = ("relu", "relu6", "elu", "selu", "celu", "gelu", "silu", "mish", "softplus",
                           "softsign", "tanhshrink", "hardtanh", "hardswish", "hardsigmoid", "logsigmoid",
                           "leaky_relu", "softshrink", "hardshrink", "sigmoid", "tanh")


def crawl_functional() -> list[Seed]:
    """torch.nn.functional activations that take one tensor and nothing else."""
    import torch.nn.functional as F

    return [_f(f"F.{n}", "activation", f"F.{n}({{x}})", source="torch.nn.functional")
            for n in _FUNCTIONAL_ACTIVATIONS if callable(getattr(F, n, None))]


def crawl_op_db() -> list[Seed]:
    """Unary elementwise ops of torch's operator test database (needs torch's test extras)."""
    try:
        import torch
        from torch.testing._internal.common_methods_invocations import UnaryUfuncInfo, op_db
    except Exception:  # the database needs test-only packages (expecttest); optional
        return []
    seeds = []
    for info in op_db:
        name = info.name
        if not isinstance(info, UnaryUfuncInfo) or "." in name or info.variant_test_name:
            continue
        if _is_stochastic(name) or not hasattr(torch, name):
            continue
        domain = getattr(info, "domain", (None, None))
        if domain != (None, None):  # log, sqrt, acos...: only valid on part of the line
            continue
        if torch.float32 not in info.supported_dtypes("cpu"):
            continue
        seeds.append(_f(f"torch.{name}", "elementwise", f"torch.{name}({{x}})", source="op_db"))
    return seeds


def _unique(seeds: list[Seed]) -> list[Seed]:
    seen, out = set(), []
    for s in seeds:
        if s.name not in seen:
            seen.add(s.name)
            out.append(s)
    return out


def group_size(c: int) -> int:
    """The largest of 8, 4, 2, 1 that divides `c` (attention heads, norm groups)."""
    return next(g for g in (8, 4, 2, 1) if c % g == 0)


def render(template: str, values: dict[str, object]) -> str:
    """A seed snippet with its placeholders filled (`{c}` -> a name or a number...)."""
    out = template
    for key, value in values.items():
        out = out.replace("{" + key + "}", str(value))
    return out


@dataclass
class Catalog:
    seeds: list[Seed] = field(default_factory=list)
    dropped: list[dict] = field(default_factory=list)  # crawled operators that are not seeds: name, source, reason

    def usable(self) -> list[Seed]:
        """Seeds that passed their check (or were not checked)."""
        return [s for s in self.seeds if s.checked is not False]

    def counts(self, key: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.usable():
            out[getattr(s, key)] = out.get(getattr(s, key), 0) + 1
        return dict(sorted(out.items()))

    def with_check(self, results: dict[str, tuple[bool, str]]) -> "Catalog":
        return Catalog([replace(s, checked=results[s.name][0], note=results[s.name][1] or s.note)
                        if s.name in results else s for s in self.seeds], self.dropped)
