"""The live view rendered to text at a terminal's width: nothing cut, nothing wider than the terminal."""

from __future__ import annotations

import io

from rich.console import Console

from cuda_agent.agent.progress import LiveProgress

BEST = "reward 3 (faster_than_compile; 3.00x vs eager, 1.50x vs torch.compile)"
ACTION = "model: no answer within 600 s (timeout_s); retry 1 of 6 in 2 s"
NAMES = ["19_ReLU", "23_Conv3d_GroupNorm_Mean", "1_Square_matrix_multiplication_"]


def text(progress: LiveProgress, width: int) -> str:
    console = Console(width=width, file=io.StringIO(), record=True, force_terminal=False)
    console.print(progress.render())
    return console.export_text()


def many() -> LiveProgress:
    p = LiveProgress(NAMES)
    p.update("19_ReLU", status="running", turn=12, action=ACTION, best=BEST, tokens=123_456, elapsed=75)
    p.update("23_Conv3d_GroupNorm_Mean", status="no_tool_call", turn=4, action="finished",
             best="nothing verified yet", tokens=1_234_567, elapsed=3675)
    return p


def test_many_tasks_at_80_columns_keep_every_value_whole():
    shown = text(many(), 80)
    lines = shown.splitlines()
    assert max(map(len, lines)) <= 80
    assert "…" not in shown and "..." not in shown
    head = next(line for line in lines if line.startswith("task"))
    assert head.split() == ["task", "status", "turn", "time", "tokens"]
    row = next(line for line in lines if line.startswith("19_ReLU"))
    assert row.split() == ["19_ReLU", "running", "12", "1:15", "123,456"]
    assert next(line for line in lines if line.startswith("23_Conv3d")).split() == [
        "23_Conv3d_GroupNorm_Mean", "no_tool_call", "4", "1:01:15", "1,234,567"]
    assert next(line for line in lines if line.startswith("1_Square")).split()[1:3] == ["waiting", "0"]
    flat = " ".join(shown.split())   # the wrapped parts, read as one text
    assert f"best {BEST}" in flat and f"last {ACTION}" in flat
    assert lines[-1] == "1/3 finished"


def test_a_waiting_task_shows_no_verdict_line():
    lines = text(many(), 80).splitlines()
    after = lines[next(i for i, line in enumerate(lines) if line.startswith("1_Square")) + 1]
    assert after == "1/3 finished"


def test_a_narrow_terminal_folds_names_and_moves_tokens_to_the_footer():
    shown = text(many(), 44)
    lines = shown.splitlines()
    assert max(map(len, lines)) <= 44
    assert next(line for line in lines if line.startswith("task")).split() == ["task", "status", "turn", "time"]
    i = next(i for i, line in enumerate(lines) if line.startswith("23_Conv3d"))
    assert lines[i].split()[0] + lines[i + 1].strip() == "23_Conv3d_GroupNorm_Mean", "the folded name is all there"
    assert lines[i].split()[1:] == ["no_tool_call", "4", "1:01:15"]
    assert lines[-1] == "1/3 finished, 1,358,023 tokens"


def test_one_task_is_a_panel_whose_long_values_wrap_inside_80_columns():
    p = LiveProgress(["scale_bias_relu"])
    p.update("scale_bias_relu", status="running", turn=3, action=ACTION + "; " + ACTION, best=BEST, tokens=99,
             elapsed=5)
    shown = text(p, 80)
    assert max(map(len, shown.splitlines())) <= 80
    assert "finished" not in shown and "waiting" not in shown
    inside = " ".join(line.strip("│ ").strip() for line in shown.splitlines())
    assert " ".join(f"last action {ACTION}; {ACTION}".split()) in " ".join(inside.split())


def test_updates_from_a_name_not_listed_add_a_row_and_the_view_counts_it():
    p = LiveProgress(["a", "b"])
    p.update("a", status="done")
    p.update("c", status="error", action="could not start")
    assert text(p, 80).splitlines()[-1] == "2/3 finished"
