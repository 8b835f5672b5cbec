"""Static check of model_new.py with the Python AST (policies: see static/__init__.py).

Two passes. The first (python_module.py) reads the module's shape: imports and what each
name stands for, the module-level constants and functions, the methods, and what __init__ stores
on self (submodules, tensors, the extension). The second, here, walks every statement and
expression with a scope stack, so that a name is resolved the way Python would resolve it, and
hands each call, attribute, operator and store to python_expr.py, which judges it against
the tables in rules.py. Nothing is executed.
"""

from __future__ import annotations

import ast

from cuda_agent.harness.result import Finding, StaticReport
from cuda_agent.harness.static.python_expr import ExpressionJudge, shared_names
from cuda_agent.harness.static.python_module import COMPOUND, ModuleFacts, ModuleReader
from cuda_agent.harness.static.scope import Scope
from cuda_agent.harness.static.rules import (
    INPUT_BUILDERS,
    POLICIES,
    RELAXED_BASES,
    RELAXED_DUNDER_METHODS,
    RELAXED_OVERRIDABLE,
    TYPE_ANNOTATIONS_NOT_TENSOR,
    Policy,
    module_attribute_names,
)

MAX_PER_RULE = 20   # findings kept per rule: enough to act on, and bounded for hostile input
COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def check_python(source: str, filename: str = "model_new.py", policy: Policy = "strict") -> StaticReport:
    """Check model_new.py's text against the policy; nothing in it is run."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}: use one of {POLICIES}")
    try:
        tree = ast.parse(source, filename)
    except SyntaxError as e:
        finding = Finding("syntax", f"model_new.py does not parse: {e.msg}", filename, e.lineno or 0,
                          (e.text or "").strip()[:160])
        return StaticReport(ok=False, findings=[finding], policy=policy)
    except (ValueError, RecursionError, MemoryError) as e:
        return StaticReport(ok=False, findings=[Finding("syntax", f"model_new.py cannot be read: {e}", filename)],
                            policy=policy)
    checker = PythonChecker(source, filename, policy)
    try:
        checker.run(tree)
    except RecursionError:  # a partial check's findings say nothing: report only why it stopped
        finding = Finding("syntax", "model_new.py nests expressions too deeply to check; write it plainly", filename)
        return StaticReport(ok=False, findings=[finding], policy=policy)
    return StaticReport(ok=not checker.findings, findings=checker.sorted_findings(), policy=policy)


class PythonChecker(ModuleReader, ast.NodeVisitor):
    """Collects findings for one module; `run` is the only entry point."""

    def __init__(self, source: str, filename: str, policy: Policy):
        self.source, self.filename, self.policy = source, filename, policy
        self.strict = policy == "strict"
        self.lines = source.splitlines()
        self.findings: list[Finding] = []
        self.seen: set[tuple[str, int, str]] = set()
        self.per_rule: dict[str, int] = {}
        self.facts = ModuleFacts()
        self.scopes: list[Scope] = []
        self.judge = ExpressionJudge(self)

    # --- reporting ----------------------------------------------------------------------------

    def add(self, rule: str, message: str, node: ast.AST | int) -> None:
        line = node if isinstance(node, int) else getattr(node, "lineno", 0)
        key = (rule, line, message)
        if key in self.seen or self.per_rule.get(rule, 0) >= MAX_PER_RULE:
            return
        self.seen.add(key)
        self.per_rule[rule] = self.per_rule.get(rule, 0) + 1
        snippet = self.lines[line - 1].strip()[:160] if 0 < line <= len(self.lines) else ""
        self.findings.append(Finding(rule, message, self.filename, line, snippet))

    def sorted_findings(self) -> list[Finding]:
        return sorted(self.findings, key=lambda f: (f.line, f.rule))

    # --- entry --------------------------------------------------------------------------------

    def run(self, tree: ast.Module) -> None:
        self.check_text()
        self.collect_module(tree)
        model_new = self.find_model_new(tree)
        if model_new is not None:
            self.collect_self(model_new, tree)
        module_scope = Scope("module", bound=set(self.facts.globals))
        self.scopes = [module_scope]
        for stmt in tree.body:
            self.check_module_statement(stmt)

    # --- names --------------------------------------------------------------------------------

    def qualify(self, node: ast.AST) -> str | None:
        """The qualified name an expression stands for (`F.relu` -> torch.nn.functional.relu), if
        its root is an imported module that no local variable shadows."""
        if isinstance(node, ast.Name):
            if node.id in self.facts.aliases and not self.locally_bound(node.id):
                return self.facts.aliases[node.id]
            return None
        if isinstance(node, ast.Attribute):
            base = self.qualify(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def locally_bound(self, name: str) -> bool:
        """Bound in a function or comprehension scope (class scopes do not reach into methods)."""
        return any(name in s.bound for s in self.scopes if s.kind not in ("module", "class"))

    def bound_anywhere(self, name: str) -> bool:
        return self.locally_bound(name) or name in self.facts.globals

    @property
    def scope(self) -> Scope:
        return self.scopes[-1]

    @property
    def kind(self) -> str:
        """The rules in force: "init", "compute" or "inputs" inside functions, else "module"."""
        for s in reversed(self.scopes):
            if s.kind in ("init", "compute", "inputs", "module"):
                return s.kind
        return "module"

    def in_method(self) -> bool:
        return any(s.is_method for s in self.scopes)

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

    # --- pass 2: statements -------------------------------------------------------------------

    def check_statement_kind(self, stmt: ast.stmt) -> None:
        """Statements refused wherever they are (relaxed: only async code; try/except, with,
        global and imports inside functions are judged by what they call)."""
        if not self.strict:
            if isinstance(stmt, ast.AsyncFor | ast.AsyncWith):
                self.add("async-generator", "async code is not allowed", stmt)
            elif isinstance(stmt, ast.Import | ast.ImportFrom) and self.kind != "module":
                self.check_import(stmt)
            return
        if isinstance(stmt, ast.Try | ast.TryStar):
            self.add("try-except", "try/except/finally is not allowed: a fallback could run PyTorch when the "
                     "kernel fails; let errors propagate", stmt)
        elif isinstance(stmt, ast.With | ast.AsyncWith):
            self.add("with-statement", "with-statements are not allowed (no contexts, streams or grad modes): "
                     "the harness sets them", stmt)
        elif isinstance(stmt, ast.Global | ast.Nonlocal):
            self.add("global-statement", "global/nonlocal are not allowed: keep state out of model_new.py", stmt)
        elif isinstance(stmt, ast.AsyncFor):
            self.add("async-generator", "async code is not allowed", stmt)
        elif isinstance(stmt, ast.Import | ast.ImportFrom) and self.kind != "module":
            self.add("import-location", "imports belong at the top of model_new.py, not inside functions", stmt)
            self.check_import(stmt)

    def generic_visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.stmt):
            self.check_statement_kind(node)
        super().generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        """Nested functions and lambdas follow the rules of the function that defines them; one
        stored on self in __init__ cannot be called from forward (submodule-call) anyway."""
        self.check_function(node, self.kind if self.kind != "module" else "compute", method=False)

    visit_AsyncFunctionDef = visit_Lambda = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if self.strict:
            self.add("class-def", "classes may not be defined inside functions", node)
        self.check_class(node)

    def visit_Yield(self, node: ast.AST) -> None:
        self.add("async-generator", "generators (yield) and await are not allowed", node)
        self.generic_visit(node)

    visit_YieldFrom = visit_Await = visit_Yield  # type: ignore[assignment]

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self.check_store(target)
        self.visit(node.value)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.check_store(node.target)
        self.visit(node.annotation)
        if node.value is not None:
            self.visit(node.value)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.check_store(node.target)
        self.judge.check_operator(node, [node.target, node.value], node.op)
        self.visit(node.value)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            if isinstance(target, ast.Attribute) and not (not self.strict and self.judge.is_self(target.value)
                                                           and target.attr not in shared_names()):
                self.add("monkey-patch", "deleting attributes is not allowed (relaxed: but self's own)", target)
            self.visit(target)

    def check_store(self, target: ast.expr) -> None:
        """Assignment targets: locals and self.<attr> in __init__; nothing else is writable."""
        if isinstance(target, ast.Tuple | ast.List):
            for elt in target.elts:
                self.check_store(elt)
        elif isinstance(target, ast.Starred):
            self.check_store(target.value)
        elif isinstance(target, ast.Name):
            if target.id.startswith("__") and target.id.endswith("__"):
                self.add("dunder-access", f"assigning {target.id} is not allowed", target)
        elif isinstance(target, ast.Attribute):
            self.judge.check_attribute_store(target)
        elif isinstance(target, ast.Subscript):
            self.judge.check_subscript_store(target)

    # --- pass 2: expressions ------------------------------------------------------------------

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self.judge.check_name(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.ctx, ast.Load):
            self.judge.check_attribute(node)
        else:
            self.check_store(node)

    def visit_Call(self, node: ast.Call) -> None:
        self.judge.check_call(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        self.judge.check_operator(node, [node.left, node.right], node.op)
        self.generic_visit(node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        self.judge.check_operator(node, [node.operand], node.op)
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        if not all(isinstance(op, ast.Is | ast.IsNot) for op in node.ops):
            self.judge.check_operator(node, [node.left, *node.comparators], node.ops[0])
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        self.judge.check_operator(node, node.values, node.op)
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, ast.Load):
            self.judge.check_index(node)
            self.generic_visit(node)
        else:
            self.check_store(node)

    def visit_comprehension_node(self, node: ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp) -> None:
        """The first iterable belongs to the enclosing scope; the rest to the comprehension's own."""
        self.visit(node.generators[0].iter)
        scope = Scope("comp", tainted=set(self.scope.tainted), callables=set(self.scope.callables))
        for gen in node.generators:
            scope.bound.update(n.id for n in ast.walk(gen.target) if isinstance(n, ast.Name))
            if self.judge.tensorish(gen.iter):
                scope.tainted.update(n.id for n in ast.walk(gen.target) if isinstance(n, ast.Name))
        self.scopes.append(scope)
        for i, gen in enumerate(node.generators):
            if i:
                self.visit(gen.iter)
            for cond in gen.ifs:
                self.visit(cond)
        for part in (node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,):
            self.visit(part)
        self.scopes.pop()

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_comprehension_node  # type: ignore


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
