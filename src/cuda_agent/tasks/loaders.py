"""Loaders: a .py file, a folder of them, a KernelBench checkout, a JSONL or Parquet dataset.

Every loader parses and validates; none runs a task. Loaders of many tasks keep the good ones and
report each bad one (file or row, and what is wrong) in `TaskSet.errors`.
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from cuda_agent.tasks.task import Task, TaskError
from cuda_agent.tasks.validate import validate_source

EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples"
_ID_PREFIX = re.compile(r"^(\d+)_")
_LEVEL_DIR = re.compile(r"^level(\d+)$")
_DATASET_COLUMNS = ("name", "code")


@dataclass
class TaskSet:
    tasks: list[Task] = field(default_factory=list)
    errors: list[TaskError] = field(default_factory=list)

    def select(self, level: int | None = None, ids: Iterable[int] | None = None,
               pattern: str | None = None) -> "TaskSet":
        """Tasks of `level`, with a problem id in `ids`, whose name matches `pattern`.

        `pattern` is a shell glob (`*conv*`) or, without wildcards, a case-insensitive substring.
        """
        id_set = set(ids) if ids is not None else None
        kept = [t for t in self.tasks
                if (level is None or t.level == level)
                and (id_set is None or t.problem_id in id_set)
                and (pattern is None or _name_matches(t.name, pattern))]
        return TaskSet(kept, list(self.errors))

    def find(self, ref: str) -> Task:
        """One task by exact name, `L<level>/<id>`, a bare problem id (if unique), or a unique name prefix."""
        exact = [t for t in self.tasks if t.name == ref or t.name.removesuffix(".py") == ref]
        if exact:
            return exact[0]
        m = re.fullmatch(r"[Ll](?:evel)?(\d+)[/:](\d+)", ref)
        if m:
            hits = [t for t in self.tasks if t.level == int(m[1]) and t.problem_id == int(m[2])]
        elif ref.isdigit():
            hits = [t for t in self.tasks if t.problem_id == int(ref)]
        else:
            hits = [t for t in self.tasks if t.name.startswith(ref)]
        if len(hits) == 1:
            return hits[0]
        if not hits:
            raise KeyError(f"no task named {ref!r}; `cuda-agent tasks list SOURCE` shows the names")
        names = ", ".join(f"{t.name} (level {t.level})" for t in hits[:6])
        raise KeyError(f"{ref!r} matches {len(hits)} tasks ({names}); give L<level>/<id> or the full name")


def _name_matches(name: str, pattern: str) -> bool:
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(name.lower(), pattern.lower())
    return pattern.lower() in name.lower()


def _problem_id(name: str) -> int | None:
    m = _ID_PREFIX.match(name)
    return int(m[1]) if m else None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise TaskError(str(path), "not UTF-8 text; a task is a Python source file") from None
    except OSError as e:
        raise TaskError(str(path), f"cannot read the file ({e.strerror or e})") from None


def load_file(path: str | Path, level: int | None = None) -> Task:
    """One task from a `.py` file; raises TaskError if it is unreadable or not a task."""
    path = Path(path)
    if not path.exists():
        raise TaskError(str(path), "no such file")
    if path.suffix != ".py":
        raise TaskError(str(path), "a task file must be a .py file")
    code = _read(path)
    validate_source(code, str(path))
    return Task(name=path.stem, code=code, origin=str(path), level=level, problem_id=_problem_id(path.stem))


def load_folder(path: str | Path, level: int | None = None) -> TaskSet:
    """Every `*.py` task in a folder (not recursive), sorted by problem id then name."""
    out = TaskSet()
    files = sorted(Path(path).glob("*.py"), key=lambda p: (_problem_id(p.stem) or 10**9, p.stem))
    for f in files:
        if f.name == "__init__.py":
            continue
        try:
            out.tasks.append(load_file(f, level=level))
        except TaskError as e:
            out.errors.append(e)
    return out


def load_kernelbench_checkout(path: str | Path) -> TaskSet:
    """A KernelBench checkout: `<root>/KernelBench/levelN/*.py` or `<root>/levelN/*.py`."""
    root = Path(path)
    if (root / "KernelBench").is_dir():
        root = root / "KernelBench"
    out = TaskSet()
    level_dirs = sorted((d for d in root.iterdir() if d.is_dir() and _LEVEL_DIR.match(d.name)),
                        key=lambda d: int(_LEVEL_DIR.match(d.name)[1]))
    for d in level_dirs:
        part = load_folder(d, level=int(_LEVEL_DIR.match(d.name)[1]))
        out.tasks += part.tasks
        out.errors += part.errors
    return out


def _rows_from_jsonl(path: Path) -> Iterable[tuple[str, dict[str, Any] | TaskError]]:
    with path.open(encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{i}"
            try:
                yield where, json.loads(line)
            except json.JSONDecodeError as e:
                yield where, TaskError(where, f"not valid JSON ({e.msg})")


def _rows_from_parquet(path: Path) -> Iterable[tuple[str, dict[str, Any] | TaskError]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise TaskError(str(path), "reading Parquet needs pyarrow: pip install pyarrow (a dependency of cuda-agent: "
                                   "`bash scripts/setup.sh` installs it)") from None
    try:
        table = pq.read_table(path)
    except Exception as e:  # pyarrow's errors name no common base a caller could know
        raise TaskError(str(path), f"not a readable Parquet file ({str(e).splitlines()[0][:160]}); a dataset "
                                   "is Parquet or JSONL with the columns name and code") from None
    for i, row in enumerate(table.to_pylist(), 1):
        yield f"{path}:row {i}", row


def load_dataset(path: str | Path) -> TaskSet:
    """A dataset of tasks as JSONL or Parquet with columns `name`, `code` and optionally `level`,
    `problem_id`; any other column is kept in `Task.metadata`."""
    path = Path(path)
    rows = _rows_from_parquet(path) if path.suffix == ".parquet" else _rows_from_jsonl(path)
    out = TaskSet()
    try:
        for where, row in rows:
            if isinstance(row, TaskError):
                out.errors.append(row)
                continue
            try:
                out.tasks.append(_task_from_row(row, where, str(path)))
            except TaskError as e:
                out.errors.append(e)
    except UnicodeDecodeError as e:
        raise TaskError(str(path), f"not UTF-8 text (byte {e.start}); a dataset is JSONL (one JSON object a "
                                   "line, with the keys name and code) or Parquet") from None
    if not out.tasks and out.errors:
        first = out.errors[0]
        raise TaskError(str(path), f"no task in it: {len(out.errors)} row(s), none a task (the first: "
                                   f"{first.problem}); a dataset holds rows with the keys name and code")
    return out


def _task_from_row(row: dict[str, Any], where: str, origin: str) -> Task:
    missing = [c for c in _DATASET_COLUMNS if not isinstance(row.get(c), str)]
    if missing:
        raise TaskError(where, f"missing or non-text column(s) {', '.join(missing)}")
    name = row["name"]
    where = f"{where} ({name})"
    validate_source(row["code"], where)
    level = row.get("level")
    pid = row.get("problem_id")
    meta = {k: v for k, v in row.items() if k not in ("name", "code", "level", "problem_id")}
    return Task(name=name.removesuffix(".py"), code=row["code"], origin=f"{origin}#{name}",
                level=int(level) if level is not None else None,
                problem_id=int(pid) if pid is not None else _problem_id(name), metadata=meta)


def load_tasks(source: str | Path) -> TaskSet:
    """Any task source: `examples` (the bundled ones), a .py file, a folder, a KernelBench
    checkout, or a .jsonl / .parquet dataset."""
    if str(source) == "examples":
        return load_folder(EXAMPLES_DIR)
    path = Path(source)
    if not path.exists():
        raise TaskError(str(path), "no such file or folder; give a .py task, a folder of tasks, "
                                   "a KernelBench checkout, a .jsonl/.parquet dataset, or `examples`")
    if path.is_file():
        if path.suffix in (".jsonl", ".json", ".parquet"):
            return load_dataset(path)
        return TaskSet([load_file(path)])
    root = path / "KernelBench" if (path / "KernelBench").is_dir() else path
    if any(d.is_dir() and _LEVEL_DIR.match(d.name) for d in root.iterdir()):
        return load_kernelbench_checkout(path)
    return load_folder(path)


def load_task(spec: str | Path, source: str | Path | None = None) -> Task:
    """One task: a .py path, or a reference (name, L<level>/<id>) looked up in `source`."""
    if source is None:
        p = Path(spec)
        if p.suffix == ".py" or p.exists():
            return load_file(p)
        source = "examples"
    return load_tasks(source).find(str(spec))
