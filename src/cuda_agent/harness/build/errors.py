"""Short, readable compiler errors from a long build log: the first few errors, each with file:line
and the source lines around it, instead of the thousands of lines a template error can produce."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

# g++: `kernels/relu.cpp:12:5: error: msg`; nvcc's front end: `kernels/relu.cu(12): error: msg`.
GCC_ERROR = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?:\d+:)? (?:fatal )?error: (?P<msg>.*)$")
NVCC_ERROR = re.compile(r"^(?P<file>[^\s(][^(]*)\((?P<line>\d+)\): (?:catastrophic )?error(?: #[\w-]+)?: "
                        r"(?P<msg>.*)$")
# g++ names the solution's line that instantiated a template whose error lies in a library header.
REQUIRED_FROM = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?:\d+:)?\s+required from")
LINK_ERROR = re.compile(r"undefined reference to|cannot find -l|multiple definition of|undefined symbol")
TOOL_ERROR = re.compile(r"^(?:nvcc fatal|ptxas (?:fatal|error)|\S*(?:c\+\+|g\+\+|gcc|cc1plus): (?:fatal )?error"
                        r"|ninja: error|\S*ld: (?:error|fatal))")
MAX_MESSAGE = 300


@dataclass(frozen=True)
class CompilerError:
    file: str        # relative to the bundle when the file is one of its sources; "" for link errors
    line: int
    message: str
    origin: tuple[str, int] | None = None  # the bundle's line that led to an error in a library header

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}" if self.file else "link"


def summarize_errors(log: str, sources: dict[str, str], log_path: str, *, max_errors: int = 5,
                     max_chars: int = 3000, renames: dict[str, str] | None = None) -> str:
    """The first `max_errors` errors of `log` with two lines of context from `sources` around each,
    at most `max_chars` long, ending with the number of errors and where the full log is.

    `renames` replaces text in the log first (scratch paths, object names) so that the reader sees
    the bundle's own names."""
    lines = [rename_line(line, renames or {}) for line in log.splitlines()]
    errors = parse_errors(lines, set(sources))
    count = f"{len(errors)} error{'s' if len(errors) != 1 else ''} in total; " if errors else ""
    footer = f"{count}full log: {log_path}"
    blocks = [format_error(e, sources) for e in dedupe(errors)[:max_errors]] or [log_tail(lines)]
    return fit(blocks, footer, max_chars)


def rename_line(line: str, renames: dict[str, str]) -> str:
    for old, new in renames.items():
        line = line.replace(old, new)
    return line


def parse_errors(lines: list[str], bundle: set[str]) -> list[CompilerError]:
    """Every compile, link or tool error line, in the order the log shows them."""
    errors: list[CompilerError] = []
    origin = None
    for line in lines:
        m = GCC_ERROR.match(line) or NVCC_ERROR.match(line)
        required = REQUIRED_FROM.match(line)
        if required and normalize(required["file"]) in bundle:
            origin = (normalize(required["file"]), int(required["line"]))
        elif m:
            file = normalize(m["file"])
            errors.append(CompilerError(file, int(m["line"]), m["msg"].strip(), None if file in bundle else origin))
            origin = None
        elif LINK_ERROR.search(line) or TOOL_ERROR.match(line):
            errors.append(CompilerError("", 0, line.strip()))
    return errors


def normalize(path: str) -> str:
    """`kernels/../binding_registry.h` -> `binding_registry.h`; absolute paths are kept."""
    return os.path.normpath(path) if not os.path.isabs(path) else path


def dedupe(errors: list[CompilerError]) -> list[CompilerError]:
    seen: set[CompilerError] = set()
    return [e for e in errors if not (e in seen or seen.add(e))]


def format_error(error: CompilerError, sources: dict[str, str]) -> str:
    message = error.message if len(error.message) <= MAX_MESSAGE else error.message[:MAX_MESSAGE] + " [...]"
    head = f"{error.location}: error: {message}" if error.file else message
    file, line = (error.file, error.line) if error.origin is None else error.origin
    if error.origin is not None:
        head += f"\n  required from {file}:{line}"
    text = sources.get(file)
    if text is None or line <= 0:
        return head
    return head + "\n" + context(text, line)


def context(text: str, line: int, around: int = 2) -> str:
    """Lines line-around .. line+around of `text`, numbered, the erroneous one marked with `>`."""
    src = text.splitlines()
    first, last = max(1, line - around), min(len(src), line + around)
    width = len(str(last))
    return "\n".join(f"{'>' if n == line else ' '} {n:>{width}} | {src[n - 1][:160]}" for n in range(first, last + 1))


def log_tail(lines: list[str], count: int = 15) -> str:
    """When no error line is recognised: the last lines of the log, without ninja's long commands."""
    kept = [line for line in lines if line.strip() and not line.startswith("[") and len(line) < 400]
    return "\n".join(kept[-count:]) or "the build failed without output"


def fit(blocks: list[str], footer: str, max_chars: int) -> str:
    out: list[str] = []
    budget = max_chars - len(footer) - 1
    for block in blocks:
        if len(block) + 2 > budget:
            if not out:
                out.append(block[: max(budget - 6, 0)] + " [...]")
            break
        out.append(block)
        budget -= len(block) + 2
    return "\n\n".join(out) + "\n" + footer
