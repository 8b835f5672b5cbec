"""What a value in model_new.py is, as far as the source shows: a tensor, a constant, a callable
the rules allow. The base of python_names.NameJudge and python_expr.ExpressionJudge, which judge
with these answers.

Tensors are tracked by name and flow-insensitively (a name assigned a tensor anywhere in a function
holds one everywhere in it): forward's arguments, what the extension, allocation, views and torch
calls return, self's parameters and buffers, and .weight/.bias of submodules. Values the source
does not show as tensors (a helper's plain arguments, say) are not; the runtime dispatch check
covers what this misses.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from cuda_agent.harness.static.scope import Checker, Scope
from cuda_agent.harness.static.rules import (
    EXTENSION_MODULE,
    MODULE_TENSOR_ATTRIBUTES,
    TENSOR_METADATA_ATTRIBUTES,
    TENSOR_METADATA_METHODS,
    TENSOR_VIEW_ATTRIBUTES,
    TORCH_VALUES,
)


CONSTANT_CALLS = {"int", "float", "str", "bool", "tuple", "len", "min", "max", "abs", "round", "dict", "list",
                  "range", "frozenset", "set"}


class ValueReader:
    """Answers about expressions, in the checker's current scopes."""

    def __init__(self, checker: Checker):
        self.c = checker

    def is_self(self, node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and node.id == "self" and self.c.in_method()

    def is_self_attr(self, node: ast.AST, names: set[str] | None = None) -> bool:
        return isinstance(node, ast.Attribute) and self.is_self(node.value) and (names is None or node.attr in names)

    def is_extension(self, node: ast.AST) -> bool:
        """The extension module: cuda_extension, the load_inline result, or self.<attr> holding it."""
        if isinstance(node, ast.Name) and not self.c.locally_bound(node.id):
            return node.id in self.c.facts.extensions
        return self.is_self_attr(node, self.c.facts.extension_attrs)

    def tainted(self) -> set[str]:
        return set().union(*(s.tainted for s in self.c.scopes))

    # --- what a value is ----------------------------------------------------------------------

    def constant_expression(self, node: ast.AST | None, allow_containers: bool = True) -> bool:
        """Literals, module constants, dtypes and arithmetic on them: values that run no code."""
        if node is None or isinstance(node, ast.Constant):
            return True
        recurse = lambda n: self.constant_expression(n, allow_containers)  # noqa: E731
        if isinstance(node, ast.Name):
            return node.id in self.c.facts.globals and node.id not in self.c.facts.functions or node.id in (
                "None", "True", "False")
        if isinstance(node, ast.Attribute):
            qualified = self.c.qualify(node) or ""
            parts = qualified.split(".")
            return (parts[0] == "torch" and len(parts) == 2 and parts[1] in TORCH_VALUES) or parts[0] == "math"
        if isinstance(node, ast.Tuple | ast.Starred | ast.UnaryOp | ast.BinOp | ast.BoolOp | ast.Compare | ast.IfExp
                      | ast.JoinedStr | ast.FormattedValue | ast.Subscript | ast.Slice):
            return all(recurse(n) for n in ast.iter_child_nodes(node) if isinstance(n, ast.expr))
        if isinstance(node, ast.List | ast.Set | ast.Dict):
            return allow_containers and all(recurse(n) for n in ast.iter_child_nodes(node) if isinstance(n, ast.expr))
        if isinstance(node, ast.Call):
            return self.constant_call(node) and all(recurse(a) for a in node.args) \
                and all(recurse(k.value) for k in node.keywords)
        return False

    def default_value(self, node: ast.AST, kind: str) -> bool:
        """Defaults: constants; in __init__ also lists and nn classes (act_layer=nn.GELU)."""
        if kind != "compute":
            qualified = self.c.qualify(node) or ""
            parts = qualified.split(".")
            if len(parts) == 3 and parts[:2] == ["torch", "nn"] and parts[2][:1].isupper():
                return True
        return self.constant_expression(node, allow_containers=kind != "compute")

    def constant_call(self, node: ast.Call) -> bool:
        if isinstance(node.func, ast.Name):
            return node.func.id in CONSTANT_CALLS and node.func.id not in self.c.facts.globals
        qualified = self.c.qualify(node.func) or ""
        return qualified in ("torch.device", "torch.Size", "torch.finfo", "torch.iinfo") or qualified.startswith(
            "math.")

    def tensorish(self, node: ast.AST) -> bool:
        """Whether an expression evidently holds a tensor (or a container of tensors)."""
        if isinstance(node, ast.Name):
            return node.id in self.tainted()
        if isinstance(node, ast.Attribute):
            return self.tensorish_attribute(node)
        if isinstance(node, ast.Call):
            return self.tensorish_call(node)
        if isinstance(node, ast.Subscript | ast.Starred):
            return self.tensorish(node.value)
        if isinstance(node, ast.BinOp):
            return self.tensorish(node.left) or self.tensorish(node.right)
        if isinstance(node, ast.UnaryOp):
            return not isinstance(node.op, ast.Not) and self.tensorish(node.operand)
        if isinstance(node, ast.IfExp):
            return self.tensorish(node.body) or self.tensorish(node.orelse)
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            return any(self.tensorish(e) for e in node.elts)
        if isinstance(node, ast.Dict):
            return any(self.tensorish(v) for v in node.values)
        if isinstance(node, ast.ListComp | ast.GeneratorExp | ast.SetComp):
            return self.tensorish(node.elt) or any(self.tensorish(g.iter) for g in node.generators)
        return False

    def tensorish_attribute(self, node: ast.Attribute) -> bool:
        if node.attr in TENSOR_METADATA_ATTRIBUTES or self.c.qualify(node) is not None:
            return False
        if self.is_self_attr(node):
            return node.attr in self.c.facts.tensors
        if node.attr in MODULE_TENSOR_ATTRIBUTES:
            return True
        return node.attr in TENSOR_VIEW_ATTRIBUTES and self.tensorish(node.value)

    def tensorish_call(self, node: ast.Call) -> bool:
        func = node.func
        qualified = self.c.qualify(func)
        if qualified is not None:
            parts = qualified.split(".")
            return parts[0] == EXTENSION_MODULE or (parts[0] == "torch" and parts[-1] not in TORCH_VALUES)
        if isinstance(func, ast.Name):
            facts = self.c.facts
            if func.id in facts.extension_functions or func.id in facts.functions:
                return True
            return func.id in ("list", "tuple", "reversed", "sorted", "iter", "next", "min", "max", "sum", "abs") \
                and any(self.tensorish(a) for a in node.args)
        if not isinstance(func, ast.Attribute):
            return False
        if self.is_extension(func.value) or (self.is_self(func.value) and func.attr in self.c.facts.methods
                                             | self.c.facts.extension_fn_attrs):
            return True
        if func.attr in TENSOR_METADATA_METHODS:
            return False
        return self.tensorish(func.value)

    # --- per-function facts -------------------------------------------------------------------

    def propagate_taint(self, fn: ast.AST, scope: Scope) -> None:
        """Names assigned a tensor anywhere in the function hold tensors (flow-insensitive). A
        worklist: when a name becomes a tensor, only the assignments that read it are looked at again."""
        bindings = list(assignments(fn))
        readers: dict[str, list[int]] = {}
        for i, (_, value) in enumerate(bindings):
            for name in {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}:
                readers.setdefault(name, []).append(i)
        pending = list(range(len(bindings)))
        while pending:
            target, value = bindings[pending.pop()]
            for name in self.taint_target(target, value, scope):
                pending.extend(readers.get(name, []))

    def taint_target(self, target: ast.AST, value: ast.AST, scope: Scope) -> set[str]:
        """Taint the names of `target` that receive a tensor from `value`; returns the new ones."""
        if isinstance(target, ast.Tuple | ast.List):
            parts = self.unpacked(value, len(target.elts))
            if parts is not None:
                return set().union(*(self.taint_target(t, v, scope) for t, v in zip(target.elts, parts)))
        if not self.tensorish(value):
            return set()
        names = {n.id for n in ast.walk(target) if isinstance(n, ast.Name)} - scope.tainted
        scope.tainted |= names
        return names

    def unpacked(self, value: ast.AST, count: int) -> list[ast.AST] | None:
        """What each of `count` unpacked targets receives, where the value says so: a tuple literal,
        enumerate(xs) (an index, then an element) or zip(a, b, ...) (an element of each)."""
        if isinstance(value, ast.Tuple | ast.List) and len(value.elts) == count:
            return list(value.elts)
        if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
                and not self.c.locally_bound(value.func.id)):
            return None
        if value.func.id == "enumerate" and count == 2 and value.args:
            return [ast.Constant(0), value.args[0]]
        if value.func.id == "zip" and len(value.args) == count:
            return list(value.args)
        return None

    def collect_callables(self, fn: ast.AST, scope: Scope) -> None:
        """Local names that hold only callables the rules allow (lambdas, nested defs, the extension)."""
        good: set[str] = set()
        bad: set[str] = set(scope.params)
        for node in local_nodes(fn):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                good.add(node.name)
            elif isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
                single = len(targets) == 1 and isinstance(targets[0], ast.Name)
                (good if single and self.allowed_callable(node.value) else bad).update(names)
            elif isinstance(node, ast.For | ast.AugAssign | ast.NamedExpr):
                bad.update(n.id for n in ast.walk(node.target) if isinstance(n, ast.Name))
        scope.callables = good - bad

    def allowed_callable(self, value: ast.AST) -> bool:
        facts = self.c.facts
        if isinstance(value, ast.Lambda):
            return True
        if isinstance(value, ast.Name):
            return value.id in facts.extension_functions or value.id in facts.functions
        if isinstance(value, ast.Attribute):
            return self.is_extension(value.value) or (self.c.qualify(value) or "").startswith(EXTENSION_MODULE + ".") \
                or self.is_self_attr(value, facts.methods | facts.extension_fn_attrs)
        return False


def assignments(fn: ast.AST) -> Iterator[tuple[ast.AST, ast.AST]]:
    """(target, value) of every binding in a function's own body: =, :=, +=, annotated, for."""
    for node in local_nodes(fn):
        if isinstance(node, ast.Assign):
            yield from ((target, node.value) for target in node.targets)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign | ast.NamedExpr) and node.value is not None:
            yield node.target, node.value
        elif isinstance(node, ast.For):
            yield node.target, node.iter


def local_nodes(fn: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function's own body (not of nested functions, lambdas or classes)."""
    body = [fn.body] if isinstance(fn, ast.Lambda) else list(getattr(fn, "body", []))
    stack = list(body)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        stack.extend(ast.iter_child_nodes(node))
