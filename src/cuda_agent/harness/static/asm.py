"""Inline assembly in C++/CUDA sources: labels told from statements, templates read for escapes.

`asm` does two unrelated things. After a declarator it is a label, `Tensor f(...) asm("_ZN2at...")`:
the declaration is bound to whatever symbol the string names, past every name check, so a label is
refused whatever it names. At the start of a statement it is inline assembly, `asm volatile(
"ld.global.nc.f32 %0, [%1];" : "=f"(v) : "l"(p))`: common in fast kernels, allowed with its operands,
constraints and clobbers, and its template (the joined, decoded literals before the first `:`) is
read for what leaves the function's own computation:
- system calls and software interrupts (syscall, sysenter, int, svc);
- calls, returns and jumps other than to a label of the template itself (call, jmp *%rax, bl);
- assembler directives beyond register declarations and alignment (.set, .byte, .incbin, .globl);
- any name that is not an operand, a register, or a register or label the template declares:
  a symbol (`lea system(%rip), %0` hands C++ a pointer no check has seen).
The template is read the same way in every file: host x86/AArch64 and device PTX cannot be told
apart reliably from the text (a header's `__device__` function is host code where a .cpp includes
it), and these rules are written so that PTX passes them: its registers are %-prefixed or declared
by `.reg` in the template, and it branches with `bra` to its own labels. What this costs honest
PTX: `call` and `ret` (rare in inline PTX), and naming a global variable in a template (pass its
address as an operand instead).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cuda_agent.harness.static.literals import Literal, literal_variants

ASM_KEYWORD = re.compile(r"(?<![\w$])(?:asm|__asm__|__asm)(?![\w$])")
QUALIFIERS = re.compile(r"(?:\s*\b(?:volatile|__volatile__|__volatile|inline|__inline__|__inline|goto)\b)*\s*\(")
TEMPLATE_END = re.compile(r"\s*[:)]")   # literals alone make the template: no macro among them
ALONE = re.compile(r"\s*\)")            # a template without operands: what a label looks like
SYMBOL = re.compile(r"\s*[A-Za-z_.$][\w.$@]*\s*")   # what a library's symbol can be named
DEFINE_HEAD = re.compile(r"[ \t]*#[ \t]*define[ \t]+\w+(?:\([^)]*\))?")
CONTROL = {"if", "while", "for", "switch"}
LOOKBACK = 4_000    # characters scanned back for a matching parenthesis: bounded for hostile input
MAX_USES = 500      # asm keywords read per file; more is refused as one finding (bounded time)

# What a template may contain, statement by statement.
SYSTEM = {"syscall", "sysenter", "sysexit", "sysret", "int", "int1", "int3", "icebp", "into", "svc", "hvc", "smc"}
LEAVES = {"call", "callq", "calll", "callw", "lcall", "ret", "retq", "retl", "lret", "iret", "iretq",
          "bl", "blr", "blx", "br", "blraa", "blrab", "braa", "brab", "retaa", "retab", "eret"}
JUMPS = re.compile(r"j[a-z]{1,5}|ljmp|loop[a-z]{0,2}|b|b\.[a-z]{2}|cbn?z|tbn?z|xbegin", re.I)
# PTX declarations and hints, x86 alignment and syntax. Not .local: to the GNU assembler it changes a
# symbol's binding. Names are taken as declared from .reg only (PTX's; the GNU assembler has no .reg).
DIRECTIVES_ALLOWED = {".reg", ".shared", ".param", ".pragma", ".p2align", ".align", ".balign", ".intel_syntax",
                      ".att_syntax"}
ALIGNMENT = {".p2align", ".align", ".balign"}   # without a fill value: padding bytes run as code (0x0f, 0x05)
PREFIXES = re.compile(r"(?:(?:lock|rep|repe|repz|repne|repnz|notrack|bnd|data16|data32|addr16|addr32|rex\w*|"
                      r"\{\w+\})\s+)+", re.I)
LABEL = re.compile(r"([\w.$%=]+):(?!:)")
GUARD = re.compile(r"@!?%{0,2}\w+\s+")   # a PTX guard: @p, @!p, @%%px
MNEMONIC = re.compile(r"[.\w:]+")
OPERAND_REFS = re.compile(r"[\w.$]*%=|%\w*\[\w+\]|%%?[\w.]+")   # name%= (unique labels), %[x], %l[x], %0, %%rax
# Comments of PTX and of the GNU assembler (/* */ anywhere; // where x86 reads it as one, at a line's
# start, and elsewhere an error). Not x86's `#`: names after it are read, as PTX would see them. Kept
# where the template has quotes, which hide a comment's start from the assembler (`movq $"//", %0`).
COMMENTS = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
NUMBERS = re.compile(r"(?<![\w.])\d\w*")
NAME = re.compile(r"(?<![\w.%])[A-Za-z_]\w*")
REGISTERS = re.compile(
    r"[re]?(?:ax|bx|cx|dx|si|di|sp|bp|ip)|[abcd][lh]|(?:si|di|sp|bp)l|r(?:[89]|1[0-5]|1[6-9]|2\d|3[01])[dwb]?"
    r"|[xyz]?mm\d{1,2}|tmm[0-7]|k[0-7]|st|[cdefgs]s|cr\d{1,2}|dr[0-7]"          # x86
    r"|[xwvqdshbz]\d{1,2}|p\d{1,2}|w?sp|[xw]zr|lr|fp|pc|nzcv|fpcr|fpsr"         # AArch64
    r"|lsl|lsr|asr|ror|[us]xt[bhwx]|eq|ne|cs|hs|cc|lo|mi|pl|vs|vc|hi|ls|ge|lt|gt|le|al|nv", re.I)
KEYWORDS = {"ptr", "byte", "word", "dword", "qword", "tbyte", "oword", "xword", "fword", "xmmword", "ymmword",
            "zmmword", "offset", "short", "near", "far", "z", "sae", "rn", "rd", "ru", "rz", "_", "warp_sz"}


@dataclass(frozen=True)
class AsmUse:
    """One `asm` keyword: `kind` is "label", "statement", "bare" (not followed by its parenthesis), or
    "too-many" (the first keyword past MAX_USES, where reading stopped); `texts` the label or
    template, joined and decoded, once for each choice of #if branches among its literals (none
    where it is not written as literals)."""

    offset: int
    kind: str
    texts: tuple[str, ...] = ()


def asm_uses(code: str, literals: dict[int, Literal]) -> list[AsmUse]:
    """Every asm keyword of `code` (comments and literal contents blanked), classified."""
    plain = blank_directives(code)
    uses = []
    for m in ASM_KEYWORD.finditer(code):
        if len(uses) == MAX_USES:
            uses.append(AsmUse(m.start(), "too-many"))
            break
        q = QUALIFIERS.match(code, m.end())
        if not q:
            uses.append(AsmUse(m.start(), "bare"))
            continue
        run = literal_variants(code, q.end(), literals)
        texts = tuple(run[0]) if run and TEMPLATE_END.match(code, run[1]) else ()
        uses.append(AsmUse(m.start(), classify(code, plain, m.start(), q.group(0), texts, run), texts))
    return uses


def classify(code: str, plain: str, offset: int, qualifiers: str, texts: tuple[str, ...],
             run: tuple[list[str], int] | None) -> str:
    """A statement where one may begin; elsewhere (after a declarator, a macro's name, a macro
    invocation that ends a statement itself) a label, unless it cannot be one: labels take no
    qualifiers and no operands, and name a symbol (`asm volatile("bar.sync 0;")` is a statement
    wherever it stands; `#define L asm("system")` is a label where L follows a declarator)."""
    if starts_statement(code, plain, offset):
        return "statement"
    if not texts:
        return "label"
    label_shaped = qualifiers.strip() == "(" and run is not None and ALONE.match(code, run[1]) is not None \
        and any(SYMBOL.fullmatch(t) for t in texts)
    return "label" if label_shaped else "statement"


def blank_directives(code: str) -> str:
    """Preprocessor lines to spaces: what precedes a statement is read past `#if`/`#endif`."""
    return re.sub(r"(?m)^[ \t]*#.*$", lambda m: " " * len(m.group(0)), code)


def starts_statement(code: str, plain: str, offset: int) -> bool:
    """Whether a statement begins at `offset` (after `;`, `{`, `}`, a label, `else`, `do`, an
    `if (...)`-like head), as far as the code before it tells; not at a macro body's start, nor
    after `]]` (an attribute may end a declarator too)."""
    line_start = code.rfind("\n", 0, offset) + 1
    head = DEFINE_HEAD.match(code, line_start)
    in_directive = code[line_start:offset].lstrip().startswith("#")
    view = code if in_directive else plain
    j = offset - 1
    while j >= 0 and view[j].isspace():
        j -= 1
    if in_directive and head and j < head.end():
        return False   # the macro may stand anywhere
    if j < 0 or view[j] in ";{}":
        return True
    if view[j] == ":":
        return j == 0 or view[j - 1] != ":"
    if view[j] == ")":
        opener = matching_open(view, j)
        return opener is not None and word_before(view, opener) in CONTROL | {"constexpr"}
    return word_before(view, j + 1) in ("else", "do")


def matching_open(code: str, close: int) -> int | None:
    depth = 0
    for k in range(close, max(-1, close - LOOKBACK), -1):
        depth += {")": 1, "(": -1}.get(code[k], 0)
        if depth == 0:
            return k
    return None


def word_before(code: str, end: int) -> str:
    m = re.search(r"(\w+)\s*$", code[max(0, end - 64):end])
    return m.group(1) if m else ""


def template_problems(template: str) -> list[tuple[str, str]]:
    """(rule, message) for each thing in an asm template that leaves the function's own computation."""
    text = template if re.search("[\"']", template) else COMMENTS.sub(" ", template)
    statements = [s.strip() for s in re.split(r"[;\n\r]", text)]
    declared, labels = declared_names(statements)
    problems: list[tuple[str, str]] = []
    for statement in statements:
        mnemonic, operands = split_statement(statement)
        lower = mnemonic.lower()
        if not mnemonic:
            pass   # nothing the checks know how to read: its names are still read below
        elif lower.startswith("."):
            if lower not in DIRECTIVES_ALLOWED or lower in ALIGNMENT and "," in operands:
                problems.append(("cpp-asm", f"the assembler directive {mnemonic} is not allowed in inline assembly "
                                 "(it can emit raw bytes, define or alias symbols, or pull in files): write "
                                 "instructions, with .reg declarations and alignment only"))
            continue
        base = lower.split(".")[0]
        if base in SYSTEM:
            problems.append(("cpp-files", f"`{mnemonic}` in inline assembly is a system call or software interrupt"))
        elif base in LEAVES:
            problems.append(("cpp-asm", f"`{mnemonic}` in inline assembly leaves your code for other code: call "
                             "functions from C++, where the checks can read their names"))
        elif JUMPS.fullmatch(lower) and not local_target(operands, labels):
            problems.append(("cpp-asm", f"`{statement[:60]}` jumps out of the assembly: jump only to labels the "
                             "template defines (1f, 2b, name%=)"))
        elif operands.lstrip().startswith("="):
            problems.append(("cpp-asm", f"`{statement[:60]}` assigns an assembler symbol: write instructions only"))
        elif '"' in statement:   # a quoted symbol name may spell any name ("\163..." , read as is today)
            problems.append(("cpp-asm", f"`{statement[:60]}` quotes a name in inline assembly: pass addresses and "
                             "values as operands"))
        for name in symbols(operands, declared | labels):
            problems.append(("cpp-asm", f"inline assembly names `{name}`, which is not an operand, a register or a "
                             "name the template declares: a symbol reached from assembly is past every check; pass "
                             "addresses and values as operands (and declare PTX registers with .reg)"))
    return problems


def split_statement(statement: str) -> tuple[str, str]:
    """(mnemonic or directive, operands) of one template statement, past scope braces, labels,
    PTX guards (@p) and x86 prefixes (lock, rep)."""
    s = statement.strip().lstrip("{}").strip()
    while (m := LABEL.match(s)) is not None:
        s = s[m.end():].lstrip().lstrip("{}").strip()
    s = GUARD.sub("", s, count=1) if s.startswith("@") else s
    p = PREFIXES.match(s)
    s = s[p.end():] if p else s
    m = MNEMONIC.match(s)
    return (m.group(0), s[m.end():]) if m else ("", s)


def declared_names(statements: list[str]) -> tuple[set[str], set[str]]:
    """Names the template declares itself: PTX registers and variables (.reg .pred p, r<4>),
    and labels (done:, loop%=:)."""
    declared: set[str] = set()
    labels: set[str] = set()
    for statement in statements:
        s = statement.strip().lstrip("{}").strip()
        while (m := LABEL.match(s)) is not None:
            labels.add(m.group(1))
            s = s[m.end():].lstrip().lstrip("{}").strip()
        mnemonic, operands = split_statement(s)
        if mnemonic.lower() == ".reg":
            for name in NAME.finditer(operands):
                declared.add(name.group(0))
                if operands[name.end():name.end() + 1] == "<":   # r<4>: r0 ... r3
                    declared.add(name.group(0) + "<")
    return declared, labels


def local_target(operands: str, labels: set[str]) -> bool:
    """A jump's target is the template's own: 1f/2b, a label it defines, or an asm goto label (%l0)."""
    target = operands.strip().split(",")[-1].strip()
    return bool(re.fullmatch(r"\d+[bf]", target) or target in labels or re.fullmatch(r"%l(?:\d+|\[\w+\])", target))


def symbols(operands: str, known: set[str]) -> list[str]:
    """Names in operands that are no operand reference, number, register or declared name."""
    rest = NUMBERS.sub(" ", OPERAND_REFS.sub(" ", operands))
    return [n for n in dict.fromkeys(m.group(0) for m in NAME.finditer(rest))
            if n not in known and re.sub(r"\d+$", "<", n) not in known and n.lower() not in KEYWORDS
            and not REGISTERS.fullmatch(n)]
