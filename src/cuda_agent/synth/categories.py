"""Operator categories, one categorizer for seeds, synthesized tasks and KernelBench alike.

A name (`nn.Conv2d`, `torch.bmm`, `LlamaMLP`, `F.cross_entropy`) maps to a category by the rules
below; a task's categories are those of the names it calls (read from its source, no execution),
and its class is the first of them in `PRIORITY`: a conv followed by a ReLU is a conv task, an
LSTM with a Linear head a recurrent one. The mix a synth run targets is a share per class.
"""

from __future__ import annotations

import ast
import re

# Task classes, most defining first. CORE: the classes KernelBench levels 2-3 are built around.
PRIORITY = ("attention", "recurrent", "conv", "gemm", "loss", "embedding", "norm", "pool", "reduction",
            "softmax", "activation", "elementwise")
CORE = ("attention", "conv", "gemm")
# Names used before the categories were unified (datasets made then carry them).
ALIASES = {"linear": "gemm", "matmul": "gemm"}

# (pattern on the last name part, category), first match wins; matched case-sensitively on class
# names (CamelCase) and on lower-case function names alike.
_RULES: tuple[tuple[str, str], ...] = (
    (r"(MultiheadAttention|Attention|^scaled_dot_product_attention$|^multi_head_attention|^Transformer|"
     r"(Encoder|Decoder)Layer$)", "attention"),
    (r"(^(RNN|LSTM|GRU)(Cell)?$|RNNBase|CellBase|^(rnn|lstm|gru)(_cell)?(_tanh|_relu)?$)", "recurrent"),
    (r"(Conv(Transpose)?[123]d$|^conv(_transpose)?[123]d$|^conv_tbc$|^unfold$|^Unfold$|^fold$|^Fold$)", "conv"),
    (r"(Loss$|_loss$|^cross_entropy$|^kl_div$|^binary_cross_entropy|^nll_loss$|^triplet_margin|^cosine_embedding)",
     "loss"),
    (r"(^(Linear|Bilinear)$|MLP$|FeedForward$|^(matmul|mm|bmm|addmm|baddbmm|addbmm|addmv|mv|einsum|tensordot|"
     r"linear|bilinear|outer|dot|vdot|inner|chain_matmul)$)", "gemm"),
    (r"(Embedding|Embeddings$|^embedding(_bag)?$|^one_hot$)", "embedding"),
    (r"(Norm(\d?d)?$|^(batch|layer|group|instance|rms|local_response)_norm$|^normalize$|LocalResponseNorm)", "norm"),
    (r"(Pool|pool[123]d$|^adaptive_(avg|max)_pool|Pooler$|Pooling$|^pixel_(un)?shuffle$|PixelShuffle|Upsample|"
     r"^interpolate$)", "pool"),
    (r"(^(sum|mean|amax|amin|max|min|prod|cumsum|cumprod|logsumexp|argmax|argmin|var|std|norm|cummax|cummin|"
     r"median|mode|all|any|count_nonzero|nansum|nanmean|var_mean|std_mean|diff|trace|topk|sort)$)", "reduction"),
    (r"(Softmax|Softmin|^(softmax|log_softmax|softmin)$)", "softmax"),
    (r"(^(ReLU|ReLU6|LeakyReLU|PReLU|RReLU|ELU|SELU|CELU|GELU|SiLU|Mish|Softplus|Softsign|Softshrink|Hardshrink|"
     r"Tanhshrink|Hardtanh|Hardswish|Hardsigmoid|LogSigmoid|Sigmoid|Tanh|GLU|Threshold)$|Activation$|Act$|GELU|"
     r"^(relu|relu6|leaky_relu|prelu|elu|selu|celu|gelu|silu|mish|softplus|softsign|softshrink|hardshrink|"
     r"tanhshrink|hardtanh|hardswish|hardsigmoid|logsigmoid|sigmoid|tanh|glu|threshold|swish)_?$)", "activation"),
)
_COMPILED = tuple((re.compile(p), c) for p, c in _RULES)
# Calls that move data around without computing: not operators of a task.
_NOT_OPS = {"view", "reshape", "permute", "transpose", "contiguous", "flatten", "unsqueeze", "squeeze", "size",
            "expand", "expand_as", "repeat", "cat", "stack", "split", "chunk", "to", "float", "half", "super",
            "randn", "rand", "randint", "zeros", "ones", "empty", "arange", "tensor", "Parameter", "ModuleList",
            "Sequential", "ModuleDict", "range", "len", "int", "float_", "list", "tuple", "append", "extend",
            "__init__", "zip", "enumerate", "isinstance", "print", "getattr", "setattr", "min_", "dim", "numel",
            "clone", "detach", "new_zeros", "new_ones", "zeros_like", "ones_like", "full", "full_like", "masked_fill",
            "register_buffer", "tril", "triu", "item", "t", "narrow", "select", "index_select", "gather", "roll",
            "flip", "pad", "fill_", "copy_", "type_as", "contiguous_", "eye", "split_with_sizes", "unbind"}
_ELEMENTWISE = {"add", "sub", "mul", "div", "exp", "log", "sqrt", "rsqrt", "pow", "abs", "neg", "clamp", "clip",
                "where", "maximum", "minimum", "sin", "cos", "erf", "reciprocal", "sign", "square", "addcmul",
                "addcdiv", "lerp", "log1p", "expm1", "floor", "ceil", "round", "trunc", "frac", "fmod", "remainder",
                "hypot", "atan2", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "exp2",
                "log2", "log10", "logit", "erfc", "erfinv", "lgamma", "digamma", "sgn", "nan_to_num", "clamp_min",
                "clamp_max", "heaviside", "xlogy", "sinc", "deg2rad", "rad2deg", "bitwise_not", "logical_not"}
_BINOPS = {ast.Add: "elementwise", ast.Sub: "elementwise", ast.Mult: "elementwise", ast.Div: "elementwise",
           ast.Pow: "elementwise", ast.MatMult: "gemm"}


def category_of_name(name: str) -> str | None:
    """The category of an operator's name (`Conv2d`, `F.gelu`, `torch.bmm`, `hf.LlamaMLP`), or None
    for names that are not operators (reshapes, constructors of inputs, containers)."""
    last = name.split(".")[-1]
    if last in _NOT_OPS or not last:
        return None
    for pattern, category in _COMPILED:
        if pattern.search(last):
            return category
    if last in _ELEMENTWISE or last.rstrip("_") in _ELEMENTWISE:
        return "elementwise"
    return None


def canonical(category: str) -> str:
    return ALIASES.get(category, category)


def task_class(categories: list[str] | tuple[str, ...]) -> str:
    """The class of a task with these operator categories: the first of PRIORITY present."""
    present = {canonical(c) for c in categories}
    return next((c for c in PRIORITY if c in present), "elementwise")


def _call_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def code_operators(code: str) -> list[tuple[str, str]]:
    """(name, category) of each operator call site in a task's model code: the classes and helper
    functions (get_inputs and get_init_inputs build inputs, they are not the task). A submodule is
    counted where `__init__` builds it (`nn.Conv2d(...)`), not where forward calls `self.conv(x)`;
    arithmetic in `__init__` is on sizes, not tensors."""
    tree = ast.parse(code)
    ops: list[tuple[str, str]] = []
    skip = {"get_inputs", "get_init_inputs"}
    for top in tree.body:
        if not isinstance(top, (ast.ClassDef, ast.FunctionDef)) or top.name in skip:
            continue
        if isinstance(top, ast.ClassDef) and top.name not in ("Model", "ModelNew"):
            cat = category_of_name(top.name)  # a helper block named for what it is (CausalSelfAttention)
            if cat:
                ops.append((top.name, cat))
        funcs = [n for n in ast.walk(top) if isinstance(n, ast.FunctionDef)]
        for fn in funcs:
            start = len(ops)
            for node in _own_nodes(fn):
                if isinstance(node, ast.Call):
                    name = _call_name(node.func)
                    if name is None or _is_self_call(node.func) or (isinstance(node.func, ast.Name)
                                                                     and not name[:1].isupper()):
                        continue  # self.conv(x); a builtin such as max(1, c // 2)
                    cat = category_of_name(name)
                    if cat:
                        ops.append((name, cat))
                elif isinstance(node, ast.BinOp) and type(node.op) in _BINOPS and fn.name != "__init__":
                    ops.append((type(node.op).__name__, _BINOPS[type(node.op)]))
            mine = [c for _, c in ops[start:]]
            if mine.count("gemm") >= 2 and "softmax" in mine:  # softmax(q @ k^T) @ v written out
                ops.append(("softmax(QK)V", "attention"))
    return ops


def _own_nodes(fn: ast.FunctionDef):
    """The nodes of a function without those of functions defined inside it (walked on their own)."""
    stack = list(fn.body)
    while stack:
        node = stack.pop()
        yield node
        stack.extend(c for c in ast.iter_child_nodes(node) if not isinstance(c, ast.FunctionDef))


def _is_self_call(func: ast.expr) -> bool:
    return isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self"


def code_categories(code: str) -> list[str]:
    """The distinct categories of a task's operators, in PRIORITY order."""
    present = {c for _, c in code_operators(code)}
    return [c for c in PRIORITY if c in present]
