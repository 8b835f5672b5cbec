"""Static check of C++/CUDA sources (policies: see static/__init__.py).

The text is first put in the shape the compiler sees it (cpp_text.py): line continuations spliced,
comments and the contents of string and character literals blanked (offsets and line numbers are
kept), digraphs spelled out. So a banned word in a comment does not count, and a word split across a
line continuation or hidden in a `%:define` does. String literals are kept aside decoded, as the
compiler reads them (literals.py), for the few places where a string names something: asm labels
and templates (asm.py) and _Pragma. Then scans over the code: preprocessor directives (includes,
pragmas), qualified names (at::, torch::, c10::, pybind11::, std::), identifiers (processes, the
interpreter, files, the dispatcher, streams, libraries), member calls (tensor computation), inline
assembly, and unqualified ATen operator names (found by argument-dependent lookup).

A determined author can still reach ATen through a call the scan cannot name: an overload of
their own that loses to at::<op> by argument-dependent lookup, say. Those calls go through the
dispatcher, where the runtime check sees them.
"""

from __future__ import annotations

import posixpath
import re

from cuda_agent.harness.result import Finding, StaticReport
from cuda_agent.harness.static.asm import asm_uses, template_problems
from cuda_agent.harness.static.cpp_text import DIRECTIVE, CppSource, declared_names, prepare
from cuda_agent.harness.static.literals import literal_run
from cuda_agent.harness.static.rules import (
    ATEN_ALLOWED,
    ATEN_COMPUTE_NAMES,
    ATEN_CUDA_ALLOWED,
    ATEN_ROOTS,
    ATEN_THREADS,
    CPP_FORBIDDEN_CALLS,
    CPP_FORBIDDEN_PREFIXES,
    CPP_FORBIDDEN_WORDS,
    CPP_MEMBERS_FORBIDDEN,
    HEADER_PREFIXES_ALLOWED,
    HEADERS_ALLOWED,
    LIBRARY_HEADERS,
    LIBRARY_NAMESPACES,
    LIBRARY_PREFIXES,
    POLICIES,
    PYBIND_ALLOWED,
    PYBIND_ROOTS,
    RELAXED_CPP_ALLOWED,
    STD_FORBIDDEN,
    STD_HEADERS,
    STD_WORDS_FORBIDDEN,
    SYSTEM_HEADERS_FORBIDDEN,
    Policy,
    cpp_tensor_methods_forbidden,
)

BIDI_CONTROLS = re.compile("[\u202a-\u202e\u2066-\u2069]")
IDENTIFIER = re.compile(r"(?<![\w$])[A-Za-z_]\w*")
QUALIFIED = re.compile(r"(?<![\w.$])((?:::\s*)?[A-Za-z_]\w*(?:\s*::\s*~?[A-Za-z_]\w*)+)")
MEMBER_CALL = re.compile(r"(?:\.|->)\s*(?:template\s+)?([A-Za-z_]\w*)\s*(?:<[^;(){}]{0,200}?>\s*)?\(")
NAMESPACE_ALIAS = re.compile(r"\bnamespace\s+(\w+)\s*=\s*((?:::\s*)?\w+(?:\s*::\s*\w+)*)\s*;")
USING_NAMESPACE = re.compile(r"\busing\s+namespace\s+((?:::\s*)?\w+(?:\s*::\s*\w+)*)")
REOPEN_NAMESPACE = re.compile(r"\bnamespace\s+(at|torch|c10|aten|caffe2|pybind11|py|std|cuda_agent)\b\s*(?:::|\{)")
# Attributes that bind a declaration to another symbol by name, as an asm label does.
SYMBOL_ATTRIBUTE = re.compile(r'(?<![\w$])(?:__)?(?:weakref|alias|ifunc)(?:__)?\b(?=\s*\(\s*(?:u8|[uUL])?R?")'
                              r"|(?<![\w$])(?:__)?weakref(?:__)?(?![\w$])")
# BLAS/LAPACK exported by the libraries every extension links (MKL/OpenBLAS inside libtorch).
BLAS_SYMBOL = re.compile(r"\b(?:cblas_\w+|LAPACKE_\w+|[sdczh](?:gemm|gemv|ger|axpy|dot|scal|trsm|trmm|syrk|symm|"
                         r"gemm_batch|getrf|potrf|gesv)_?)\s*\(")
MAX_PER_RULE = 20   # findings kept per rule and file: enough to act on, and bounded for hostile input
HEADER_SUFFIXES = (".h", ".cuh", ".hpp", ".hh", ".inl", ".inc")

MESSAGES = {
    "threads-process": "threads and processes are not allowed (std::thread, pthread, fork, exec, system, OpenMP, "
                       "host callbacks): parallelise on the GPU",
    "exit": "exiting or signalling the process is not allowed: report errors with TORCH_CHECK",
    "python": "calling into the Python interpreter from C++ is not allowed: bindings take and return tensors "
              "and numbers (pybind11::module, m.def and pybind11::arg are all a binding needs)",
    "files": "files, the environment, dynamic loading and system calls are not allowed in kernels",
    "dispatcher": "PyTorch's dispatcher (dispatch keys, operator registration, TORCH_LIBRARY) is the harness's",
    "torch-state": "PyTorch's global state (TF32, cuDNN flags, seeds, the caching allocator) is the harness's",
    "streams": "side streams, events, graphs, device-wide synchronisation, managed memory and device state are "
               "not allowed: launch on the current stream (at::cuda::getCurrentCUDAStream())",
    "code-loading": "compiling or loading code at run time is not allowed: every kernel must be in the sources",
}
TORCH_COMPUTE = ("the strict policy forbids ATen/torch computation in C++: use ATen only to allocate "
                 "(torch::empty, torch::empty_like, ...) and read metadata (sizes, strides, data_ptr, ...), and "
                 "write the computation as a CUDA kernel")
ONLY_LIBRARIES = "only cuBLAS (GEMM) and cuDNN (convolutions) may be used"
ASM_LABEL_ADVICE = "remove it, and call only your own functions (and the allowed libraries) by their own names"


def check_cpp(source: str, filename: str, policy: Policy = "strict", *, local_headers: set[str] | None = None,
              declared: set[str] | None = None) -> StaticReport:
    """Check one C/C++/CUDA source. `local_headers`: the solution's own files, for quoted includes;
    `declared`: names the solution declares (for the ADL scan), by default this file's own."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}: use one of {POLICIES}")
    src = prepare(source)
    scan = CppScan(src, filename, policy, local_headers, declared if declared is not None else declared_names(src))
    scan.run()
    findings = sorted(scan.findings, key=lambda f: (f.line, f.rule))
    return StaticReport(ok=not findings, findings=findings, policy=policy)


class CppScan:
    """The scans over one prepared source; findings accumulate in `findings`."""

    def __init__(self, src: CppSource, filename: str, policy: Policy, local_headers: set[str] | None,
                 declared: set[str]):
        self.src, self.filename, self.policy = src, filename, policy
        self.strict = policy == "strict"
        self.local_headers, self.declared = local_headers, declared
        self.findings: list[Finding] = []
        self.seen: set[tuple[str, int, str]] = set()
        self.per_rule: dict[str, int] = {}
        self.aliases = {m.group(1): normalize(m.group(2)) for m in NAMESPACE_ALIAS.finditer(src.code)}
        self.aliases.update(macro_aliases(src.code))
        used = {self.resolve(normalize(m.group(1)))[0] for m in USING_NAMESPACE.finditer(src.code)}
        self.std_used = "std" in used
        self.aten_used = bool(used & ATEN_ROOTS)

    def add(self, rule: str, message: str, offset: int) -> None:
        line = self.src.line[offset] if 0 <= offset < len(self.src.line) else 0
        key = (rule, line, message)
        if key in self.seen or self.per_rule.get(rule, 0) >= MAX_PER_RULE:
            return
        self.seen.add(key)
        self.per_rule[rule] = self.per_rule.get(rule, 0) + 1
        start = self.src.text.rfind("\n", 0, offset) + 1
        end = self.src.text.find("\n", offset)
        snippet = self.src.text[start:end if end >= 0 else None].strip()[:160]
        self.findings.append(Finding(rule, message, self.filename, line, snippet))

    def run(self) -> None:
        self.check_obfuscation()
        self.check_directives()
        self.check_namespaces()
        self.check_qualified_names()
        self.check_identifiers()
        self.check_member_calls()
        self.check_asm()
        self.check_blas()
        if self.strict:
            self.check_unqualified_aten()

    # --- text ---------------------------------------------------------------------------------

    def check_obfuscation(self) -> None:
        for m in BIDI_CONTROLS.finditer(self.src.text):
            self.add("bidi-control", "bidirectional-text control characters can make code read differently from "
                     "how it compiles; remove them", m.start())
        for m in re.finditer("##", self.src.code):
            self.add("cpp-token-paste", "token pasting (##) can build names the checks cannot see; write names "
                     "out in full", m.start())
        for m in re.finditer(r"\\[uU][0-9A-Fa-f]{4}|[^\x00-\x7f]", self.src.code):
            self.add("cpp-obfuscation", "non-ASCII characters and universal character names are not allowed in "
                     "code (outside comments and strings): write identifiers in plain ASCII", m.start())
        for m in re.finditer(r"\?\?[=/'()!<>\-]", self.src.code):
            self.add("cpp-obfuscation", "trigraphs are not allowed", m.start())

    # --- preprocessor -------------------------------------------------------------------------

    def check_directives(self) -> None:
        for m in DIRECTIVE.finditer(self.src.code):
            name, offset = m.group(1), m.start()
            if name == "include":
                self.check_include(self.src.text[m.start(2):m.end(2)].strip(), offset)
            elif name in ("include_next", "import", "embed"):
                self.add("cpp-include", f"#{name} is not allowed: use #include of an allowed header", offset)
            elif name == "pragma":
                self.check_pragma(m.group(2), offset)
            elif name == "define":
                self.check_define_body(m.group(2), m.start(2))
        for m in re.finditer(r"\b_Pragma\s*\(", self.src.code):
            run = literal_run(self.src.code, m.end(), self.src.literals)   # read decoded: "\x6fmp" is omp
            self.check_pragma(run[0] if run else "", m.start())

    def check_pragma(self, text: str, offset: int) -> None:
        words = text.split()
        if words[:1] == ["omp"]:
            self.add("cpp-threads-process", MESSAGES["threads-process"], offset)
        elif words[:1] in (["redefine_extname"], ["weak"]):
            self.add("cpp-asm-label", f"#pragma {words[0]} binds a declaration to another symbol, as an asm label "
                     f"does: {ASM_LABEL_ADVICE}", offset)

    def check_include(self, operand: str, offset: int) -> None:
        m = re.fullmatch(r'<([^<>]+)>|"([^"]+)"', operand.split("//")[0].strip())
        if not m:
            self.add("cpp-include", "#include of a macro-built name is not allowed: write the header's name", offset)
            return
        path = (m.group(1) or m.group(2)).strip()
        if path.startswith(("/", "\\")) or ".." in path.replace("\\", "/").split("/") and m.group(1):
            self.add("cpp-include", f"#include {operand}: absolute paths and .. are not allowed", offset)
            return
        if m.group(2) is not None:
            resolved = posixpath.normpath(posixpath.join(posixpath.dirname(self.filename), path))
            if resolved.startswith("..") or resolved.startswith("/"):
                self.add("cpp-include", f"#include {operand} reaches outside the solution", offset)
                return
            if resolved == "binding_registry.h" or (self.local_headers is not None and resolved in self.local_headers):
                return
            if self.local_headers is None and path.endswith(HEADER_SUFFIXES) and not self.library(path) \
                    and not self.system_forbidden(path):
                return
        self.check_system_header(path, operand, offset)

    def check_system_header(self, path: str, operand: str, offset: int) -> None:
        refused = self.system_forbidden(path)
        if refused:
            self.add("cpp-include", f"#include {operand} ({refused}) is not allowed", offset)
            return
        if not self.strict or path in STD_HEADERS or path in HEADERS_ALLOWED or path.startswith(HEADER_PREFIXES_ALLOWED):
            return
        library = self.library(path)
        if library:
            self.add("cpp-library", f"#include {operand}: {library} is not allowed; {ONLY_LIBRARIES}", offset)
        else:
            self.add("cpp-include", f"#include {operand} is not on the allowlist (C/C++ standard headers, CUDA, "
                     "cuBLAS, cuDNN, torch/types.h, torch/extension.h, pybind11 and your own headers)", offset)

    @staticmethod
    def system_forbidden(path: str) -> str:
        return next((why for key, why in SYSTEM_HEADERS_FORBIDDEN.items() if path == key or path.startswith(key)), "")

    @staticmethod
    def library(path: str) -> str:
        return next((name for key, name in LIBRARY_HEADERS.items() if path.startswith(key)), "")

    def check_define_body(self, rest: str, offset: int) -> None:
        """A macro standing for a forbidden function (`#define RUN system`), an ATen operator
        (`#define OP matmul`), or building a qualified name from its argument (`#define NS(x) std::x`)."""
        m = re.match(r"\s*\w+(\([^)]*\))?", rest)
        params = set(re.findall(r"\w+", m.group(1) or "")) if m else set()
        body = rest[m.end() if m else 0:]
        body_offset = offset + len(rest) - len(body)
        for q in QUALIFIED.finditer(body):
            if normalize(q.group(1))[-1] in params:
                self.add("cpp-obfuscation", "a macro that builds a qualified name from its argument hides what is "
                         "called; write the name out", body_offset + q.start())
        for word in IDENTIFIER.finditer(body):
            name, before = word.group(0), body[max(0, word.start() - 3):word.start()].rstrip()
            if name in params or before.endswith((".", "->", "::")):
                continue
            if name in CPP_FORBIDDEN_CALLS or (self.std_used and name in STD_WORDS_FORBIDDEN):
                category = CPP_FORBIDDEN_CALLS.get(name) or std_category(name)
                self.add(f"cpp-{category}", f"a macro standing for {name}: {MESSAGES[category]}",
                         body_offset + word.start())
            elif self.strict and name in ATEN_COMPUTE_NAMES and name not in self.declared:
                self.add("cpp-torch-compute", f"a macro standing for {name} (an ATen operator): {TORCH_COMPUTE}",
                         body_offset + word.start())

    # --- names --------------------------------------------------------------------------------

    def resolve(self, parts: list[str]) -> list[str]:
        """Expand namespace aliases (namespace F = torch::nn::functional;) at the front of a name."""
        for _ in range(8):
            if parts and parts[0] in self.aliases:
                parts = self.aliases[parts[0]] + parts[1:]
            else:
                break
        return parts

    def check_namespaces(self) -> None:
        for m in USING_NAMESPACE.finditer(self.src.code):
            parts = self.resolve(normalize(m.group(1)))
            if parts[0] in ATEN_ROOTS and self.strict and parts[:2] != ["torch", "indexing"]:
                self.add("cpp-torch-compute", f"using namespace {'::'.join(parts)} makes ATen operators callable "
                         "without at::; write at::/torch:: names out (allocation and metadata only)", m.start())
            elif parts[0] in PYBIND_ROOTS:
                self.add("cpp-python", f"using namespace {'::'.join(parts)}: {MESSAGES['python']}", m.start())
        for m in REOPEN_NAMESPACE.finditer(self.src.code):
            self.add("cpp-namespace", f"adding to namespace {m.group(1)} is not allowed: it belongs to PyTorch, "
                     "pybind11, the standard library or the harness", m.start())

    def check_qualified_names(self) -> None:
        for m in QUALIFIED.finditer(self.src.code):
            parts = self.resolve(normalize(m.group(1)))
            shown = "::".join(parts)
            root = parts[0]
            if root in ATEN_ROOTS:
                self.check_aten(parts, shown, m.start())
            elif root in PYBIND_ROOTS:
                self.check_pybind(parts, shown, m.start())
            elif root == "std" and parts[1] in STD_FORBIDDEN:
                self.add(f"cpp-{std_category(parts[1])}", f"{shown}: {MESSAGES[std_category(parts[1])]}", m.start())
            elif root in LIBRARY_NAMESPACES and self.strict:
                self.add("cpp-library", f"{shown}: {LIBRARY_NAMESPACES[root]} is not allowed; {ONLY_LIBRARIES}",
                         m.start())

    def check_aten(self, parts: list[str], shown: str, offset: int) -> None:
        category = next((c for part, c in (("impl", "dispatcher"), ("jit", "code-loading"), ("python", "python"))
                         if part in parts), None)
        if category is None and ATEN_THREADS & set(parts[1:]):
            category = "threads-process"
        if category:
            self.add(f"cpp-{category}", f"{shown}: {MESSAGES[category]}", offset)
            return
        if not self.strict or aten_allowed(parts):
            return
        if parts[1] in ("Tensor", "TensorBase"):
            self.add("cpp-torch-compute", f"{shown} is a tensor operation: {TORCH_COMPUTE}", offset)
        else:
            self.add("cpp-torch-compute", f"{shown}: {TORCH_COMPUTE}", offset)

    def check_pybind(self, parts: list[str], shown: str, offset: int) -> None:
        deep = len(parts) > 2 and parts[1] in ("module", "module_")
        if parts[1] not in PYBIND_ALLOWED or deep:
            self.add("cpp-python", f"{shown}: {MESSAGES['python']}", offset)

    def check_identifiers(self) -> None:
        code = self.src.code
        for m in IDENTIFIER.finditer(code):
            word, start = m.group(0), m.start()
            before = code[max(0, start - 3):start].rstrip()
            member = before.endswith((".", "->"))
            category = CPP_FORBIDDEN_WORDS.get(word) or next(
                (c for p, c in CPP_FORBIDDEN_PREFIXES.items() if word.startswith(p)), None)
            if category and not self.strict and word in RELAXED_CPP_ALLOWED:
                continue
            if category:
                self.add(f"cpp-{category}", f"{word}: {MESSAGES[category]}", start)
            elif word in CPP_FORBIDDEN_CALLS and not member and self.used_as_function(start, m.end()):
                category = CPP_FORBIDDEN_CALLS[word]
                self.add(f"cpp-{category}", f"{word}(): {MESSAGES[category]}", start)
            elif self.std_used and word in STD_WORDS_FORBIDDEN and not member and not before.endswith("::"):
                category = std_category(word)
                self.add(f"cpp-{category}", f"{word} (std::{word}): {MESSAGES[category]}", start)
            elif self.aten_used and word in ATEN_THREADS and word not in self.declared and not member \
                    and not before.endswith("::"):
                self.add("cpp-threads-process", f"{word} (at::{word}): {MESSAGES['threads-process']}", start)
            elif self.strict and word.startswith(tuple(LIBRARY_PREFIXES)) and not member:
                library = next(n for p, n in LIBRARY_PREFIXES.items() if word.startswith(p))
                self.add("cpp-library", f"{word}: {library} is not allowed; {ONLY_LIBRARIES}", start)

    def used_as_function(self, start: int, end: int) -> bool:
        """Called (`system(`), or its address taken (`&system`, `&::system`)."""
        after = self.src.code[end:end + 40].lstrip()
        before = re.sub(r"[\s:]+$", "", self.src.code[max(0, start - 8):start])
        return after.startswith("(") or before.endswith("&") and not before.endswith("&&")

    def check_member_calls(self) -> None:
        forbidden = cpp_tensor_methods_forbidden()
        for m in MEMBER_CALL.finditer(self.src.code):
            name = m.group(1)
            if name == "index" and self.src.code[m.end():].lstrip().startswith(")"):
                continue  # Device::index(), variant::index(): no tensor indexing without arguments
            if name in CPP_MEMBERS_FORBIDDEN:
                self.add("cpp-python", f".{name}(...): {MESSAGES['python']}", m.start())
            elif self.strict and name in forbidden:
                self.add("cpp-torch-compute", f".{name}(...) is a tensor operation: {TORCH_COMPUTE}", m.start())

    def check_asm(self) -> None:
        """Asm labels are refused whatever they name; asm statements have their templates read."""
        for use in asm_uses(self.src.code, self.src.literals):
            if use.kind == "label":
                named = f" ({printable(use.texts[0])})" if use.texts else ""
                self.add("cpp-asm-label", f"an asm label{named} binds a declaration to whatever symbol it names, past "
                         f"every name check: {ASM_LABEL_ADVICE}", use.offset)
            elif use.kind == "too-many":
                self.add("cpp-asm", "more inline assembly than the checks read (over 500 asm keywords in one file): "
                         "keep assembly to the few instructions that need it", use.offset)
            elif use.kind == "bare":
                self.add("cpp-asm", "write inline assembly as a whole statement, asm volatile(\"template\" : outputs "
                         ": inputs : clobbers), not through a macro standing for the keyword", use.offset)
            elif not use.texts:
                self.add("cpp-asm", "an asm template must be string literals written in the statement (no macro, no "
                         "computed string), so that the checks read what the assembler does", use.offset)
            else:
                problems = dict.fromkeys(p for text in use.texts for p in template_problems(text))
                for rule, message in problems:
                    self.add(rule, message + (f": {MESSAGES['files']}" if rule == "cpp-files" else ""), use.offset)
        for m in SYMBOL_ATTRIBUTE.finditer(self.src.code):
            self.add("cpp-asm-label", f"the {m.group(0)} attribute binds a declaration to another symbol, as an asm "
                     f"label does: {ASM_LABEL_ADVICE}", m.start())

    def check_blas(self) -> None:
        """`sgemm_` and friends are exported by libtorch's BLAS: a GEMM without cuBLAS or a kernel."""
        for m in BLAS_SYMBOL.finditer(self.src.code):
            name = m.group(0).split("(")[0].strip()
            own_kernel = name in self.declared and not name.endswith("_") and not name.startswith(("cblas_", "LAPACKE_"))
            if own_kernel:  # e.g. a kernel of its own named `sgemm`; `sgemm_` is the Fortran BLAS symbol
                continue
            self.add("cpp-library", f"{m.group(0).rstrip('(').strip()} is a CPU BLAS/LAPACK routine; only cuBLAS "
                     "(GEMM) and cuDNN (convolutions) are allowed besides your own kernels", m.start())

    def check_unqualified_aten(self) -> None:
        """`matmul(a, b)` with tensors finds at::matmul by argument-dependent lookup."""
        code = self.src.code
        for m in IDENTIFIER.finditer(code):
            word = m.group(0)
            if word not in ATEN_COMPUTE_NAMES or word in self.declared:
                continue
            before = code[max(0, m.start() - 3):m.start()].rstrip()
            if before.endswith((".", "->", "::")) or not code[m.end():m.end() + 40].lstrip().startswith("("):
                continue
            self.add("cpp-torch-compute", f"{word}(...) with tensor arguments is at::{word} (found by "
                     f"argument-dependent lookup): {TORCH_COMPUTE}", m.start())


def macro_aliases(code: str) -> dict[str, list[str]]:
    """`#define NS at`: an object-like macro standing for a namespace is an alias of it."""
    aliases = {}
    for m in DIRECTIVE.finditer(code):
        if m.group(1) != "define":
            continue
        d = re.fullmatch(r"\s*(\w+)\s+((?:::\s*)?\w+(?:\s*::\s*\w+)*)\s*(?:::)?\s*", m.group(2))
        if d and normalize(d.group(2))[0] in ATEN_ROOTS | PYBIND_ROOTS | {"std"}:
            aliases[d.group(1)] = normalize(d.group(2))
    return aliases


def normalize(name: str) -> list[str]:
    """`:: at :: matmul` -> ["at", "matmul"]."""
    return [p for p in re.sub(r"\s+|~", "", name).split("::") if p]


def aten_allowed(parts: list[str]) -> bool:
    """at::/torch::/c10:: names the strict policy allows: types, allocation, metadata, constants."""
    if len(parts) < 2:
        return True
    second = parts[1]
    if re.fullmatch(r"k[A-Z0-9]\w*", second) or second in ("ScalarType", "Layout", "MemoryFormat", "DeviceType",
                                                           "indexing"):
        return True
    if second == "cuda":
        return len(parts) == 2 or parts[2] in ATEN_CUDA_ALLOWED
    if second in ("Tensor", "TensorBase") and len(parts) > 2:
        return parts[2] not in cpp_tensor_methods_forbidden()
    return second in ATEN_ALLOWED


def printable(text: str) -> str:
    """A decoded literal for a message: escapes for what would not print, bounded."""
    return text.strip().encode("unicode_escape").decode("ascii")[:60]


def std_category(word: str) -> str:
    if word in ("exit", "quick_exit", "_Exit", "abort", "terminate", "atexit", "signal", "raise"):
        return "exit"
    if word in ("getenv", "filesystem", "ofstream", "ifstream", "fstream", "fopen"):
        return "files"
    return "threads-process"
