"""The best verified solution, kept the moment it appears: the harness's verdict decides, never
what the model says. `out/solution/` holds the very files the harness judged (its own snapshot,
model_new.py and kernels/ in the workspace layout; never a second copy of the workspace, which a
process the model started could change between the two) and `out/solution.json` its verdict, so a
crash or a budget stop loses nothing."""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cuda_agent.harness import EvalResult, SolutionError, headline, snapshot

def copy_solution(workspace: Path, dest: Path) -> Path:
    """Copy the files the harness evaluates (its own `snapshot`: model_new.py and the sources) to `dest`."""
    try:
        snapshot(workspace, dest)
    except SolutionError:  # nothing to keep; the evaluation itself says what is wrong
        dest.mkdir(parents=True, exist_ok=True)
    return dest


def content_hash(root: Path) -> str:
    """A hash of every file under `root` (a copy made by `copy_solution`)."""
    h = hashlib.sha256()
    for p in sorted(q for q in root.rglob("*") if q.is_file()):
        h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


@dataclass
class Verified:
    """A solution the harness accepted, and its verdict."""

    reward: float
    milestone: str
    speedup_vs_eager: float | None
    speedup_vs_compile: float | None
    action: str          # verify | profile
    evaluation: int      # which evaluation of the run (1, 2, ...)
    content: str         # content_hash of the files
    result: dict[str, Any]

    def key(self) -> tuple[float, float]:
        return self.reward, self.speedup_vs_compile or 0.0


class SolutionKeeper:
    def __init__(self, workspace: Path, out: Path):
        self.workspace = workspace
        self.out = out
        self.dir = out / "solution"
        self.state = out / "solution.json"
        self._staging = out / ".staging"
        self.best: Verified | None = None
        self.evaluations = 0
        self.profiled: set[str] = set()   # contents already profiled: no need to profile them again

    def stage(self) -> Path:
        """An empty folder for the next evaluation, where the harness leaves the files it judges."""
        self.evaluations += 1
        dest = self._staging / str(self.evaluations)
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        return dest

    def current_content(self) -> str:
        """content_hash of the workspace's solution as it is now."""
        dest = copy_solution(self.workspace, self._staging / "current")
        try:
            return content_hash(dest)
        finally:
            shutil.rmtree(dest, ignore_errors=True)

    def offer(self, result: EvalResult, staged: Path, action: str) -> bool:
        """Keep `staged` as the solution if the harness verified it and it beats the best so far."""
        content = content_hash(staged)
        if action == "profile":
            self.profiled.add(content)
        candidate = Verified(result.reward, result.milestone, result.speedup_vs_eager, result.speedup_vs_compile,
                             action, self.evaluations, content, result.to_dict())
        improved = result.correct and (self.best is None or candidate.key() > self.best.key())
        if improved:
            old = self.out / ".solution.old"
            shutil.rmtree(old, ignore_errors=True)
            if self.dir.exists():
                self.dir.rename(old)
            staged.rename(self.dir)
            shutil.rmtree(old, ignore_errors=True)
            self.best = candidate
        else:
            shutil.rmtree(staged, ignore_errors=True)
        self._save()
        return improved

    def summary(self) -> str:
        """One line on the best so far, for the model and the progress view."""
        b = self.best
        if b is None:
            return "nothing verified yet"
        return headline(b.reward, b.milestone, b.speedup_vs_eager, b.speedup_vs_compile)

    def restore(self) -> None:
        """Pick up the state a resumed run left."""
        if not self.state.exists():
            return
        data = json.loads(self.state.read_text())
        self.best = Verified(**data["best"]) if data.get("best") else None
        self.evaluations = data.get("evaluations", 0)
        self.profiled = set(data.get("profiled", []))

    def _save(self) -> None:
        data = {"best": asdict(self.best) if self.best else None, "evaluations": self.evaluations,
                "profiled": sorted(self.profiled)}
        tmp = self.state.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, default=str))
        tmp.replace(self.state)
