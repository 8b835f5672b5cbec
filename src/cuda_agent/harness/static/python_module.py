"""Pass 1 of the model_new.py check: the module's shape, read before any expression is judged.

What each imported name stands for (refused imports are reported here), the module-level names and
functions, the one load_inline call, the classes' methods, and what ModelNew's __init__ stores on
self: submodules, tensors, the extension. A mixin of python.PythonChecker.
"""

from __future__ import annotations

import ast
import io
import tokenize
import unicodedata
from dataclasses import dataclass, field

from cuda_agent.harness.static.rules import (DANGEROUS_MODULES, EXTENSION_MODULE, IMPORTABLE, LOAD_INLINE,
                                             RELAXED_BY_NAME, RELAXED_IMPORTABLE, RELAXED_TORCH_MEMBERS)

BIDI_CONTROLS = {"\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069"}


@dataclass
class ModuleFacts:
    """What the names of model_new.py stand for, read before any expression is judged."""

    aliases: dict[str, str] = field(default_factory=dict)      # name -> qualified name (torch.nn, ...)
    extensions: set[str] = field(default_factory=set)          # names bound to the extension module
    extension_functions: set[str] = field(default_factory=set)  # from cuda_extension import f
    functions: set[str] = field(default_factory=set)           # module-level defs
    classes: set[str] = field(default_factory=set)             # module-level classes
    globals: set[str] = field(default_factory=set)             # every module-level binding
    methods: set[str] = field(default_factory=set)             # ModelNew's methods
    submodules: set[str] = field(default_factory=set)          # self.X = nn.Conv2d(...)
    tensors: set[str] = field(default_factory=set)             # self.X = nn.Parameter(...), buffers
    extension_attrs: set[str] = field(default_factory=set)     # self.X = the extension module
    extension_fn_attrs: set[str] = field(default_factory=set)  # self.X = cuda_extension.f
    inline_call: ast.Call | None = None                        # the one allowed load_inline call
    called: set[int] = field(default_factory=set)              # id() of every call's callee node



class ModuleReader:
    """Pass 1, mixed into PythonChecker (which provides add, qualify, facts, judge, strict)."""

    def check_text(self) -> None:
        """Identifiers that Python normalises to another name, and bidirectional-text controls."""
        for number, line in enumerate(self.lines, 1):
            if any(c in BIDI_CONTROLS for c in line):
                self.add("bidi-control", "bidirectional-text control characters can make code read differently "
                         "from how it runs; remove them", number)
        try:
            tokens = list(tokenize.generate_tokens(io.StringIO(self.source).readline))
        except (tokenize.TokenError, SyntaxError):
            return
        for tok in tokens:
            if tok.type == tokenize.NAME and not tok.string.isascii() \
                    and unicodedata.normalize("NFKC", tok.string) != tok.string:
                self.add("unicode-identifier", f"identifier {tok.string!r} is read by Python as "
                         f"{unicodedata.normalize('NFKC', tok.string)!r}; write names in plain ASCII", tok.start[0])

    # --- pass 1: the module's shape -----------------------------------------------------------

    def collect_module(self, tree: ast.Module) -> None:
        self.facts.called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
        for stmt in module_level(tree, nested=not self.strict):
            if isinstance(stmt, ast.Import | ast.ImportFrom):
                self.check_import(stmt)
            elif isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                self.facts.functions.add(stmt.name)
                self.facts.globals.add(stmt.name)
            elif isinstance(stmt, ast.ClassDef):
                self.facts.globals.add(stmt.name)
                self.facts.classes.add(stmt.name)
            elif isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for target in targets:
                    self.facts.globals.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
                if isinstance(stmt, ast.Assign) and self.is_load_inline(stmt.value) and len(stmt.targets) == 1 \
                        and isinstance(stmt.targets[0], ast.Name) and self.facts.inline_call is None:
                    self.facts.inline_call = stmt.value
                    self.facts.extensions.add(stmt.targets[0].id)
            elif self.strict:
                continue
            elif isinstance(stmt, ast.Try | ast.TryStar):  # relaxed: the names its handlers bind
                self.facts.globals.update(h.name for h in stmt.handlers if h.name)
            elif isinstance(stmt, ast.For | ast.With):
                targets = [stmt.target] if isinstance(stmt, ast.For) else [i.optional_vars for i in stmt.items]
                self.facts.globals.update(n.id for t in targets if t is not None for n in ast.walk(t)
                                          if isinstance(n, ast.Name))
        self.facts.globals.update(self.facts.aliases)

    def is_load_inline(self, node: ast.AST) -> bool:
        return isinstance(node, ast.Call) and self.qualify(node.func) == LOAD_INLINE

    def check_import(self, node: ast.Import | ast.ImportFrom) -> None:
        """Record what each imported name is, and flag imports outside the allowlist. A refused
        import is still recorded, so that its uses are judged by what they reach, not as unknown."""
        if isinstance(node, ast.Import):
            for alias in node.names:
                self.module_allowed(alias.name, node)
                local = alias.asname or alias.name.split(".")[0]
                self.bind_import(local, alias.name if alias.asname else local)
            return
        module = node.module or ""
        if node.level:
            self.add("import-forbidden", "relative imports are not allowed: import only torch, torch.nn and "
                     f"{EXTENSION_MODULE}", node)
            return
        if any(a.name == "*" for a in node.names):
            self.add("import-star", f"`from {module} import *` hides which names are used; import modules and "
                     "write module.name", node)
            return
        module_ok = self.module_allowed(module, node)
        for alias in node.names:
            if module_ok:
                self.from_import_allowed(module, alias.name, node)
            self.bind_import(alias.asname or alias.name, f"{module}.{alias.name}")
            if module == EXTENSION_MODULE:
                self.facts.extension_functions.add(alias.asname or alias.name)

    def bind_import(self, local: str, qualified: str) -> None:
        self.facts.aliases[local] = qualified
        if qualified == EXTENSION_MODULE:
            self.facts.extensions.add(local)

    def module_allowed(self, name: str, node: ast.AST) -> bool:
        root = name.split(".")[0]
        if name == "torch.nn.functional":
            if self.strict:
                self.add("import-functional", "torch.nn.functional is PyTorch computation, which the strict "
                         "policy forbids: write the operation as a CUDA kernel and call it through the extension",
                         node)
            return True
        if name in IMPORTABLE:
            return True
        if not self.strict and (name in RELAXED_BY_NAME or name in RELAXED_IMPORTABLE):   # judged name by name
            return True
        if not self.strict and root == "torch" and self.relaxed_torch_module(name.split("."), node):
            return True
        if root == "model":
            self.add("reference-import", "model_new.py must not import the reference (model.py): ModelNew "
                     "subclasses nn.Module and reimplements forward with your kernels", node)
        elif root in DANGEROUS_MODULES:
            self.add("import-forbidden", f"importing {name} is never allowed (no os, sys, subprocess, threads, "
                     "files, introspection or other libraries): import only torch, torch.nn and "
                     f"{EXTENSION_MODULE}", node)
        else:
            self.add("import-forbidden", f"importing {name} is not allowed: model_new.py may import only torch, "
                     f"torch.nn, math, typing and the extension ({EXTENSION_MODULE}, or load_inline from "
                     "torch.utils.cpp_extension)", node)
        return False

    def relaxed_torch_module(self, parts: list[str], node: ast.AST) -> bool:
        """Relaxed: a torch module whose names the policy allows (torch.cuda.amp, torch.backends.cudnn),
        or one of those it allows some members of (from torch.autograd import Function)."""
        if any(p.startswith("_") for p in parts):
            return False
        if len(parts) == 2 and parts[1] in RELAXED_TORCH_MEMBERS and isinstance(node, ast.ImportFrom):
            return True
        return not self.judge.torch_forbidden(parts)

    def from_import_allowed(self, module: str, name: str, node: ast.AST) -> None:
        if module == "torch.utils.cpp_extension" and name != "load_inline":
            self.add("torch-forbidden", f"only load_inline may be imported from torch.utils.cpp_extension, "
                     f"not {name}: the harness builds the sources itself", node)
        elif module in ("torch", "torch.nn") and name == "functional":
            self.module_allowed("torch.nn.functional", node)
        elif module.split(".")[0] in ("torch", "math", "typing", "os", "time"):
            self.judge.check_qualified(f"{module}.{name}", node, kind="import")

    def find_model_new(self, tree: ast.Module) -> ast.ClassDef | None:
        classes = [s for s in tree.body if isinstance(s, ast.ClassDef) and s.name == "ModelNew"]
        if not classes:
            self.add("model-new-missing", "model_new.py must define `class ModelNew(nn.Module)` at module level", 1)
            return None
        return classes[-1]

    def collect_self(self, cls: ast.ClassDef, tree: ast.Module) -> None:
        """The classes' methods, and what ModelNew's __init__ stores on self."""
        self.facts.methods = {s.name for c in (c for c in tree.body if isinstance(c, ast.ClassDef)) for s in c.body
                              if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef)}
        init = next((s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)
        if init is None:
            return
        for node in ast.walk(init):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                            and target.value.id == "self":
                        self.classify_self_attr(target.attr, node.value)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("register_buffer", "register_parameter") and node.args \
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                self.facts.tensors.add(node.args[0].value)

    def classify_self_attr(self, name: str, value: ast.expr) -> None:
        facts = self.facts
        qualified = self.qualify(value)
        if (isinstance(value, ast.Name) and value.id in facts.extensions) or qualified == EXTENSION_MODULE:
            facts.extension_attrs.add(name)
        elif (isinstance(value, ast.Name) and value.id in facts.extension_functions) or (
                isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name)
                and value.value.id in facts.extensions):
            facts.extension_fn_attrs.add(name)
        elif isinstance(value, ast.Call):
            called = self.qualify(value.func) or ""
            parts = called.split(".")
            if called.startswith("torch.nn.") and parts[2][:1].isupper() and parts[2] not in ("Parameter", "Buffer"):
                facts.submodules.add(name)
            elif called.startswith("torch."):
                facts.tensors.add(name)


COMPOUND = (ast.If, ast.Try, ast.TryStar, ast.With, ast.For, ast.While)


def module_level(tree: ast.Module, nested: bool) -> list[ast.stmt]:
    """The module's statements; with `nested`, also those inside module-level if/try/with/for
    blocks (the relaxed policy's module-level code), each compound statement before its body."""
    out: list[ast.stmt] = []
    stack = list(reversed(tree.body))
    while stack:
        stmt = stack.pop()
        out.append(stmt)
        if nested and isinstance(stmt, COMPOUND):
            bodies = [stmt.body, getattr(stmt, "orelse", []), getattr(stmt, "finalbody", []),
                      *(h.body for h in getattr(stmt, "handlers", []))]
            stack.extend(reversed([s for body in bodies for s in body]))
    return out
