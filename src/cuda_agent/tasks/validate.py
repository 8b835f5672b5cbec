"""Validation without execution: a task's source is parsed, never run, when it is loaded."""

from __future__ import annotations

import ast

from cuda_agent.tasks.task import TaskError

REQUIRED_FUNCTIONS = ("get_inputs", "get_init_inputs")


def validate_source(code: str, where: str) -> ast.Module:
    """Parse `code` and check it defines `Model`, `get_inputs` and `get_init_inputs` at top level.

    Raises TaskError naming `where` (a file or a dataset row) and what is missing.
    """
    if not code.strip():
        raise TaskError(where, "the file is empty; a task defines class Model, get_inputs() and get_init_inputs()")
    try:
        tree = ast.parse(code, filename=where)
    except SyntaxError as e:
        line = f" line {e.lineno}" if e.lineno else ""
        raise TaskError(where, f"syntax error at{line}: {e.msg}") from None
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    functions = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    missing = []
    if "Model" not in classes:
        missing.append("class Model")
    missing += [f"{f}()" for f in REQUIRED_FUNCTIONS if f not in functions]
    if missing:
        raise TaskError(where, f"missing {', '.join(missing)} at top level; a KernelBench task defines "
                               "class Model(nn.Module), get_inputs() and get_init_inputs()")
    model = classes["Model"]
    if not any(isinstance(n, ast.FunctionDef) and n.name == "forward" for n in model.body):
        raise TaskError(where, f"class Model (line {model.lineno}) has no forward() method")
    return tree
