"""model_new.py's definitions, as pass 2 of the Python check meets them (python.PythonChecker mixes
this in): the statements allowed at module level, the classes (ModelNew alone, its bases, its
body) and the functions (decorators, defaults, a scope of their own with forward's tensor
arguments tracked).
"""

from __future__ import annotations

import ast

from cuda_agent.harness.static.python_module import COMPOUND
from cuda_agent.harness.static.scope import Scope
from cuda_agent.harness.static.rules import (
    INPUT_BUILDERS,
    RELAXED_BASES,
    RELAXED_DUNDER_METHODS,
    RELAXED_OVERRIDABLE,
    TYPE_ANNOTATIONS_NOT_TENSOR,
    module_attribute_names,
)

COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


class DefinitionChecks:
    """Module statements, classes and functions; the checker supplies `add`, `visit`, the scopes
    and the expression judge."""

    # --- pass 2: module-level statements ------------------------------------------------------

    def check_module_statement(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, ast.Import | ast.ImportFrom):
            return
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
            return
        if isinstance(stmt, ast.ClassDef):
            self.check_class(stmt)
        elif isinstance(stmt, ast.FunctionDef):
            self.check_function(stmt, "inputs" if stmt.name in INPUT_BUILDERS else "compute", method=False)
        elif isinstance(stmt, ast.Assign | ast.AnnAssign) and stmt.value is not None:
            self.check_module_assign(stmt)
        elif not self.strict and isinstance(stmt, COMPOUND):
            self.check_module_block(stmt)
        else:
            self.check_statement_kind(stmt)
            if self.strict:
                self.add("module-code", "module level may hold only imports, constants, the one load_inline call, "
                         "functions and class ModelNew: code that runs at import is not allowed", stmt)
            self.visit(stmt)

    def check_module_block(self, stmt: ast.stmt) -> None:
        """Relaxed: an if/try/with/for block at module level. Its expressions are judged like any
        other; the statements in it as module-level statements (imports, defs, classes, assignments)."""
        self.check_statement_kind(stmt)
        bodies = ("body", "orelse", "finalbody")
        for name, value in ast.iter_fields(stmt):
            if name in bodies:
                continue
            if name == "handlers":
                for handler in value:
                    if handler.type is not None:
                        self.visit(handler.type)
                    for inner in handler.body:
                        self.check_module_statement(inner)
            elif isinstance(value, list):
                for item in value:
                    if isinstance(item, ast.AST):
                        self.visit(item)
            elif isinstance(value, ast.AST):
                self.visit(value)
        for name in bodies:
            for inner in getattr(stmt, name, []):
                self.check_module_statement(inner)

    def check_module_assign(self, stmt: ast.Assign | ast.AnnAssign) -> None:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        for target in targets:
            self.check_store(target)
        if stmt.value is self.facts.inline_call:
            self.visit(stmt.value)
            return
        if self.strict and not self.judge.constant_expression(stmt.value):
            self.add("module-code", "module-level assignments must be constants (numbers, strings, tuples, "
                     "dtypes); compute values inside ModelNew", stmt)
        self.visit(stmt.value)

    def check_class(self, cls: ast.ClassDef) -> None:
        """ModelNew; under the relaxed policy also nn.Module helper classes, held to the same rules."""
        if cls.name != "ModelNew" and self.strict:
            self.add("class-def", f"class {cls.name}: model_new.py may define only class ModelNew (helpers go in "
                     "ModelNew's methods or module-level functions)", cls)
        autograd = self.check_bases(cls)
        for decorator in cls.decorator_list:
            self.add("decorator", "ModelNew must not be decorated", decorator)
            self.visit(decorator)
        if "forward" not in self.facts.methods and cls.name == "ModelNew":
            self.add("forward-missing", "ModelNew must define forward(self, ...)", cls)
        self.scopes.append(Scope("class", is_method=autograd))  # is_method: an autograd.Function's body
        for stmt in cls.body:
            self.check_class_statement(stmt)
        self.scopes.pop()

    def check_bases(self, cls: ast.ClassDef) -> bool:
        """The class's bases (nn.Module only; relaxed: also autograd.Function, torch.nn's module
        classes and classes of model_new.py); True for a torch.autograd.Function."""
        names = [self.qualify(b) for b in cls.bases]
        if not self.strict and cls.bases and all(self.relaxed_base(b, q) for b, q in zip(cls.bases, names)):
            for base in cls.bases:
                self.visit(base)
            return "torch.autograd.Function" in names
        if len(cls.bases) != 1 or names[0] != "torch.nn.Module":
            shown = ", ".join(ast.unparse(b) for b in cls.bases) or "nothing"
            hint = " (never the reference Model)" if "Model" in shown else ""
            self.add("model-new-base", f"{cls.name} inherits from {shown}: it must subclass nn.Module only{hint}", cls)
        for keyword in cls.keywords:
            self.add("model-new-base", "class keywords (metaclass=...) are not allowed", keyword.value)
        for base in cls.bases:
            self.visit(base)
        return False

    def relaxed_base(self, base: ast.expr, qualified: str | None) -> bool:
        if qualified is None:  # a class of model_new.py (never one named Model)
            return isinstance(base, ast.Name) and base.id in self.facts.classes and base.id != "Model"
        parts = qualified.split(".")
        return qualified in RELAXED_BASES or (len(parts) == 3 and parts[:2] == ["torch", "nn"]
                                              and parts[2][:1].isupper() and parts[2] not in ("Parameter", "Buffer"))

    def check_class_statement(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, ast.FunctionDef):
            if stmt.name.startswith("__") and stmt.name.endswith("__") and stmt.name != "__init__" \
                    and (self.strict or stmt.name not in RELAXED_DUNDER_METHODS):
                self.add("dunder-method", f"ModelNew must not define {stmt.name}: only __init__, forward and "
                         "helper methods", stmt)
            elif stmt.name in module_attribute_names() \
                    and (self.strict or stmt.name not in RELAXED_OVERRIDABLE | RELAXED_DUNDER_METHODS):
                self.add("override-module-method", f"ModelNew must not override nn.Module.{stmt.name}", stmt)
            self.check_function(stmt, "init" if stmt.name == "__init__" else "compute", method=True)
        elif isinstance(stmt, ast.Pass) or (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
            return
        elif isinstance(stmt, ast.Assign | ast.AnnAssign) and stmt.value is not None \
                and self.judge.constant_expression(stmt.value):
            for target in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
                if any(isinstance(n, ast.Name) and n.id.startswith("__") for n in ast.walk(target)):
                    self.add("dunder-access", "class attributes with __dunder__ names are not allowed", stmt)
            self.visit(stmt.value)
        else:
            self.check_statement_kind(stmt)
            self.add("class-body", "ModelNew's body may hold only methods and constant class attributes", stmt)
            self.visit(stmt)

    # --- functions ----------------------------------------------------------------------------

    def check_function(self, fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, kind: str,
                       method: bool) -> None:
        """Decorators, defaults and annotations in the enclosing scope; the body in its own."""
        if isinstance(fn, ast.AsyncFunctionDef):
            self.add("async-generator", "async functions are not allowed", fn)
        if not isinstance(fn, ast.Lambda):
            for decorator in fn.decorator_list:
                if self.strict and not (isinstance(decorator, ast.Name) and decorator.id == "staticmethod"):
                    self.add("decorator", "decorators are not allowed (staticmethod excepted)", decorator)
                self.visit(decorator)  # relaxed: judged as the call it is (torch.no_grad(), torch.jit.script)
            if fn.returns is not None:
                self.visit(fn.returns)
        args = fn.args
        for default in [*args.defaults, *(d for d in args.kw_defaults if d is not None)]:
            if not self.judge.default_value(default, kind):
                self.add("default-argument", "default argument values must be constants (None, numbers, strings, "
                         "tuples; lists and nn classes in __init__): a mutable or computed default can hide state "
                         "or code", default)
            self.with_kind(kind, lambda d=default: self.visit(d))
        all_args = [*args.posonlyargs, *args.args, *args.kwonlyargs, *filter(None, [args.vararg, args.kwarg])]
        for arg in all_args:
            if arg.annotation is not None:
                self.visit(arg.annotation)
        scope = Scope(kind, is_method=method)
        scope.params = {a.arg for a in all_args}
        scope.bound = scope.params | bound_names(fn, handlers=not self.strict)
        if method and not self.strict and self.scopes[-1].kind == "class" and self.scopes[-1].is_method and all_args:
            scope.ctx = {all_args[0].arg}  # an autograd.Function's forward(ctx, ...) / backward(ctx, ...)
        self.scopes.append(scope)
        if kind == "compute":
            scope.tainted = tensor_params(fn, method)
            self.judge.propagate_taint(fn, scope)
        self.judge.collect_callables(fn, scope)
        body = [fn.body] if isinstance(fn, ast.Lambda) else fn.body
        for stmt in body:
            self.visit(stmt)
        self.scopes.pop()

    def with_kind(self, kind: str, action) -> None:
        self.scopes.append(Scope(kind))
        try:
            action()
        finally:
            self.scopes.pop()


def bound_names(fn: ast.AST, handlers: bool = False) -> set[str]:
    """Names a function binds in its own scope (not those of nested functions or comprehensions);
    with `handlers`, also `except E as name`."""
    names: set[str] = set()
    body = [fn.body] if isinstance(fn, ast.Lambda) else getattr(fn, "body", [])
    stack: list[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            names.add(node.id)
        elif isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif handlers and isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
            stack.extend([*getattr(node, "decorator_list", [])])
            continue
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, COMPREHENSIONS):
            stack.extend(n for n in ast.walk(node) if isinstance(n, ast.NamedExpr))
            continue
        stack.extend(ast.iter_child_nodes(node))
    return names


def tensor_params(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, method: bool) -> set[str]:
    """Arguments taken to be tensors: forward's (but self and those annotated int, float, ...),
    and any function's annotated torch.Tensor. Helpers' plain arguments are often sizes."""
    args = fn.args
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, *filter(None, [args.vararg, args.kwarg])]
    self_name = args.args[0].arg if method and args.args else None
    is_forward = getattr(fn, "name", "") == "forward" and method
    return {a.arg for a in every if a.arg != self_name and (
        (is_forward and not non_tensor_annotation(a)) or tensor_annotation(a))}


def tensor_annotation(arg: ast.arg) -> bool:
    ann = arg.annotation
    return isinstance(ann, ast.Attribute | ast.Name) and (getattr(ann, "attr", None) or getattr(ann, "id", "")) \
        == "Tensor" or isinstance(ann, ast.Constant) and ann.value in ("torch.Tensor", "Tensor")


def non_tensor_annotation(arg: ast.arg) -> bool:
    """An argument annotated int, float, bool, tuple, ... is not a tensor."""
    ann = arg.annotation
    if isinstance(ann, ast.Subscript):
        ann = ann.value
    if isinstance(ann, ast.Attribute):
        return ann.attr in TYPE_ANNOTATIONS_NOT_TENSOR
    if isinstance(ann, ast.Constant):
        return ann.value is None or (isinstance(ann.value, str) and ann.value in TYPE_ANNOTATIONS_NOT_TENSOR)
    return isinstance(ann, ast.Name) and ann.id in TYPE_ANNOTATIONS_NOT_TENSOR
