"""Judging model_new.py's names and attributes: what a name, a qualified name (torch.x, F.y, os.z)
or an attribute may stand for under the policy. The base of python_expr.ExpressionJudge, which
judges calls, operators and stores with these answers.
"""

from __future__ import annotations

import ast
import builtins
import functools

from cuda_agent.harness.static.python_values import ValueReader
from cuda_agent.harness.static.rules import (
    BUILTINS_ALLOWED,
    BUILTINS_FORBIDDEN,
    DANGEROUS_MODULES,
    EXTENSION_MODULE,
    IMPORTABLE,
    LOAD_INLINE,
    RELAXED_OS_ALLOWED,
    RELAXED_OS_WRITERS,
    METHOD_NAMES_FORBIDDEN,
    NN_FORBIDDEN,
    RELAXED_IMPORTABLE,
    RELAXED_PRIVATE_ALLOWED,
    RELAXED_TIME_ALLOWED,
    RELAXED_TORCH_ALLOWED,
    RELAXED_TORCH_CUDA_ALLOWED,
    RELAXED_TORCH_FUNCTIONS,
    RELAXED_TORCH_MEMBERS,
    TENSOR_METHODS_ALLOWED,
    TORCH_ALLOCATION,
    TORCH_CUDA_ALLOWED,
    TORCH_FORBIDDEN,
    TORCH_INIT_ONLY,
    TORCH_VALUES,
    TORCH_VIEWS,
    module_attribute_names,
    module_private_names,
    tensor_method_names,
)

MODULES = IMPORTABLE | {"torch.nn.init", "os", "os.path"}
# Module names reached as attributes of another module (F.torch, typing.sys): never allowed.
REEXPORTED_MODULES = (DANGEROUS_MODULES - {"cuda", "model"}) | {"torch", "warnings", "importlib", "collections"}
DO_INSTEAD = ("write it as a CUDA kernel and call it through the extension; model_new.py may only allocate "
              "(torch.empty, torch.empty_like, ...), read shapes, take views and call the extension")


class NameJudge(ValueReader):
    """The rules for names and attributes; findings and scopes live in the PythonChecker."""

    # --- helpers ------------------------------------------------------------------------------

    @property
    def computing(self) -> bool:
        """Strict policy inside forward or another method or helper (not __init__)."""
        return self.c.strict and self.c.kind == "compute"

    def is_global_state(self, node: ast.AST) -> bool:
        """A module-level name reached from inside a function."""
        return (isinstance(node, ast.Name) and self.c.kind != "module" and not self.c.locally_bound(node.id)
                and node.id in self.c.facts.globals and node.id not in self.c.facts.aliases)

    # --- names --------------------------------------------------------------------------------

    def check_name(self, node: ast.Name) -> None:
        name = node.id
        if name == "Model":
            self.c.add("reference-model", "the reference Model must not be used in model_new.py: ModelNew "
                       "reimplements it with your kernels", node)
        elif self.c.locally_bound(name):
            return
        elif name in self.c.facts.aliases:
            qualified = self.c.facts.aliases[name]
            if qualified in MODULES and qualified != EXTENSION_MODULE:
                self.c.add("module-alias", f"the module {name} may be used only as {name}.<name>: storing or "
                           "passing a module hides what is called through it", node)
            else:
                self.check_qualified(qualified, node)
        elif name in self.c.facts.globals or name == "__name__":
            return
        elif is_builtin(name) and not name.startswith("__") or name in BUILTINS_FORBIDDEN:
            if not builtin_allowed(name):
                self.c.add("builtin-forbidden", f"{name} is not allowed (no eval/exec/compile, getattr/setattr, "
                           "globals/vars, open or other back doors): call the extension and torch by name", node)
        elif name == "__file__" and not self.c.strict:   # the solution's own path (build folders): no file API reads it
            return
        elif name.startswith("__") and name.endswith("__"):
            self.c.add("dunder-access", f"{name} is not allowed: it reaches the interpreter's internals", node)
        else:
            self.c.add("undefined-name", f"{name} is not defined in model_new.py: every name must be imported "
                       "or defined in the file", node)

    def check_attribute(self, node: ast.Attribute) -> None:
        qualified = self.c.qualify(node)
        if qualified is not None:
            self.check_qualified(qualified, node)
            return
        self.check_attr_name(node.attr, node, node.value)
        if self.computing and node.attr in tensor_method_names() and node.attr not in TENSOR_METHODS_ALLOWED \
                and self.tensorish(node.value):
            self.c.add("tensor-method", f"{ast.unparse(node)} is a PyTorch operation; under the strict policy "
                       f"{DO_INSTEAD}", node)
        self.c.visit(node.value)

    def check_attr_name(self, attr: str, node: ast.AST, base: ast.AST) -> None:
        """__dunder__ attributes, _private attributes of anything but self, and hooks."""
        if attr.startswith("__") and attr.endswith("__"):
            super_init = attr == "__init__" and isinstance(base, ast.Call) and isinstance(base.func, ast.Name) \
                and base.func.id == "super"
            if not (super_init or attr == "__name__"):
                self.c.add("dunder-access", f".{attr} is not allowed: __dunder__ attributes reach the interpreter's "
                           "internals (only super().__init__() is needed)", node)
        elif attr.startswith("_") and (not self.is_self(base) or attr in module_private_names()) \
                and not (not self.c.strict and relaxed_private_allowed(attr)):
            self.c.add("private-access", f".{attr} is a private attribute (of nn.Module or another object); "
                       "only self's own _attributes may be used", node)
        if attr == "register_hook" and not self.c.strict:   # a tensor's autograd hook: no gradient is taken here
            return
        if attr in METHOD_NAMES_FORBIDDEN or (attr.startswith("register_") and "hook" in attr):
            self.c.add("hook", f".{attr} is not allowed: hooks, module registration and stream records change "
                       "how PyTorch runs modules", node)

    def check_qualified(self, qualified: str, node: ast.AST, kind: str | None = None) -> bool:
        """A name rooted in an import (torch..., the extension, math, typing); True if allowed."""
        parts = qualified.split(".")
        shown = ast.unparse(node) if isinstance(node, ast.expr) else qualified
        if not self.c.strict and qualified in RELAXED_PRIVATE_ALLOWED:
            return True
        for part in parts[1:]:
            if part.startswith("__") and part.endswith("__") and qualified != "torch.nn.Module.__init__":
                self.c.add("dunder-access", f"{shown}: __dunder__ attributes are not allowed", node)
                return False
            if part.startswith("_") and not part.startswith("__"):
                self.c.add("private-access", f"{shown}: private attributes ({part}) are not allowed", node)
                return False
        if parts[-1] in METHOD_NAMES_FORBIDDEN:
            self.c.add("hook", f"{shown} is not allowed: hooks change how PyTorch runs modules", node)
            return False
        if qualified == LOAD_INLINE:
            return kind == "import" or self.check_load_inline_use(node)
        if parts[0] == "time" and len(parts) > 1 and not self.c.strict:
            if len(parts) == 2 and parts[1] in RELAXED_TIME_ALLOWED:
                return True
            self.c.add("import-forbidden", f"{shown}: of time, only clocks and sleep (time.perf_counter, "
                       "time.time, ...) may be used (relaxed policy)", node)
            return False
        reexported = next((p for p in parts[1:] if p in REEXPORTED_MODULES), None)
        if reexported:
            self.c.add("torch-forbidden", f"{shown} reaches the module {reexported} through another module's "
                       "attributes; not allowed", node)
            return False
        if parts[0] in ("math", "typing", "__future__") or (not self.c.strict and parts[0] in RELAXED_IMPORTABLE):
            return self.check_small_module(parts, shown, node)
        if parts[0] == "os":
            return self.check_os(qualified, shown, node)
        if parts[0] != "torch" or len(parts) == 1:
            return True
        forbidden = self.torch_forbidden(parts)
        if forbidden:
            never = "not allowed under the strict policy" if relaxed_torch_allowed(parts) else "never allowed"
            self.c.add("torch-forbidden", f"{shown} ({qualified}) is {never}: {forbidden}", node)
            return False
        return self.check_torch_compute(parts, shown, node, kind or self.c.kind)

    def check_os(self, qualified: str, shown: str, node: ast.AST) -> bool:
        """Relaxed: the paths, directories, process id and environment of RELAXED_OS_ALLOWED; strict: none."""
        if not self.c.strict and qualified in RELAXED_OS_ALLOWED:
            if self.c.kind != "compute" or qualified not in RELAXED_OS_WRITERS:
                return True
            # in functions (forward and what it may call) a directory made or a variable set would carry
            # state from call to call; read with os.environ.get there
            self.c.add("state-in-forward", f"{shown} in a function: what it writes would outlive the call; "
                       "make build folders and set variables at module level or in __init__", node)
            return False
        self.c.add("import-forbidden", f"{shown}: of os, only paths (os.path.join, dirname, ...), os.makedirs, "
                   "os.getpid, os.cpu_count and os.environ may be used (relaxed policy); nothing that starts "
                   "processes, opens files or reaches other processes", node)
        return False

    def check_small_module(self, parts: list[str], shown: str, node: ast.AST) -> bool:
        """math.<function>, typing.<Type> (relaxed: itertools.<name>, collections.abc.<Type>, ...): one
        level deep, nothing the module itself imported."""
        if len(parts) == 2 and (parts[0] != "typing" or parts[1][:1].isupper() or parts[1] == "cast"):
            return True
        if len(parts) == 3 and ".".join(parts[:2]) in RELAXED_IMPORTABLE:   # collections.abc.<Type>
            return True
        self.c.add("import-forbidden", f"{shown}: only {parts[0]}.<name> may be used", node)
        return False

    def torch_forbidden(self, parts: list[str]) -> str:
        """Why torch.<...> is refused under both policies, or ''."""
        second = parts[1]
        if second == "utils" and ".".join(parts[:3]) == "torch.utils.cpp_extension" and len(parts) == 3:
            return ""
        if not self.c.strict and relaxed_torch_allowed(parts):
            return ""
        if second in TORCH_FORBIDDEN or second.startswith("set_"):
            return ("it reaches PyTorch internals, global state, compilation, streams, timers or seeds, which the "
                    "harness controls")
        if second == "cuda" and len(parts) > 2 and parts[2] not in TORCH_CUDA_ALLOWED:
            return ("torch.cuda streams, events, graphs, synchronisation and memory tools are the harness's; launch "
                    "on the current stream")
        if second == "nn" and len(parts) > 2 and parts[2] in NN_FORBIDDEN:
            return "torch.nn internals and utilities (hooks, parametrizations) are not allowed"
        return ""

    def check_torch_compute(self, parts: list[str], shown: str, node: ast.AST, kind: str) -> bool:
        """Strict: only values, allocation and views anywhere; nn modules and random init in __init__."""
        if not self.c.strict:
            return True
        second, where = parts[1], "forward" if kind == "compute" else "model_new.py"
        if kind == "inputs":
            return True
        init_like = kind in ("init", "module", "import")
        if second == "nn":
            return self.check_nn(parts, shown, node, init_like)
        tensor_method = second == "Tensor" and len(parts) > 2 and parts[2] not in TENSOR_METHODS_ALLOWED
        if not tensor_method and (second in TORCH_VALUES or second in TORCH_ALLOCATION or second in TORCH_VIEWS
                                   or second == "cuda"):
            return True
        if second in TORCH_INIT_ONLY and init_like:
            return True
        self.c.add("torch-compute", f"{shown} is PyTorch computation, which the strict policy forbids in {where}: "
                   f"{DO_INSTEAD}", node)
        return False

    def check_nn(self, parts: list[str], shown: str, node: ast.AST, init_like: bool) -> bool:
        third = parts[2] if len(parts) > 2 else ""
        if third == "functional":
            self.c.add("torch-functional", f"{shown} is torch.nn.functional computation, forbidden under the strict "
                       f"policy: {DO_INSTEAD}", node)
            return False
        if not third or (third in ("Module", "Parameter", "Buffer") and len(parts) == 3) \
                or ".".join(parts) == "torch.nn.Module.__init__":
            return True
        if third == "init" and init_like:
            return True
        if third[:1].isupper() and len(parts) == 3 and init_like:
            return True
        what = "may not construct or run nn modules" if third[:1].isupper() else "may not run PyTorch computation"
        self.c.add("torch-compute", f"{shown}: forward {what} under the strict policy; construct submodules in "
                   f"__init__ only to hold parameters and pass their weights to your kernels", node)
        return False

    def check_load_inline_use(self, node: ast.AST) -> bool:
        call = self.c.facts.inline_call
        if call is not None and node is call.func:
            return True
        if not self.c.strict and id(node) in self.c.facts.called:  # relaxed: any direct call, anywhere
            return True
        self.c.add("load-inline-placement", "load_inline may be called once, at module level, its result bound to "
                   "a module-level name (ext = load_inline(...)), and used nowhere else", node)
        return False


def relaxed_torch_allowed(parts: list[str]) -> bool:
    """torch.<...> names the relaxed policy allows although the strict tables refuse them."""
    dotted = ".".join(parts)
    if dotted in RELAXED_TORCH_FUNCTIONS or (len(parts) >= 3 and any(f.rsplit(".", 1)[0] == dotted
                                                                      for f in RELAXED_TORCH_FUNCTIONS)):
        return True   # the function, or the module that holds it (import torch.utils.checkpoint)
    second = parts[1]
    if second in RELAXED_TORCH_ALLOWED:
        return True
    if second in RELAXED_TORCH_MEMBERS:
        return len(parts) > 2 and parts[2] in RELAXED_TORCH_MEMBERS[second]
    return second == "cuda" and len(parts) > 2 and parts[2] in RELAXED_TORCH_CUDA_ALLOWED


def relaxed_private_allowed(attr: str) -> bool:
    """Relaxed: a _private attribute of an object other than self, where it is not one of nn.Module's or
    a tensor's internals (self.fused._kernel, ctx._shape); of a tensor's, only _version may be read."""
    return attr == "_version" or (attr not in shared_names() and attr not in module_private_names() and attr != "_C")


@functools.cache
def shared_names() -> frozenset[str]:
    """Attributes of torch.Tensor and nn.Module (forward included): replacing one on any object is refused."""
    import torch

    return (tensor_method_names() | module_attribute_names() | frozenset(dir(torch.Tensor))
            | frozenset(dir(torch.nn.Module)))


def is_builtin(name: str) -> bool:
    return hasattr(builtins, name)


def builtin_allowed(name: str) -> bool:
    value = getattr(builtins, name, None)
    if name in BUILTINS_FORBIDDEN:
        return False
    if isinstance(value, type) and issubclass(value, BaseException):
        return True
    return name in BUILTINS_ALLOWED
