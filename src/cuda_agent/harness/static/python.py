"""Static check of model_new.py with the Python AST (policies: see static/__init__.py).

Two passes. The first (python_module.py) reads the module's shape: imports and what each
name stands for, the module-level constants and functions, the methods, and what __init__ stores
on self (submodules, tensors, the extension). The second, here, walks every statement and
expression with a scope stack, so that a name is resolved the way Python would resolve it; the
definitions (module statements, classes, functions) are checked by python_defs.py, and each
call, attribute, operator and store is handed to python_expr.py (names and attributes:
python_names.py), which judges it against the tables in rules.py. Nothing is executed.
"""

from __future__ import annotations

import ast

from cuda_agent.harness.result import Finding, StaticReport
from cuda_agent.harness.static.python_defs import DefinitionChecks
from cuda_agent.harness.static.python_expr import ExpressionJudge
from cuda_agent.harness.static.python_names import shared_names
from cuda_agent.harness.static.python_module import ModuleFacts, ModuleReader
from cuda_agent.harness.static.scope import Scope
from cuda_agent.harness.static.rules import POLICIES, Policy

MAX_PER_RULE = 20   # findings kept per rule: enough to act on, and bounded for hostile input


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


class PythonChecker(ModuleReader, DefinitionChecks, ast.NodeVisitor):
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
