"""The report: numbers that match the per-task results, a page that needs no network, and (with
headless Chromium) a rendered page that shows the summary and the figures."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from cuda_agent.bench import metrics
from cuda_agent.bench.report import write_report

from .synthetic import synthetic_rows

CHROMIUM = "/usr/bin/chromium"
META = {"device": "synthetic", "source": "synthetic rows"}


def _overall_md_row(md: str, table: str) -> list[str]:
    section = md.split(f"## {table}", 1)[1]
    line = next(l for l in section.splitlines() if l.startswith("| overall |"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_markdown_numbers_match_the_results(tmp_path):
    rows = synthetic_rows(per_level=12, seed=3)
    write_report(rows, tmp_path, META)
    md = (tmp_path / "report.md").read_text()
    cells = _overall_md_row(md, "Summary")
    passed = sum(r["correct"] for r in rows)
    assert cells[1] == str(len(rows))
    assert cells[2] == f"{passed / len(rows):.1%} ({passed})"
    faster = sum(1 for r in rows if r["correct"] and r["speedup_vs_compile"] >= 1.05) / len(rows)
    assert cells[6] == f"{faster:.1%}"
    gm = metrics.geomean([r["speedup_vs_eager"] if r["correct"] else 1.0 for r in rows])
    assert cells[7].startswith(f"{gm:.2f}x")
    fast = _overall_md_row(md, "fast_p")
    assert fast[3] == f"{sum(1 for r in rows if r['correct'] and r['speedup_vs_eager'] > 1.5) / len(rows):.1%}"
    for r in rows:   # every task has its line
        assert f"| {r['task']} |" in md


def test_html_is_self_contained_and_sortable(tmp_path):
    rep = write_report(synthetic_rows(per_level=8), tmp_path, META)
    page = (tmp_path / "report.html").read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page), "the page must not fetch anything"
    assert page.count("data:image/png;base64,") == len(rep.figures) == 4
    assert 'class="sortable"' in page and "addEventListener" in page
    assert page.count("<tr") >= 24 + 4


def test_report_of_failures_only_still_renders(tmp_path):
    from .synthetic import row

    rows = [row("A", 1, 1, False, sol_ms=None), row("B", 2, 2, False, sol_ms=None)]
    rep = write_report(rows, tmp_path, META)
    assert rep.summaries[-1].pass_rate == 0.0 and rep.summaries[-1].geomean_eager == 1.0
    assert (tmp_path / "report.html").stat().st_size > 0


def screenshot(html: Path, png: Path, tmp: Path, height: int = 2000) -> None:
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={tmp / 'chromium-profile'}", f"--screenshot={png}",
                    f"--window-size=1400,{height}", html.resolve().as_uri()],
                   check=True, capture_output=True, timeout=120)


@pytest.mark.slow
def test_rendered_page_shows_summary_and_figures(tmp_path):
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} not found: install it (apt-get install -y chromium) to check the rendered report")
    from PIL import Image

    write_report(synthetic_rows(per_level=30), tmp_path, META)
    png = tmp_path / "report.png"
    screenshot(tmp_path / "report.html", png, tmp_path, height=4200)
    keep = os.environ.get("CUDA_AGENT_SCREENSHOT_DIR")
    if keep:
        shutil.copy(png, Path(keep) / "report.png")
    img = Image.open(png).convert("RGB")
    assert img.size == (1400, 4200)
    assert _ink(img.crop((0, 0, 1400, 400))) > 0.005          # title and summary table at the top
    figures = img.crop((0, 800, 1400, 2600))                  # the plots: many colours, not a blank area
    assert len(figures.getcolors(maxcolors=1 << 20) or []) > 200
    assert _saturated(figures) > 0.002


def _ink(img) -> float:
    """Share of dark pixels (text, lines)."""
    hist = img.convert("L").histogram()
    return sum(hist[:160]) / sum(hist)


def _saturated(img) -> float:
    """Share of clearly coloured pixels (plot markers and bars)."""
    hist = img.convert("HSV").split()[1].histogram()
    return sum(hist[80:]) / sum(hist)
