"""The program composer: random but valid chains and small DAGs of seeds, no LLM.

A candidate is generated from (run seed, index) alone, so a resumed run regenerates the same
sequence. Shapes are propagated with meta tensors (no memory, no compute); the emitted source reads
as a person would write a KernelBench task: submodules in `__init__`, one line per op in `forward`,
sizes as module-level constants. `Program.with_batch` re-emits it at another batch size (the size
search that lands a task in the runtime window).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field, replace

import torch
import torch.nn as nn
import torch.nn.functional as F

from cuda_agent.synth.categories import PRIORITY, canonical, task_class
from cuda_agent.synth.seeds import LAYOUTS, Seed, group_size, render

_DIM_NAMES = {"NF": ("batch_size", "in_features"), "NCL": ("batch_size", "in_channels", "length"),
              "NCHW": ("batch_size", "in_channels", "height", "width"),
              "NCDHW": ("batch_size", "in_channels", "depth", "height", "width"),
              "BTD": ("batch_size", "seq_len", "embed_dim")}
# Choices per named dimension; height and width are drawn once (square inputs).
_BASE_DIMS = {"NF": [(32, 64, 128), (256, 512, 1024, 2048)], "NCL": [(8, 16), (8, 16, 32), (256, 512, 1024)],
              "NCHW": [(8, 16), (3, 8, 16, 32), (32, 64, 128)],
              "NCDHW": [(2, 4), (3, 8, 16), (8, 16), (16, 32)], "BTD": [(4, 8), (64, 128, 256), (64, 128, 256)]}


def _draw_dims(layout: str, rng: random.Random) -> tuple[int, ...]:
    dims = [rng.choice(opts) for opts in _BASE_DIMS[layout]]
    if layout in ("NCHW", "NCDHW"):
        dims.append(dims[-1])
    return tuple(dims)
_SPATIAL = {"NF": (), "NCL": (2,), "NCHW": (2, 3), "NCDHW": (2, 3, 4), "BTD": (1,)}
_OP_COUNTS = (1, 2, 3, 4, 5)
_OP_WEIGHTS = (1, 3, 4, 3, 2)
MAX_FEATURES = {"NF": 4096, "BTD": 1024, "NCL": 256, "NCHW": 128, "NCDHW": 64}


class ComposeError(ValueError):
    """No valid program could be built from this draw (too few seeds for the layout, shapes too small)."""


@dataclass(frozen=True)
class Line:
    """One statement of forward(): `target = expr`, maybe with a submodule built in __init__."""
    target: str
    expr: str
    seed: str
    attr: str | None = None
    ctor: str | None = None


@dataclass(frozen=True)
class Program:
    layout: str
    dims: tuple[int, ...]                  # the input's shape; dims[0] is the batch
    params: tuple[tuple[str, int], ...]    # __init__ arguments (feature sizes), in order
    lines: tuple[Line, ...]
    imports: tuple[str, ...] = ()
    elems_per_sample: int = 0              # every intermediate's numel / batch (memory bound)

    @property
    def batch(self) -> int:
        return self.dims[0]

    def with_batch(self, batch: int) -> "Program":
        return replace(self, dims=(batch, *self.dims[1:]))

    def with_spatial(self, factor: float) -> "Program":
        """Every spatial size (length, height, width, depth, tokens) times `factor`**(1/k), k of them,
        as a multiple of 4 in [8, 4096]: the size search's second knob once the batch is at its limit."""
        idx = _SPATIAL[self.layout]
        if not idx:
            return self
        step = factor ** (1 / len(idx))
        dims = list(self.dims)
        for i in idx:
            dims[i] = int(min(4096, max(8, round(dims[i] * step / 4) * 4)))
        ratio = 1.0
        for i in idx:
            ratio *= dims[i] / self.dims[i]
        return replace(self, dims=tuple(dims), elems_per_sample=int(self.elems_per_sample * ratio))

    def source(self) -> str:
        return emit(self)


@dataclass
class Candidate:
    index: int
    name: str
    code: str
    ops: list[str]
    categories: list[str]
    composer: str
    structure: str = "chain"
    program: Program | None = None
    want: str | None = None                # the task class it was composed for (None: any)
    compose_s: float = 0.0
    extra: dict = field(default_factory=dict)


def _snake(name: str) -> str:
    name = name.replace("F.", "").replace("hf.", "").replace("torch.", "")
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower().replace(".", "_")


def emit(p: Program) -> str:
    """The task's source: readable, with sizes as constants and the inputs built in get_inputs()."""
    names = _DIM_NAMES[p.layout]
    params = [n for n, _ in p.params]
    inits = [f"        self.{ln.attr} = {ln.ctor}" for ln in p.lines if ln.attr]
    body = [f"        {ln.target} = {ln.expr}" for ln in p.lines]
    doc = " -> ".join(ln.seed for ln in p.lines if ln.seed != "combine")
    uses_f = any("F." in ln.expr for ln in p.lines)
    consts = {n: v for n, v in zip(names, p.dims)}
    consts.update({n: v for n, v in p.params})
    out = ["import torch", "import torch.nn as nn"]
    if uses_f:
        out.append("import torch.nn.functional as F")
    out += list(p.imports)
    signature = ", ".join(["self", *(f"{n}: int" for n in params)])
    out += ["", "", "class Model(nn.Module):", f'    """{doc}."""', "",
            f"    def __init__({signature}):", "        super().__init__()", *inits, "",
            "    def forward(self, x: torch.Tensor) -> torch.Tensor:", *body, "        return x", "", ""]
    out += [f"{k} = {v}" for k, v in consts.items()]
    out += ["", "", "def get_inputs():", f"    return [torch.randn({', '.join(names)})]", "", "",
            "def get_init_inputs():", f"    return [{', '.join(params)}]", ""]
    return "\n".join(out)


def _meta_apply(seed: Seed, x: torch.Tensor, values: dict) -> torch.Tensor:
    """Run one seed on a meta tensor: the output's shape without memory or compute."""
    ns: dict = {"torch": torch, "nn": nn, "F": F}
    for imp in seed.imports:
        exec(imp, ns)
    if seed.ctor:
        with torch.device("meta"):
            ns["m"] = eval(render(seed.ctor, values), ns)
    ns["x"] = x
    out = eval(render(seed.call, {**values, "m": "m", "x": "x"}), ns)
    if not isinstance(out, torch.Tensor):
        raise ComposeError(f"{seed.name} does not return a tensor")
    return out


def _pick(options: list[Seed], rng: random.Random) -> Seed:
    """A source first, then a seed of it: transformers' hundreds of attention blocks and MLPs must not
    crowd out nn.Linear and nn.MultiheadAttention, which KernelBench's tasks are made of."""
    sources = sorted({s.source for s in options})
    source = rng.choice(sources)
    return rng.choice([s for s in options if s.source == source])


def _feature_dim(layout: str) -> int:
    return -1 if layout == "BTD" else 1


class ProgramComposer:
    """Draws candidates from the checked seeds; candidate `index` depends only on (seed, index)."""

    name = "program"

    def __init__(self, seeds: list[Seed], run_seed: int = 0, branch_p: float = 0.15, residual_p: float = 0.2,
                 max_ops: int = 5):
        self.seeds = sorted(seeds, key=lambda s: s.name)
        self.run_seed = run_seed
        self.branch_p = branch_p
        self.residual_p = residual_p
        self.max_ops = max_ops
        self.layouts = [lay for lay in LAYOUTS if any(s.layout == lay for s in self.seeds)]
        if not self.layouts:
            raise ComposeError("the catalog has no layout-specific seeds; run `cuda-agent synth seeds`")

    def classes(self) -> set[str]:
        """The task classes this catalog can compose for."""
        return {canonical(s.category) for s in self.seeds if canonical(s.category) in PRIORITY}

    def compose(self, index: int, want: str | None = None) -> Candidate:
        """Candidate `index`, from (run seed, index, want) alone; `want`: the task class it must
        have (its defining op is one of that category, nothing in it ranks higher)."""
        rng = random.Random(f"{self.run_seed}:{index}" if want is None else f"{self.run_seed}:{index}:{want}")
        seeds = {s.name: s for s in self.seeds}
        for _ in range(20):
            try:
                program, ops = self._draw(rng, want)
            except ComposeError:
                continue
            categories = [seeds[o].category for o in ops]
            if want is not None and task_class(categories) != want:
                continue
            kind = "branch" if any(ln.target == "y" for ln in program.lines) else (
                "residual" if any(ln.expr.startswith("x + ") and ln.seed != "combine" for ln in program.lines) else "chain")
            name = f"synth_{index:06d}_" + "_".join(_snake(o) for o in ops)[:80]
            return Candidate(index, name, program.source(), ops, categories, self.name,
                             structure=kind, program=program, want=want)
        raise ComposeError(f"candidate {index}: no valid program{f' of class {want}' if want else ''} in 20 draws")

    def _pools(self, want: str | None) -> tuple[list[Seed], list[Seed]]:
        """(seeds for the defining op, seeds for the others): for a wanted class, the first are of
        its category and the others rank below it, so the task's class is the wanted one."""
        if want is None:
            return self.seeds, self.seeds
        rank = PRIORITY.index(want)
        core = [s for s in self.seeds if canonical(s.category) == want]
        rest = [s for s in self.seeds if canonical(s.category) in PRIORITY and PRIORITY.index(canonical(s.category)) > rank]
        if not core:
            raise ComposeError(f"the catalog has no {want} seed")
        return core, rest

    def _draw(self, rng: random.Random, want: str | None = None) -> tuple[Program, list[str]]:
        core, rest = self._pools(want)
        layouts = [lay for lay in self.layouts if any(s.accepts(lay) for s in core)]
        if not layouts:
            raise ComposeError(f"no layout takes a {want or 'catalog'} seed")
        layout = layout0 = rng.choice(layouts)
        dims = _draw_dims(layout, rng)
        names = _DIM_NAMES[layout]
        fdim = _feature_dim(layout)
        feat_name = names[fdim]
        params: list[tuple[str, int]] = [(feat_name, dims[fdim])]
        feat: tuple[str | None, int] = (feat_name, dims[fdim])
        x = torch.empty(dims, device="meta")
        lines: list[Line] = []
        ops: list[str] = []
        imports: set[str] = set()
        elems = x.numel()
        target = rng.choices(_OP_COUNTS[: self.max_ops], _OP_WEIGHTS[: self.max_ops])[0]
        terminal_want = bool(core) and want is not None and all(s.terminal for s in core)
        force_at = None if want is None else (target - 1 if terminal_want else rng.choice([0, 0, 0, min(1, target - 1)]))
        forced = False
        attrs: set[str] = set()
        tries = 0
        while len(ops) < target and tries < 40:
            tries += 1
            last = len(ops) == target - 1
            pool = core if (force_at is not None and not forced and len(ops) >= force_at) else rest
            options = [s for s in pool if s.accepts(layout) and (last or not s.terminal)]
            if not options:
                break
            seed = _pick(options, rng)
            if seed.name in ops[-1:]:
                continue
            c_name, c = feat
            c_out = min(rng.choice([c, 2 * c, max(c // 2, 4), 32, 64, 128]), MAX_FEATURES[layout])
            g = group_size(c)
            try:
                y = _meta_apply(seed, x, {"c": c, "c_out": c_out, "heads": g, "groups": g})
            except Exception:
                continue
            if not seed.terminal and (y.dim() < 2 or any(d < 2 for d in y.shape[1:]) or y.numel() == 0):
                continue
            forced = forced or (pool is core and want is not None)
            attr = self._attr(seed, attrs) if seed.ctor else None
            new_name = None
            if seed.changes_features:
                if c_out == c and c_name is not None:
                    new_name = c_name
                else:
                    new_name = self._param_name(layout, params)
                    params.append((new_name, c_out))
            values = {"c": c_name if c_name else c, "c_out": new_name or c_out, "heads": g, "groups": g,
                      "m": f"self.{attr}", "x": "x"}
            expr = render(seed.call, values)
            ctor = render(seed.ctor, values) if seed.ctor else None
            new_layout = seed.out_layout or layout
            same = tuple(y.shape) == tuple(x.shape)
            if same and seed.category != "elementwise" and rng.random() < self.branch_p and len(ops) + 2 <= target:
                other = [s for s in rest if s.accepts(layout) and s.shape_preserving and s.name != seed.name]
                if other:
                    s2 = rng.choice(other)
                    expr2 = render(s2.call, {**values, "m": "self.__", "x": "x"})
                    attr2 = self._attr(s2, attrs) if s2.ctor else None
                    if attr2:
                        expr2 = render(s2.call, {**values, "m": f"self.{attr2}", "x": "x"})
                    combine = rng.choice(["y + z", "y * z"])
                    lines += [Line("y", expr, seed.name, attr, ctor),
                              Line("z", expr2, s2.name, attr2, render(s2.ctor, values) if s2.ctor else None),
                              Line("x", combine, "combine")]
                    ops += [seed.name, s2.name]
                    imports.update(seed.imports + s2.imports)
                    elems += 3 * x.numel()
                    continue
            if same and seed.category not in ("elementwise", "softmax") and rng.random() < self.residual_p:
                expr = f"x + {expr}"
            lines.append(Line("x", expr, seed.name, attr, ctor))
            ops.append(seed.name)
            imports.update(seed.imports)
            if seed.terminal:
                break
            if seed.changes_features or new_layout != layout:
                feat = (new_name, c_out) if seed.changes_features else (
                    (c_name, c) if new_layout == "NF" and y.shape[1] == c else (None, int(y.shape[_feature_dim(new_layout)])))
            elif y.shape[_feature_dim(layout)] != c:  # e.g. a sum over channels with keepdim
                feat = (None, int(y.shape[_feature_dim(layout)]))
            layout = new_layout
            x = y
            elems += y.numel()
        if not ops:
            raise ComposeError("no seed applied")
        if want is not None and not forced:
            raise ComposeError(f"no {want} seed applied")
        program = Program(layout0, dims, tuple(params), tuple(lines), tuple(sorted(imports)), elems // dims[0])
        return program, ops

    @staticmethod
    def _attr(seed: Seed, taken: set[str]) -> str:
        base = _snake(seed.name)
        attr, k = base, 2
        while attr in taken:
            attr, k = f"{base}_{k}", k + 1
        taken.add(attr)
        return attr

    @staticmethod
    def _param_name(layout: str, params: list[tuple[str, int]]) -> str:
        base = {"NF": "features", "BTD": "dim"}.get(layout, "channels")
        first = {"NF": "out_features", "BTD": "hidden_dim"}.get(layout, "out_channels")
        taken = {n for n, _ in params}
        if first not in taken:
            return first
        k = 2
        while f"{base}_{k}" in taken:
            k += 1
        return f"{base}_{k}"
