"""C/C++ string literals as the compiler reads them: escapes decoded, adjacent literals joined.

A name in a string is what the compiler makes of it, not what is written: `"\\x50yRun"` is `PyRun`,
`"Py" "Run"` is one literal, `R"(...)"` keeps its backslashes. The scans that read names out of
strings (asm labels and templates, _Pragma) read the decoded value.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

# Encoding and raw prefixes of a string literal (u8"", L"", u8R"x()x", ...).
PREFIXES = ("u8", "u", "U", "L", "R", "u8R", "uR", "UR", "LR")
SIMPLE_ESCAPES = {"'": "'", '"': '"', "?": "?", "\\": "\\", "a": "\a", "b": "\b", "f": "\f", "n": "\n",
                  "r": "\r", "t": "\t", "v": "\v", "e": "\x1b", "E": "\x1b"}   # \e, \E: GNU extensions
OCTAL = re.compile(r"[0-7]{1,3}")
HEX = re.compile(r"[0-9A-Fa-f]+")
DELIMITED = re.compile(r"\{([^}\n]{0,64})\}")   # C++23 \x{...}, \o{...}, \u{...}, \N{NAME}
UNIVERSAL = {"u": 4, "U": 8}


@dataclass(frozen=True)
class Literal:
    """One string literal token: `start` at its prefix, `end` after its closing quote."""

    start: int
    end: int
    value: str


def prefix_before(text: str, quote: int) -> str:
    """The literal prefix written right before the quote at `quote` ("" when there is none)."""
    m = re.search(r"\w*$", text[max(0, quote - 32):quote])
    word = m.group(0) if m else ""
    return word if word in PREFIXES else ""


def decode(body: str, narrow: bool = True) -> str:
    """The characters a (non-raw) literal's body stands for. In a narrow literal (no prefix, or u8)
    a numeric escape is one byte: GCC keeps the low 8 bits of "\\x173" ("s"), with a warning."""
    out: list[str] = []
    i, n = 0, len(body)
    while i < n:
        c = body[i]
        if c != "\\" or i + 1 == n:
            out.append(c)
            i += 1
            continue
        value, i = escape(body, i + 1, 0xFF if narrow else 0x10FFFF)
        out.append(value)
    return "".join(out)


def escape(body: str, i: int, mask: int) -> tuple[str, int]:
    """The escape whose letter is at `i` (just after the backslash): its character and where it ends.
    `mask`: what a numeric escape keeps of its value (0xFF in narrow literals)."""
    e = body[i]
    if e in "01234567":
        m = OCTAL.match(body, i)
        return code_point(int(m.group(0), 8) & mask), m.end()
    delimited = DELIMITED.match(body, i + 1) if e in "xouUN" else None
    if delimited:
        inner = delimited.group(1).strip()
        if e == "N":
            try:
                return unicodedata.lookup(inner), delimited.end()
            except KeyError:
                return "\ufffd", delimited.end()
        base = 8 if e == "o" else 16
        try:
            value = int(inner, base)
        except ValueError:
            return "\ufffd", delimited.end()
        return code_point(value if e in "uU" else value & mask), delimited.end()
    if e == "x":
        m = HEX.match(body, i + 1)
        if not m:
            return "x", i + 1
        return code_point(int(m.group(0)[-8:], 16) & mask), m.end()   # the low bits: the last digits
    if e in UNIVERSAL:
        digits = body[i + 1:i + 1 + UNIVERSAL[e]]
        if len(digits) == UNIVERSAL[e] and HEX.fullmatch(digits):
            return code_point(int(digits, 16)), i + 1 + len(digits)
        return e, i + 1
    return SIMPLE_ESCAPES.get(e, e), i + 1   # an unknown escape: GCC warns and keeps the letter


def code_point(value: int) -> str:
    return chr(value) if 0 <= value <= 0x10FFFF else "\ufffd"


def literal_run(code: str, pos: int, literals: dict[int, Literal]) -> tuple[str, int] | None:
    """Adjacent literals from `pos` on (blank space between them, as translation phase 6 joins them):
    their joined value and the offset after the last, or None where no literal starts there.
    `code` is the source with comments blanked; `literals` maps each literal's start to it."""
    parts: list[str] = []
    while True:
        j = pos
        while j < len(code) and code[j].isspace():
            j += 1
        literal = literals.get(j)
        if literal is None:
            break
        parts.append(literal.value)
        pos = literal.end
    return ("".join(parts), pos) if parts else None


# Conditional lines that may stand between adjacent literals (`"a" \n#if X\n "b" \n#endif\n "c"`).
CONDITIONAL = re.compile(r"#[ \t]*(if|ifdef|ifndef|elif|elifdef|elifndef|else|endif)\b[^\n]*")
MAX_VARIANTS = 64


def literal_variants(code: str, pos: int, literals: dict[int, Literal]) -> tuple[list[str], int] | None:
    """As literal_run, where #if/#elif/#else/#endif lines may stand between the literals: the joined
    value under every choice of branches (each may be what the compiler reads), and the offset after
    the last literal or #endif. None where no literal starts there, or past MAX_VARIANTS choices."""
    read = sequence(code, pos, literals)
    if read is None or read[1] == pos:
        return None
    return list(dict.fromkeys(read[0])), read[1]


def sequence(code: str, pos: int, literals: dict[int, Literal]) -> tuple[list[str], int] | None:
    """Literals and whole #if groups from `pos`; stops before anything else (an #else of the group
    around it, too)."""
    variants = [""]
    while True:
        j = skip_space(code, pos)
        literal = literals.get(j)
        if literal is not None:
            variants, pos = [v + literal.value for v in variants], literal.end
            continue
        m = conditional_at(code, j)
        if m is None or m.group(1) not in ("if", "ifdef", "ifndef"):
            return variants, pos
        group = branches(code, m.end(), literals)
        if group is None or len(variants) * len(group[0]) > MAX_VARIANTS:
            return None
        variants, pos = [v + g for v in variants for g in group[0]], group[1]


def branches(code: str, pos: int, literals: dict[int, Literal]) -> tuple[list[str], int] | None:
    """The values of an #if group's branches, from the end of its #if line to after its #endif
    ("" for the branch where no condition holds and there is no #else)."""
    options: list[str] = []
    closed = False
    while True:
        read = sequence(code, pos, literals)
        if read is None:
            return None
        options += read[0]
        m = conditional_at(code, skip_space(code, read[1]))
        if m is None or len(options) > MAX_VARIANTS:
            return None
        pos = m.end()
        if m.group(1) == "endif":
            return list(dict.fromkeys(options + ([] if closed else [""]))), pos
        closed = closed or m.group(1) == "else"


def skip_space(code: str, pos: int) -> int:
    while pos < len(code) and code[pos].isspace():
        pos += 1
    return pos


def conditional_at(code: str, j: int) -> re.Match[str] | None:
    """The conditional directive starting at `j`, where `j` begins its line's text."""
    if code[code.rfind("\n", 0, j) + 1:j].strip():
        return None
    return CONDITIONAL.match(code, j)
