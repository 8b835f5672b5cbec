"""A C/C++/CUDA source in the shape the compiler sees it (cpp.py scans it): line continuations
spliced, comments and the contents of string and character literals blanked (offsets and line
numbers kept), digraphs spelled out, the string literals kept aside decoded (literals.py); and the
names a source declares (for the ADL scan)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from cuda_agent.harness.static.literals import Literal, decode, prefix_before

DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(\w+)(.*)$", re.M)
DECLARATION = re.compile(r"(?<![\w.:])([A-Za-z_][\w:]*)(?:\s*<[^;(){}]{0,200}?>)?[\s*&]+([A-Za-z_]\w*)\s*[=({;\[]")
TYPE_DECLARATION = re.compile(r"\b(?:struct|class|union|enum)\s+([A-Za-z_]\w*)")
NOT_TYPES = {"return", "else", "case", "new", "delete", "throw", "co_return", "co_await", "co_yield", "sizeof",
             "goto", "do", "typedef", "using", "namespace", "operator", "const_cast", "static_cast"}
RAW_OPEN = re.compile(r'"([^()\\\s]{0,16})\(')


@dataclass
class CppSource:
    """A source as the compiler sees it: spliced `text`, and `code` with comments and literal
    contents blanked; both the same length, `line[i]` the original line of offset i."""

    text: str
    code: str
    line: list[int]
    literals: dict[int, Literal] = field(default_factory=dict)  # string literals by start, decoded


def prepare(source: str) -> CppSource:
    """Splice continuations, blank comments and literal contents, spell digraphs out."""
    chars: list[str] = []
    lines: list[int] = []
    line, i = 1, 0
    while i < len(source):
        c = source[i]
        if c == "\\":
            j = i + 1
            while j < len(source) and source[j] in " \t\r":
                j += 1
            if j < len(source) and source[j] == "\n":
                i, line = j + 1, line + 1
                continue
        chars.append(c)
        lines.append(line)
        line += c == "\n"
        i += 1
    text = "".join(chars)
    code, literals = blank(text)
    code = code.replace("%:%:", "##  ").replace("%:", "# ")
    return CppSource(text, code, lines, literals)


def blank(text: str) -> tuple[str, dict[int, Literal]]:
    """Comments to spaces; string and character literals keep their quotes, contents to spaces.
    Also returns the string literals, decoded as the compiler reads them, by start offset."""
    out = list(text)
    literals: dict[int, Literal] = {}
    i, n = 0, len(text)

    def clear(a: int, b: int) -> None:
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            clear(i, end)
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            clear(i, end)
            i = end
        elif c == '"' and prefix_before(text, i).endswith("R"):
            m = RAW_OPEN.match(text, i)
            if not m:
                i += 1
                continue
            close = text.find(")" + m.group(1) + '"', m.end())
            close = n - 1 if close < 0 else close + len(m.group(1)) + 1
            start = i - len(prefix_before(text, i))
            literals[start] = Literal(start, close + 1, text[m.end():close - len(m.group(1)) - 1])
            clear(i + 1, close)
            i = close + 1
        elif c in "\"'":
            if c == "'" and is_digit_separator(text, i):
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            if c == '"':
                prefix = prefix_before(text, i)
                literals[i - len(prefix)] = Literal(i - len(prefix), min(j, n - 1) + 1,
                                                    decode(text[i + 1:min(j, n)], narrow=prefix in ("", "u8")))
            clear(i + 1, min(j, n))
            i = j + 1
        else:
            i += 1
    return "".join(out), literals


def is_digit_separator(text: str, i: int) -> bool:
    """The ' in 1'000'000 (C++14), not a character literal."""
    m = re.search(r"[\w.']+$", text[max(0, i - 64):i])
    return bool(m) and (m.group(0)[0].isdigit() or m.group(0)[0] == ".")


def declared_names(src: CppSource) -> set[str]:
    """Names the source declares: functions, variables, types and macros (for the ADL scan)."""
    names = {m.group(2) for m in DECLARATION.finditer(src.code) if m.group(1).split("::")[-1] not in NOT_TYPES}
    names |= {m.group(1) for m in TYPE_DECLARATION.finditer(src.code)}
    names |= {m.group(2).split()[0].split("(")[0] for m in DIRECTIVE.finditer(src.code)
              if m.group(1) == "define" and m.group(2).split()}
    return names
