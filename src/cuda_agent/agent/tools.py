"""The agent's tools: the JSON schemas a model reads, and what each does in the workspace.

Every failure a model can cause or fix comes back as an observation starting with "Error:", never
as an exception in the loop.
"""

from __future__ import annotations

import json
import os
import re
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from cuda_agent.agent.config import Limits, Prompts
from cuda_agent.agent.evaluator import Evaluator, format_build
from cuda_agent.agent.solution import SolutionKeeper
from cuda_agent.sandbox import Environment

HARNESS_FOLDERS = ("utils", ".cuda_agent")   # the harness's own: never written by the tools
_SKIP_DIRS = {".git", "build", "__pycache__", ".cache"}
_HARNESS_COMMAND = re.compile(r"^\s*(?:(?:ba)?sh\s+)?(?:\./)?utils/(compile|verify|profile)\.sh\s*;?\s*$")


class ToolError(Exception):
    """A call the tool cannot carry out; the message tells the model what to do instead."""


@dataclass
class Observation:
    text: str                            # what the model reads
    summary: str                         # one line for the progress view
    record: dict[str, Any] | None = None  # harness results, for the trajectory


def _tool(name: str, description: str, properties: dict[str, Any] | None = None,
          required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties or {}, "required": list(required)}}}


def _s(description: str) -> dict[str, str]:
    return {"type": "string", "description": description}


def _i(description: str) -> dict[str, str]:
    return {"type": "integer", "description": description}


SCHEMAS = [
    _tool("bash", "Run a shell command (bash -c) in the workspace root, without network. Output is stdout "
          "and stderr together; long output keeps its head and tail, so redirect it to a file and read the "
          "part you need. Processes the command starts are stopped when it ends. `bash utils/compile.sh` "
          "(verify.sh, profile.sh) is the same as the compile (verify, profile) tool.",
          {"command": _s("the command, e.g. `ls -R kernels` or `nvcc --version`")}, ("command",)),
    _tool("read_file", "Read a text file, with line numbers (`   12<TAB>text`; the numbers are not part of "
          "the file). Long files come in parts: pass start_line and end_line for others. A folder gives its "
          "listing.", {"path": _s("relative to the workspace, e.g. `model.py`"),
                       "start_line": _i("first line to show, from 1"), "end_line": _i("last line to show")},
          ("path",)),
    _tool("write_file", "Create or overwrite a file with `content` (folders are created). model.py, SKILL.md, "
          "binding.cpp, binding_registry.h and utils/ are protected.",
          {"path": _s("relative to the workspace, e.g. `kernels/fused.cu`"), "content": _s("the whole file")},
          ("path", "content")),
    _tool("edit_file", "Replace the one occurrence of `old_str` in a file by `new_str`. `old_str` must match "
          "exactly, whitespace included, and only once: include surrounding lines to make it unique.",
          {"path": _s("relative to the workspace"), "old_str": _s("the exact text to replace"),
           "new_str": _s("the text to put in its place")}, ("path", "old_str", "new_str")),
    _tool("search", "Search the workspace's text files for a Python regular expression; gives file:line: text.",
          {"pattern": _s("a regular expression, e.g. `__global__|extern \"C\"`"),
           "path": _s("a file or folder to search in (default: the whole workspace)")}, ("pattern",)),
    _tool("compile", "Build every file in kernels/ into the module `cuda_extension` (unchanged files come from "
          "a cache). Gives the first compiler errors with file:line."),
    _tool("verify", "Check model_new.py against model.py on fresh inputs, and the rules of SKILL.md. A passed "
          "verify makes this solution a candidate for your result."),
    _tool("profile", "verify, then time eager PyTorch, torch.compile and your ModelNew on the same inputs; "
          "gives the speed-ups and the reward. The best verified solution is kept as your result."),
]


class Tools:
    """The tools bound to one workspace. `execute` never raises for anything a model can do."""

    schemas = SCHEMAS

    def __init__(self, workspace: Path, evaluator: Evaluator, keeper: SolutionKeeper, runner: Environment,
                 limits: Limits, prompts: Prompts, protected: set[str]):
        self.root = Path(workspace).resolve()
        self.evaluator, self.keeper, self.runner = evaluator, keeper, runner
        self.limits, self.prompts, self.protected = limits, prompts, protected
        self._functions: dict[str, Callable[..., Observation]] = {
            "bash": self.bash, "read_file": self.read_file, "write_file": self.write_file,
            "edit_file": self.edit_file, "search": self.search, "compile": self.compile,
            "verify": lambda: self.evaluate("verify"), "profile": lambda: self.evaluate("profile")}

    def execute(self, name: str, arguments: str) -> Observation:
        try:
            if name not in self._functions:
                raise ToolError(f"there is no tool named {name!r}; the tools are {', '.join(self._functions)}")
            obs = self._functions[name](**self._arguments(name, arguments))
        except ToolError as e:
            obs = Observation(f"Error: {e}", f"{name}: error")
        except Exception as e:  # a fault of the tools or the harness, not the model's: say so, go on
            obs = Observation(f"Error: the {name} tool failed inside cuda-agent ({type(e).__name__}: {e}); "
                              "this is not caused by your code; try again or continue with other steps",
                              f"{name}: internal error", {"action": name, "error": traceback.format_exc()})
        obs.text = self._shorten(obs.text)
        return obs

    def _arguments(self, name: str, arguments: str) -> dict[str, Any]:
        params = next(t["function"]["parameters"] for t in SCHEMAS if t["function"]["name"] == name)
        try:
            args = json.loads(arguments) if arguments.strip() else {}
        except ValueError as e:
            raise ToolError(f"the arguments of {name} are not valid JSON ({e}); call it again with a JSON "
                            f"object with the keys {', '.join(params['properties']) or '(none)'}") from None
        if not isinstance(args, dict):
            raise ToolError(f"the arguments of {name} must be a JSON object, not {type(args).__name__}")
        unknown = sorted(set(args) - set(params["properties"]))
        missing = [k for k in params["required"] if k not in args]
        if unknown or missing:
            raise ToolError(f"{name} takes {', '.join(params['properties']) or 'no arguments'}"
                            + (f"; unknown: {', '.join(unknown)}" if unknown else "")
                            + (f"; missing: {', '.join(missing)}" if missing else ""))
        for key, value in args.items():
            want = params["properties"][key]["type"]
            if (want == "string" and not isinstance(value, str)) or \
                    (want == "integer" and (not isinstance(value, int) or isinstance(value, bool))):
                raise ToolError(f"{name}: `{key}` must be {'an integer' if want == 'integer' else 'a string'}, "
                                f"not {json.dumps(value)[:60]}")
        return args

    # --- files -------------------------------------------------------------------------------

    def _path(self, path: str, write: bool = False) -> Path:
        """`path` inside the workspace (symbolic links resolved); writes only outside the protected files."""
        if not path.strip():
            raise ToolError("the path is empty; give one relative to the workspace root, e.g. `model_new.py`")
        resolved = (self.root / path).resolve()
        if resolved != self.root and self.root not in resolved.parents:
            raise ToolError(f"{path}: outside the workspace; paths are relative to the workspace root")
        rel = resolved.relative_to(self.root).as_posix()
        if write and (rel in self.protected or rel.split("/")[0] in HARNESS_FOLDERS or resolved == self.root):
            raise ToolError(f"{rel} is protected: the harness checks it against its recorded hash; write your "
                            "code in kernels/ and model_new.py")
        return resolved

    def read_file(self, path: str, start_line: int | None = None, end_line: int | None = None) -> Observation:
        p = self._path(path)
        if p.is_dir():
            entries = sorted(e.name + ("/" if e.is_dir() else "") for e in p.iterdir())
            return Observation("\n".join(entries) or "(empty folder)", f"read_file {path}/")
        if not p.is_file():
            raise ToolError(f"{path}: no such file; `bash ls -R` lists the workspace")
        lines = p.read_text(errors="replace").splitlines()
        if not lines:
            return Observation("(empty file)", f"read_file {path}")
        start = max(start_line or 1, 1)
        end = min(end_line or start + self.limits.max_read_lines - 1, len(lines))
        if start > len(lines) or end < start:
            raise ToolError(f"{path} has {len(lines)} lines; lines {start}-{end_line} do not exist")
        text = "\n".join(f"{i:>6}\t{line}" for i, line in enumerate(lines[start - 1:end], start))
        if start > 1 or end < len(lines):
            text += f"\n[lines {start}-{end} of {len(lines)}; pass start_line and end_line for others]"
        return Observation(text, f"read_file {path}")

    def write_file(self, path: str, content: str) -> Observation:
        p = self._path(path, write=True)
        if p.is_dir():
            raise ToolError(f"{path} is a folder")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(content)
        self.runner.adopt(p)
        return Observation(f"wrote {path} ({content.count(chr(10)) + 1} lines)", f"write_file {path}")

    def edit_file(self, path: str, old_str: str, new_str: str) -> Observation:
        p = self._path(path, write=True)
        if not p.is_file():
            raise ToolError(f"{path}: no such file; create it with write_file")
        text = p.read_text()
        if not old_str:
            raise ToolError("old_str is empty; give the exact text to replace")
        count = text.count(old_str)
        if count == 0:
            raise ToolError(f"old_str was not found in {path}; read the file and copy the text exactly, "
                            "whitespace and indentation included (without the line numbers)")
        if count > 1:
            lines = [text[:m.start()].count("\n") + 1 for m in re.finditer(re.escape(old_str), text)]
            raise ToolError(f"old_str occurs {count} times in {path} (at lines {', '.join(map(str, lines))}); "
                            "include surrounding lines so that it occurs once")
        at = text.index(old_str)
        p.write_text(text[:at] + new_str + text[at + len(old_str):])
        first = text[:at].count("\n") + 1
        return Observation(f"edited {path}: lines {first}-{first + new_str.count(chr(10))} now hold new_str",
                           f"edit_file {path}")

    def search(self, pattern: str, path: str = ".") -> Observation:
        try:
            rx = re.compile(pattern)
        except re.error as e:
            raise ToolError(f"invalid regular expression {pattern!r}: {e}") from None
        base = self._path(path)
        hits: list[str] = []
        for f in [base] if base.is_file() else _walk(base):
            if f.is_symlink() or f.stat().st_size > 2_000_000:
                continue
            data = f.read_bytes()
            if b"\0" in data[:4096]:
                continue
            rel = f.relative_to(self.root).as_posix()
            for i, line in enumerate(data.decode(errors="replace").splitlines(), 1):
                if rx.search(line):
                    hits.append(f"{rel}:{i}: {line.strip()[:200]}")
                    if len(hits) == self.limits.max_search_matches:
                        hits.append(f"[the first {len(hits)} matches; narrow the pattern or the path]")
                        return Observation("\n".join(hits), f"search {pattern!r}")
        return Observation("\n".join(hits) or f"no match for {pattern!r} in {path}", f"search {pattern!r}")

    # --- commands and the harness ----------------------------------------------------------------

    def bash(self, command: str) -> Observation:
        harness = _HARNESS_COMMAND.match(command)
        if harness:  # the workspace's own commands go to the harness, so their results count
            return self.compile() if harness[1] == "compile" else self.evaluate(harness[1])
        r = self.runner.run(command, timeout=self.limits.bash_timeout_s, max_chars=self.limits.max_output_chars)
        text = r.text(self.prompts.truncated) or "(no output)"
        if r.timed_out:
            status = (f"[timed out after {self.limits.bash_timeout_s:g} s: the command and everything it "
                      "started were stopped]")
        else:
            status = f"[exit code {r.exit_code}]"
        return Observation(f"{text.rstrip()}\n{status}", f"bash {command.strip().splitlines()[0][:60]}")

    def compile(self) -> Observation:
        r = self.evaluator.compile()
        return Observation(format_build(r), f"compile: {'ok' if r.ok else 'failed'}",
                           {"action": "compile", "build": asdict(r)})

    def evaluate(self, action: str) -> Observation:
        staged = self.keeper.stage()
        result = self.evaluator.evaluate(profile=action == "profile", keep=staged)
        improved = self.keeper.offer(result, staged, action)
        note = "new best verified solution, kept" if improved else "best verified solution"
        text = f"{result.render(action)}\n{note}: {self.keeper.summary()}"
        return Observation(text, f"{action}: {result.milestone}, reward {result.reward:g}",
                           {"action": action, "result": result.to_dict(), "reward": result.reward,
                            "improved": improved})

    def _shorten(self, text: str) -> str:
        # bash output is already cut to max_output_chars; the slack keeps its status line whole
        keep = self.limits.max_output_chars
        if len(text) <= keep + 200:
            return text
        omitted = len(text) - keep
        return text[:keep // 2] + self.prompts.truncated.format(omitted=omitted) + text[-(keep // 2):]


def _walk(base: Path) -> list[Path]:
    files = []
    for d, dirs, names in os.walk(base):
        dirs[:] = sorted(x for x in dirs if x not in _SKIP_DIRS)
        files += [Path(d) / n for n in sorted(names)]
    return files
