"""String literals read as the compiler reads them: a name spelled with escapes, split across adjacent
literals or written raw is the same name to every check that reads strings (asm labels, templates)."""

from __future__ import annotations

import pytest

from cuda_agent.harness.static.cpp_text import prepare
from cuda_agent.harness.static.literals import decode, literal_run, literal_variants


@pytest.mark.parametrize("body, value", [
    (r"\x50yRun", "PyRun"),
    (r"\120yRun", "PyRun"),
    (r"\u0050yRun", "PyRun"),
    (r"\U00000050yRun", "PyRun"),
    (r"\x{50}y\o{122}un", "PyRun"),              # C++23 delimited escapes
    (r"\N{LATIN CAPITAL LETTER P}yRun", "PyRun"),
    (r"sys\x74\x65m\n\t\\\"", "system\n\t\\\""),
    (r"sy\x173\x63\x61ll", "syscall"),                # narrow: GCC keeps the low byte of an escape's value
    (r"sy\x00000000073\x63\x61ll", "syscall"),
    (r"sy\563call", "syscall"),
    (r"\0", "\0"),
    (r"\q", "q"),                                 # unknown escape: GCC keeps the letter
])
def test_escapes_spelling_a_name_decode_as_the_compiler_reads_them(body, value):
    assert decode(body) == value


@pytest.mark.parametrize("source", [
    'x("Py" "Run");',
    'x("P"\n  /* between */ "y" u8"R" L"un");',
    'x(R"d(PyRun)d");',
    'x(u8R"(Py)" "\\x52un");',
])
def test_adjacent_prefixed_and_raw_literals_join_into_one_name(source):
    src = prepare(source)
    run = literal_run(src.code, src.code.index("(") + 1, src.literals)
    assert run is not None and run[0] == "PyRun"
    assert src.code[run[1]] == ")"


def test_raw_string_keeps_its_backslashes():
    src = prepare('x(R"(a\\x50)");')
    assert literal_run(src.code, 2, src.literals)[0] == "a\\x50"


def test_wide_literals_keep_escape_values_whole():
    assert decode(r"\x150", narrow=False) == "\u0150"


def test_hostile_escapes_decode_without_error():
    assert decode("\\x" + "f" * 100_000) == "\xff"
    assert decode("\\u{110000}\\N{NO SUCH NAME}\\x{zz}") == "\ufffd" * 3
    assert decode("\\") == "\\"


def test_literals_split_by_if_branches_give_one_value_per_branch():
    src = prepare('x("a"\n#if A\n "b"\n#elif B\n "c"\n#endif\n "d");')
    values, end = literal_variants(src.code, 2, src.literals)
    assert sorted(values) == ["abd", "acd", "ad"] and src.code[end:].lstrip().startswith(")")


def test_literal_branches_past_the_limit_are_not_read():
    source = 'x(' + '"a"\n#if A\n"b"\n#else\n"c"\n#endif\n' * 7 + ');'   # 2**7 choices
    src = prepare(source)
    assert literal_variants(src.code, 2, src.literals) is None
