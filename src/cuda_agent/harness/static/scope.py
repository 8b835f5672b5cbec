"""What the expression rules see of the Python checker: its scopes, what pass 1 learned of the
module, and where findings go. A protocol, so that python_values.py, python_names.py and python_expr.py
depend on this page and not on the checker (python.py) that uses them."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Protocol

from cuda_agent.harness.static.python_module import ModuleFacts


@dataclass
class Scope:
    """One function's (or comprehension's) bindings, and what the checker knows about them."""

    kind: str                                   # "init" | "compute" | "inputs" | "module" | "class" | "comp"
    bound: set[str] = field(default_factory=set)
    params: set[str] = field(default_factory=set)
    tainted: set[str] = field(default_factory=set)    # names holding tensors
    callables: set[str] = field(default_factory=set)  # names bound to callables the rules allow
    ctx: set[str] = field(default_factory=set)        # an autograd.Function method's context argument
    is_method: bool = False


class Checker(Protocol):
    """The checker's side of the conversation (python.PythonChecker implements it)."""

    strict: bool
    facts: ModuleFacts
    scopes: list[Scope]

    @property
    def kind(self) -> str: ...

    def add(self, rule: str, message: str, node: ast.AST | int) -> None: ...

    def qualify(self, node: ast.AST) -> str | None: ...

    def locally_bound(self, name: str) -> bool: ...

    def in_method(self) -> bool: ...

    def visit(self, node: ast.AST) -> object: ...
