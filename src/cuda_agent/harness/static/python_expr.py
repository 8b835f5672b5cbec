"""Judging model_new.py's expressions: calls, operators, stores (names and attributes: python_names.py,
its base).

Used by python.PythonChecker, which owns the scopes and the findings. The strict policy is
an allowlist here: in forward every call must be the extension, a ModelNew method, allocation, or
a metadata/view method; everything else is reported. Which values are tensors is tracked by name
(`tainted`): forward's arguments, what the extension, allocation and views return, self's
parameters and buffers. Operators on values the checker cannot see as tensors slip through; the
runtime dispatch check, which sees every operator that reaches PyTorch, is the backstop for them.
"""

from __future__ import annotations

import ast

from cuda_agent.harness.static.python_names import DO_INSTEAD, NameJudge, builtin_allowed, is_builtin, shared_names
from cuda_agent.harness.static.rules import (
    BUILTINS_INDIRECT,
    BUILTINS_TENSOR_SAFE,
    CONTAINER_METHODS,
    CONTAINER_MUTATORS,
    INPUT_BUILDERS,
    INIT_METHODS,
    RELAXED_INSTANCE_ATTRIBUTES,
    TENSOR_METHODS_ALLOWED,
)

ITERATION_METHODS = {"parameters", "named_parameters", "buffers", "named_buffers", "children", "named_children",
                     "modules", "named_modules"}


class ExpressionJudge(NameJudge):
    """The rules for calls, operators and stores (names and attributes: NameJudge); findings and
    scopes live in the PythonChecker."""

    # --- calls --------------------------------------------------------------------------------

    def check_call(self, node: ast.Call) -> None:
        func = node.func
        self.judge_call_target(node)
        if isinstance(func, ast.Attribute):
            qualified = self.c.qualify(func)
            if qualified is not None:
                self.check_qualified(qualified, func)
            else:
                self.check_attr_name(func.attr, func, func.value)
                self.c.visit(func.value)
        else:
            self.c.visit(func)
        args = node.args
        if not self.c.strict and self.module_probe(node):
            args = args[1:]  # relaxed: hasattr(torch, "name") reads whether torch has a name, and calls nothing
        for arg in args:
            self.c.visit(arg)
        for keyword in node.keywords:
            self.c.visit(keyword.value)

    def module_probe(self, node: ast.Call) -> bool:
        """hasattr(<module>, "<public name>")."""
        func, args = node.func, node.args
        return (isinstance(func, ast.Name) and func.id == "hasattr" and not self.c.locally_bound("hasattr")
                and "hasattr" not in self.c.facts.globals and len(args) == 2 and isinstance(args[0], ast.Name)
                and args[0].id in self.c.facts.aliases and not self.c.locally_bound(args[0].id)
                and isinstance(args[1], ast.Constant) and isinstance(args[1].value, str)
                and not args[1].value.startswith("_"))

    def judge_call_target(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name):
            self.judge_name_call(func.id, node)
        elif isinstance(func, ast.Attribute):
            if self.c.qualify(func) is None:
                self.judge_method_call(func, node)
        elif not isinstance(func, ast.Lambda) and self.computing:
            self.c.add("indirect-call", f"{ast.unparse(func)}(...) calls a value the checker cannot name (a "
                       "submodule from a list, a call's result): call the extension or ModelNew's methods by name",
                       node)

    def judge_name_call(self, name: str, node: ast.Call) -> None:
        facts = self.c.facts
        if self.c.locally_bound(name):
            if self.computing and not any(name in s.callables for s in self.c.scopes):
                self.c.add("indirect-call", f"{name}(...) calls a local variable; under the strict policy forward "
                           "may call only the extension, ModelNew's methods, module-level functions and allocation "
                           "by name", node)
            return
        if name in INPUT_BUILDERS and self.computing:
            self.c.add("indirect-call", f"{name}() builds the task's inputs; forward may not call it", node)
            return
        if name in facts.functions or name in facts.extension_functions or name in facts.aliases \
                or name in facts.globals or not is_builtin(name) or not builtin_allowed(name):
            return
        if name == "type" and len(node.args) > 1:
            self.c.add("builtin-forbidden", "type(...) with three arguments creates a class; not allowed", node)
        if not self.computing:
            return
        if name in BUILTINS_INDIRECT or any(k.arg == "key" and not isinstance(k.value, ast.Lambda | ast.Name)
                                            for k in node.keywords):
            self.c.add("indirect-call", f"{name}(...) calls a function value for you; under the strict policy "
                       "write the loop and call the extension directly", node)
        elif name not in BUILTINS_TENSOR_SAFE and any(self.tensorish(a) for a in node.args):
            self.c.add("tensor-builtin", f"{name}(...) on a tensor runs PyTorch operators (reductions, item(), "
                       f"arithmetic); under the strict policy {DO_INSTEAD}", node)

    def judge_method_call(self, func: ast.Attribute, node: ast.Call) -> None:
        base, method = func.value, func.attr
        if self.is_self(base):
            self.judge_self_call(method, node)
            return
        if self.is_extension(base) or (isinstance(base, ast.Name) and base.id == "ModelNew"
                                       and not self.c.locally_bound("ModelNew") and method in self.c.facts.methods):
            return
        if method == "__init__" and isinstance(base, ast.Call) and isinstance(base.func, ast.Name) \
                and base.func.id == "super":
            return
        if method in CONTAINER_MUTATORS and self.c.kind != "module" and (
                self.is_global_state(base) or (self.computing and self.is_self_attr(base))):
            self.c.add("state-in-forward", f"{ast.unparse(func)}(...) keeps state across calls (module-level or on "
                       "self); caching results is not allowed: compute every output on every call", node)
            return
        if not self.c.strict or self.c.kind == "inputs":
            return
        allowed = TENSOR_METHODS_ALLOWED | CONTAINER_METHODS | (INIT_METHODS if self.c.kind == "init" else set())
        if method not in allowed:
            self.c.add("tensor-method", f"{ast.unparse(func)}(...) is not allowed under the strict policy: only "
                       "metadata, views, casts and allocation methods (size, view, reshape, contiguous, to, "
                       f"new_empty, ...) may be called; {DO_INSTEAD}", node)

    def judge_self_call(self, method: str, node: ast.Call) -> None:
        facts = self.c.facts
        if method in facts.methods or method in facts.extension_fn_attrs or method in ITERATION_METHODS:
            return
        if self.c.kind == "init" and method in INIT_METHODS:
            return
        if not self.c.strict:
            return
        if method in facts.submodules:
            self.c.add("submodule-call", f"self.{method}(...) runs PyTorch's implementation of that module, which "
                       "the strict policy forbids: keep the module in __init__ only for its parameters and pass "
                       f"self.{method}.weight (and bias) to your kernel", node)
        else:
            self.c.add("submodule-call", f"self.{method}(...) is not one of ModelNew's methods: under the strict "
                       "policy forward may call only the extension and ModelNew's own methods", node)

    # --- operators, indexing, stores ----------------------------------------------------------

    def check_operator(self, node: ast.AST, operands: list[ast.expr], op: ast.AST) -> None:
        if not self.computing:
            return
        if isinstance(op, ast.MatMult):
            self.c.add("tensor-operator", f"`@` in {ast.unparse(node)} is a PyTorch matrix multiplication; under the "
                       f"strict policy {DO_INSTEAD}", node)
        elif any(self.tensorish(o) for o in operands):
            self.c.add("tensor-operator", f"{ast.unparse(node)} applies a Python operator to a tensor, which runs a "
                       f"PyTorch kernel; under the strict policy {DO_INSTEAD}", node)

    def check_index(self, node: ast.Subscript) -> None:
        if self.computing and self.tensorish(node.value) \
                and any(self.tensorish(n) for n in ast.walk(node.slice) if isinstance(n, ast.expr)):
            self.c.add("tensor-index", f"{ast.unparse(node)} indexes with a tensor (a gather in PyTorch); under the "
                       f"strict policy {DO_INSTEAD}", node)

    def check_attribute_store(self, target: ast.Attribute) -> None:
        if self.is_self(target.value):
            if self.computing:
                self.c.add("state-in-forward", f"assigning {ast.unparse(target)} outside __init__ keeps state across "
                           "calls; set attributes in __init__ and compute every output on every call", target)
        elif not self.c.strict and self.relaxed_store(target):
            pass
        else:
            self.c.add("monkey-patch", f"assigning {ast.unparse(target)} changes an object that PyTorch or the "
                       "harness uses (monkey-patching); only self.<name> may be assigned, in __init__", target)
        self.check_attr_name(target.attr, target, target.value)
        self.c.visit(target.value)

    def relaxed_store(self, target: ast.Attribute) -> bool:
        """Attribute stores the relaxed policy allows: torch.backends flags (they stay in the child's
        process), instance state reached from self or a local (self.conv.weight.data = ...,
        param.requires_grad = False) and an autograd context's attributes (ctx.shape = ...). Never a
        class's or a module's attribute: torch.randn replaced would run code in the untimed input
        draw, torch.cuda.Event.elapsed_time replaced would change the timer."""
        qualified = self.c.qualify(target) or ""
        if qualified.startswith("torch.backends.") and len(qualified.split(".")) >= 4:
            return True
        root, chain = target.value, [target.attr]
        while isinstance(root, ast.Attribute):
            chain.append(root.attr)
            root = root.value
        if not isinstance(root, ast.Name) or self.c.qualify(root) is not None:
            return False
        if any(root.id in s.ctx for s in self.c.scopes):
            return True
        if self.is_self(root):  # self.conv.padding = ...: not through an attribute holding a class or module
            held = self.c.facts.submodules | self.c.facts.tensors
            return target.attr in RELAXED_INSTANCE_ATTRIBUTES or (chain[-1] in held and target.attr not in shared_names())
        if root.id in self.c.facts.classes and len(chain) == 1 and not self.c.locally_bound(root.id):
            # a class of model_new.py's own state (ModelNew._kernel = ext): never a method nn.Module or a tensor has
            return not target.attr.startswith("__") and target.attr not in shared_names()
        return self.c.locally_bound(root.id) and target.attr in RELAXED_INSTANCE_ATTRIBUTES

    def check_subscript_store(self, target: ast.Subscript) -> None:
        base = target.value
        if self.is_global_state(base):
            self.c.add("state-in-forward", f"writing {ast.unparse(target)} changes module-level state; keep state "
                       "out of model_new.py", target)
        elif self.computing and self.tensorish(base):
            self.c.add("tensor-write", f"writing into a tensor ({ast.unparse(target)}) runs a PyTorch copy kernel; "
                       f"under the strict policy {DO_INSTEAD}", target)
        elif self.computing and self.is_self_attr(base):
            self.c.add("state-in-forward", f"writing {ast.unparse(target)} keeps state across calls", target)
        self.c.visit(base)
        self.c.visit(target.slice)
