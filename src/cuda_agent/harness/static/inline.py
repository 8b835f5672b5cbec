"""A load_inline solution's C++/CUDA strings and flags, read from model_new.py without running it.

The harness builds those strings itself (build.inline_sources), so it must know them exactly:
each argument of a load_inline call must be a literal, or a module-level name bound once to
a literal or to a concatenation of literals. Anything computed (f-strings, calls, loops) is
refused with a Finding that says so. The strict policy allows one call, at module level; the
relaxed policy (KernelBench's) any number, anywhere (inside try/except, in a function), each
built as the module its name says; in the child, load_inline returns the module built for the
name it is called with.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, replace

from cuda_agent.harness.result import Finding
from cuda_agent.harness.static.rules import LDFLAGS_ALLOWED

UNRESOLVABLE = ("load_inline arguments must be literal strings or module-level string constants so the harness "
                "can scan and build them")
MAX_SOURCE_CHARS = 2 << 20
POSITIONAL = ("name", "cpp_sources", "cuda_sources")
SOURCES = {"name", "cpp_sources", "cuda_sources", "functions", "extra_cflags", "extra_cuda_cflags", "extra_ldflags"}
IGNORED = {"verbose", "with_cuda", "keep_intermediates", "with_pytorch_error_handling", "use_pch",
           "no_implicit_headers", "is_python_module", "sycl_sources", "extra_sycl_cflags", "with_sycl"}
REFUSED = {"extra_include_paths": "include files from the sources themselves; extra include paths are not allowed",
           "build_directory": "the harness chooses where to build"}
# Compiler flags that would bring in code or libraries the scan has not seen.
FLAG_REFUSED = re.compile(
    r"-I|-L|-l(?!ineinfo)|-include|-imacros|-isystem|-iquote|-idirafter|-isysroot|--include-path|--pre-include|--library"
    r"|-Wl,|-Xlinker|--linker-options|-fplugin|-specs|-B|-ccbin|--compiler-bindir|-x\b|@|-fopenmp|-openmp"
    r"|-pthread|--default-stream|--define-macro|-D\w+=(?![-+]?[\d.]+[A-Za-z]*$)|-o\b|--output")
UNREAD_RELAXED = {"build_directory", "verbose", "keep_intermediates", "with_pytorch_error_handling", "use_pch"}
HOST_FLAGS = ("-Xcompiler", "--compiler-options")   # nvcc passes their value (comma-separated) to the host compiler


@dataclass(frozen=True)
class InlineSpec:
    """What load_inline was asked to build."""

    name: str
    cpp_sources: list[str]
    cuda_sources: list[str]
    functions: list[str] | None
    extra_cflags: list[str]
    extra_cuda_cflags: list[str]
    extra_ldflags: list[str]
    line: int
    # relaxed: the name was computed at run time (f"ext_{os.getpid()}"); the module is built under a
    # name of the harness's (inline_line<N>), which is right only where it is the one module
    computed_name: bool = False


class Unresolved(Exception):
    """An argument the checker cannot read without running code; carries the node."""

    def __init__(self, message: str, node: ast.AST):
        super().__init__(message)
        self.node = node


def is_inline_solution(source: str) -> bool:
    """Whether model_new.py calls torch.utils.cpp_extension.load_inline."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "load_inline" in source
    return bool(load_inline_calls(tree))


def extract_inline(source: str, filename: str = "model_new.py") -> InlineSpec | None | Finding:
    """The load_inline call's arguments; None without a call; a Finding when they cannot be read."""
    try:
        tree = ast.parse(source, filename)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        if "load_inline" not in source:
            return None
        return Finding("syntax", f"model_new.py does not parse: {e}", filename, getattr(e, "lineno", 0) or 0)
    calls = load_inline_calls(tree)
    if not calls:
        return None
    if len(calls) > 1:
        return Finding("inline-multiple", "load_inline may be called exactly once (put every kernel in its sources)",
                       filename, calls[1].lineno)
    call = calls[0]
    if not any(isinstance(s, ast.Assign) and s.value is call and len(s.targets) == 1
               and isinstance(s.targets[0], ast.Name) for s in tree.body):
        return Finding("load-inline-placement", "load_inline must be called at module level, its result bound to a "
                       "module-level name (ext = load_inline(...))", filename, call.lineno)
    try:
        return read_spec(call, module_constants(tree))
    except Unresolved as e:
        return Finding("inline-unresolvable", str(e), filename, getattr(e.node, "lineno", call.lineno),
                       ast.unparse(e.node)[:160] if isinstance(e.node, ast.AST) else "")


def extract_inlines(source: str, policy: str = "strict", filename: str = "model_new.py") -> list[InlineSpec] | Finding:
    """Every load_inline call's arguments, one spec per module name ([] without a call); a Finding
    when one cannot be read. Strict: the one module-level call of extract_inline."""
    if policy == "strict":
        spec = extract_inline(source, filename)
        return spec if isinstance(spec, Finding) else [] if spec is None else [spec]
    try:
        tree = ast.parse(source, filename)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        if "load_inline" not in source:
            return []
        return Finding("syntax", f"model_new.py does not parse: {e}", filename, getattr(e, "lineno", 0) or 0)
    env = module_constants(tree)
    scopes = enclosing_functions(tree)
    specs: dict[str, InlineSpec] = {}
    for call in load_inline_calls(tree):
        local = env
        for scope in scopes.get(id(call), []):  # in a class: self.<name> bound once in it; in a function: its names
            local = {**local, **(self_constants(scope) if isinstance(scope, ast.ClassDef) else module_constants(scope))}
        try:
            spec = read_spec(call, local, relaxed=True)
        except Unresolved as e:
            return Finding("inline-unresolvable", str(e), filename, getattr(e.node, "lineno", call.lineno),
                           ast.unparse(e.node)[:160] if isinstance(e.node, ast.AST) else "")
        first = specs.setdefault(spec.name, spec)
        if replace(first, line=0) != replace(spec, line=0):
            return Finding("inline-multiple", f"two load_inline calls (lines {first.line} and {spec.line}) are "
                           f"named {spec.name!r} but build different sources or flags: give each module its own "
                           "name", filename, spec.line)
    computed = next((s for s in specs.values() if s.computed_name), None)
    if computed is not None and len(specs) > 1:
        return Finding("inline-unresolvable", f"load_inline's name (line {computed.line}) is computed and model_new.py "
                       "builds several modules: name each with a literal string so the harness can tell them apart",
                       filename, computed.line)
    return list(specs.values())


def enclosing_functions(tree: ast.Module) -> dict[int, list[ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef]]:
    """id() of every call -> the classes and functions around it, outermost first."""
    out: dict[int, list] = {}

    def walk(node: ast.AST, around: list) -> None:
        for child in ast.iter_child_nodes(node):
            scope = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            inner = around + [child] if scope else around
            if isinstance(child, ast.Call):
                out[id(child)] = inner
            walk(child, inner)

    walk(tree, [])
    return out


def load_inline_calls(tree: ast.Module) -> list[ast.Call]:
    """Calls whose callee is load_inline under any import spelling."""
    names, modules = load_inline_names(tree)
    calls = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in names:
            calls.append(node)
        elif isinstance(func, ast.Attribute) and func.attr == "load_inline" and dotted(func.value) in modules:
            calls.append(node)
    return sorted(calls, key=lambda c: (c.lineno, c.col_offset))


def load_inline_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """Names bound to load_inline, and dotted names bound to torch.utils.cpp_extension."""
    names, modules = set(), {"torch.utils.cpp_extension"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "torch.utils.cpp_extension":
            names.update(a.asname or a.name for a in node.names if a.name == "load_inline")
        elif isinstance(node, ast.ImportFrom) and node.module == "torch.utils":
            modules.update(a.asname or a.name for a in node.names if a.name == "cpp_extension")
        elif isinstance(node, ast.Import):
            modules.update(a.asname for a in node.names if a.name == "torch.utils.cpp_extension" and a.asname)
    return names, modules


def dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    return ""


def module_constants(tree: ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
                     ) -> dict[str, ast.expr | None]:
    """NAME = value bindings of a module's (or a function's, or a class's) body, also inside its if/try/with/for
    blocks (`if torch.cuda.is_available(): SRC = r"..."`), not inside nested functions or classes;
    None for a name bound more than once (ambiguous). Reading a binding that never runs is harmless:
    in the child, load_inline returns the module built from what was read here, whatever it is passed."""
    env: dict[str, ast.expr | None] = {}
    for stmt in _statements(tree.body):
        if isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign) and stmt.value is not None:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for target in targets:
                for name in (n.id for n in ast.walk(target) if isinstance(n, ast.Name)):
                    single = isinstance(stmt, ast.Assign | ast.AnnAssign) and isinstance(target, ast.Name)
                    env[name] = stmt.value if single and name not in env else None
    return env


def self_constants(cls: ast.ClassDef) -> dict[str, ast.expr | None]:
    """"self.NAME" -> the value a class binds it to once: `self.src = r"..."` in any of its methods, or
    `src = r"..."` in its body; None where it is bound more than once or other than by `=` (ambiguous).
    The harness builds what is read here, so only a binding that cannot change is read."""
    env = {f"self.{name}": value for name, value in module_constants(cls).items()}
    single = {id(t): n.value for n in ast.walk(cls) if isinstance(n, ast.Assign | ast.AnnAssign) and n.value is not None
              for t in (n.targets if isinstance(n, ast.Assign) else [n.target])}
    for node in ast.walk(cls):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store | ast.Del) \
                and isinstance(node.value, ast.Name) and node.value.id == "self":
            key = f"self.{node.attr}"
            env[key] = single.get(id(node)) if key not in env else None
    return env


def read_spec(call: ast.Call, env: dict[str, ast.expr | None], relaxed: bool = False) -> InlineSpec:
    """The call's arguments; `relaxed`: where it builds (build_directory) and whether it prints
    (verbose) are not read at all, since the harness decides both."""
    if len(call.args) > len(POSITIONAL) or any(isinstance(a, ast.Starred) for a in call.args):
        raise Unresolved("pass load_inline's arguments after cuda_sources by keyword", call)
    given: dict[str, ast.expr] = dict(zip(POSITIONAL, call.args))
    for keyword in call.keywords:
        if keyword.arg is None:
            raise Unresolved(f"**kwargs in load_inline: {UNRESOLVABLE}", keyword.value)
        if relaxed and keyword.arg in UNREAD_RELAXED:
            continue
        if keyword.arg in REFUSED:
            raise Unresolved(f"load_inline({keyword.arg}=...) is not allowed: {REFUSED[keyword.arg]}", keyword.value)
        if keyword.arg not in SOURCES | IGNORED:
            raise Unresolved(f"load_inline has no argument {keyword.arg!r} the harness accepts", keyword.value)
        given[keyword.arg] = keyword.value
    memo: dict[str, object] = {}
    computed_name = False
    if relaxed and "name" in given:
        try:
            literal(given["name"], env, memo=memo)
        except Unresolved:   # the name only labels the module: built under one of the harness's
            given = {**given, "name": ast.Constant(f"inline_line{call.lineno}")}
            computed_name = True
    values = {key: literal(node, env, memo=memo) for key, node in given.items()}
    for key in IGNORED & set(values):
        check_ignored(key, values[key], given[key])
    name = values.get("name")
    if not isinstance(name, str) or not name.isidentifier():
        raise Unresolved("load_inline's name must be a literal string that is a valid module name",
                         given.get("name", call))
    return InlineSpec(computed_name=computed_name, name=name, cpp_sources=strings(values, given, "cpp_sources", call),
                      cuda_sources=strings(values, given, "cuda_sources", call),
                      functions=function_names(values.get("functions"), given.get("functions", call)),
                      extra_cflags=strings(values, given, "extra_cflags", call),
                      extra_cuda_cflags=strings(values, given, "extra_cuda_cflags", call),
                      extra_ldflags=strings(values, given, "extra_ldflags", call), line=call.lineno)


def check_ignored(key: str, value: object, node: ast.AST) -> None:
    """Arguments the harness does not need: constants only, and none that changes what is built."""
    if key in ("sycl_sources", "extra_sycl_cflags", "with_sycl") and value not in (None, [], "", False):
        raise Unresolved(f"load_inline({key}=...) is not supported: write CUDA", node)
    if key == "is_python_module" and value is not True:
        raise Unresolved("load_inline(is_python_module=False) is not supported: the harness imports the module", node)
    if not isinstance(value, bool | type(None)):
        raise Unresolved(f"load_inline({key}=...) must be True, False or None", node)


def strings(values: dict[str, object], given: dict[str, ast.expr], key: str, call: ast.Call) -> list[str]:
    value = values.get(key)
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise Unresolved(f"load_inline's {key} must be a string or a list of strings", given.get(key, call))


def function_names(value: object, node: ast.AST) -> list[str] | None:
    if value is None:
        return None
    names = [value] if isinstance(value, str) else list(value) if isinstance(value, list | dict) else None
    if names is None or not all(isinstance(n, str) and n.isidentifier() for n in names):
        raise Unresolved("load_inline's functions must be plain C++ function names (identifiers, no ::)", node)
    return names


def literal(node: ast.AST, env: dict[str, ast.expr | None], depth: int = 0,
            memo: dict[str, object] | None = None) -> object:
    """The value of a literal expression: strings, numbers, lists, dicts, `+` of strings or of
    lists, and module-level names bound once to such an expression."""
    memo = {} if memo is None else memo
    again = lambda n: literal(n, env, depth + 1, memo)  # noqa: E731
    if depth > 64:
        raise Unresolved(f"load_inline argument nests too deeply: {UNRESOLVABLE}", node)
    if isinstance(node, ast.Constant) and isinstance(node.value, str | bool | int | float | type(None)):
        return node.value
    if isinstance(node, ast.JoinedStr):   # f"...{BLOCK}...": literal where every value is (no conversion or format)
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                parts.append(value.value)
                continue
            if not (isinstance(value, ast.FormattedValue) and value.conversion == -1 and value.format_spec is None):
                raise Unresolved(f"f-strings with conversions or formats are computed: {UNRESOLVABLE}", node)
            inner = again(value.value)
            if not isinstance(inner, str | int | float) or isinstance(inner, bool):
                raise Unresolved(f"f-strings are computed unless each value is a literal string or number: "
                                 f"{UNRESOLVABLE}", node)
            parts.append(str(inner))
        joined = "".join(parts)
        if len(joined) > MAX_SOURCE_CHARS:
            raise Unresolved(f"load_inline sources larger than {MAX_SOURCE_CHARS} characters", node)
        return joined
    if isinstance(node, ast.List | ast.Tuple):
        return [again(e) for e in node.elts]
    if isinstance(node, ast.Dict) and all(k is not None for k in node.keys):
        return {again(k): again(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = again(node.left), again(node.right)
        if isinstance(left, str) and isinstance(right, str) or isinstance(left, list) and isinstance(right, list):
            if len(left) + len(right) > MAX_SOURCE_CHARS:
                raise Unresolved(f"load_inline sources larger than {MAX_SOURCE_CHARS} characters", node)
            return left + right
    key = node.id if isinstance(node, ast.Name) else dotted(node) if isinstance(node, ast.Attribute) else ""
    if key and key in env:   # NAME, or self.NAME inside a class
        if env[key] is None:
            raise Unresolved(f"{key} is assigned more than once: {UNRESOLVABLE}", node)
        if key not in memo:
            memo[key] = again(env[key])
        return memo[key]
    raise Unresolved(f"{ast.unparse(node)[:80]} is computed: {UNRESOLVABLE}", node)


def check_inline_flags(spec: InlineSpec, filename: str = "model_new.py") -> list[Finding]:
    """Link and compile flags that would pull in libraries or code the scan has not seen."""
    findings = []
    for flag in spec.extra_ldflags:
        if flag.strip() and flag.strip() not in LDFLAGS_ALLOWED:
            findings.append(Finding("inline-flags", f"extra_ldflags {flag!r}: only {', '.join(sorted(LDFLAGS_ALLOWED))} "
                                    "may be linked (cuBLAS for GEMM, cuDNN for convolutions)", filename, spec.line))
    for key, flags in (("extra_cflags", spec.extra_cflags), ("extra_cuda_cflags", spec.extra_cuda_cflags)):
        for flag in compiler_flags(flags):
            if FLAG_REFUSED.match(flag):
                findings.append(Finding("inline-flags", f"{key} {flag!r} is not allowed: include paths, forced "
                                        "includes, libraries, linker and plugin flags, OpenMP and macros with "
                                        "non-numeric values could bring in code the checks have not seen",
                                        filename, spec.line))
    return findings


def compiler_flags(flags: list[str]) -> list[str]:
    """Every flag, with the values of -Xcompiler/--compiler-options split out as flags of their own."""
    out: list[str] = []
    host_value_next = False
    for flag in (f for raw in flags for f in raw.split()):
        name, _, value = flag.partition("=")
        if host_value_next:
            out.extend(v for v in flag.split(",") if v)
            host_value_next = False
        elif name in HOST_FLAGS:
            out.extend(v for v in value.split(",") if v)
            host_value_next = not value
        else:
            out.append(flag)
    return out


def _statements(body: list[ast.stmt]):
    """The statements of a body and of the blocks nested in it, not of nested functions or classes."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for block in ("body", "orelse", "finalbody"):
            yield from _statements(getattr(stmt, block, None) or [])
        for handler in getattr(stmt, "handlers", None) or []:
            yield from _statements(handler.body)
        for case in getattr(stmt, "cases", None) or []:
            yield from _statements(case.body)
