"""Normalized-AST similarity: how close a task's source is to a KernelBench task, and whether two
tasks are the same program.

Normalization: docstrings dropped, every local name (classes, functions, arguments, variables,
`self.` attributes) renamed by order of first appearance, every constant replaced by its type; what
is left is the structure and the torch API names (`nn.Conv2d`, `torch.relu`). Similarity is the
Jaccard index of the token 4-gram sets (symmetric, cheap against a few hundred references).
"""

from __future__ import annotations

import ast
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

NGRAM = 4
_API_ROOTS = {"torch", "nn", "F", "math", "self", "super"}


class _Normalizer(ast.NodeTransformer):
    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def _rename(self, name: str) -> str:
        if name in _API_ROOTS:
            return name
        return self.names.setdefault(name, f"v{len(self.names)}")

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return ast.copy_location(ast.Name(self._rename(node.id), node.ctx), node)

    def visit_arg(self, node: ast.arg) -> ast.AST:
        return ast.arg(self._rename(node.arg))

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.value, ast.Name) and node.value.id == "self":
            node.attr = self._rename(node.attr)
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        return ast.copy_location(ast.Constant(type(node.value).__name__), node)

    def _strip_doc(self, node):
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node = self._strip_doc(node)
        node.name = node.name if node.name in ("forward", "__init__", "get_inputs", "get_init_inputs") \
            else self._rename(node.name)
        node.returns = None
        for a in node.args.args:
            a.annotation = None
        self.generic_visit(node)
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        node = self._strip_doc(node)
        self.generic_visit(node)
        return node


def tokens(code: str) -> list[str]:
    """The normalized token sequence of a source (node types, API names, renamed locals)."""
    tree = _Normalizer().visit(ast.parse(code))
    tree.body = [n for n in tree.body if not isinstance(n, (ast.Import, ast.ImportFrom))
                 and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    out = []
    for node in ast.walk(tree):
        out.append(type(node).__name__)
        for attr in ("id", "attr", "arg", "name"):
            v = getattr(node, attr, None)
            if isinstance(v, str):
                out.append(v)
        if isinstance(node, ast.Constant):
            out.append(str(node.value))
    return out


def shingles(code: str) -> frozenset[tuple[str, ...]]:
    t = tokens(code)
    return frozenset(tuple(t[i:i + NGRAM]) for i in range(max(1, len(t) - NGRAM + 1)))


def fingerprint(code: str) -> str:
    """Equal for two sources that differ only in names, sizes, docstrings and formatting."""
    return hashlib.sha256("\x00".join(tokens(code)).encode()).hexdigest()[:16]


def jaccard(a: frozenset, b: frozenset) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


@dataclass(frozen=True)
class Nearest:
    name: str
    score: float


class ReferenceIndex:
    """Shingle sets of reference tasks (KernelBench), searched for the nearest to a candidate."""

    def __init__(self, refs: list[tuple[str, str]]):
        self.refs = []
        for name, code in refs:
            try:
                self.refs.append((name, shingles(code)))
            except SyntaxError:
                continue

    @classmethod
    def from_jsonl(cls, path: str | Path) -> "ReferenceIndex":
        """A KernelBench dump as JSONL (columns name, code, optionally level)."""
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"{path}: no KernelBench JSONL there; pass --kernelbench PATH "
                                    "(a JSONL with name and code columns)")
        refs = []
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                level = f"L{row['level']}/" if row.get("level") is not None else ""
                refs.append((f"{level}{row['name']}", row["code"]))
        return cls(refs)

    def nearest(self, code: str) -> Nearest:
        s = shingles(code)
        best = Nearest("", 0.0)
        for name, ref in self.refs:
            score = jaccard(s, ref)
            if score > best.score:
                best = Nearest(name, score)
        return Nearest(best.name, round(best.score, 4))
