"""report.html read as a browser would read its structure (html.parser, no browser needed): the
verdict of each task comes first, a long reason is whole one click away, the figures' task points
name their tasks and sit on the marks drawn for them, and a set without levels gets one summary row.
test_report_render.py checks the rendered page in Chromium where one is installed."""

from __future__ import annotations

import base64
import io
from html.parser import HTMLParser

import pytest

from cuda_agent.bench import metrics, tables
from cuda_agent.bench.report import REASON_SHOWN, write_report

from .synthetic import row, synthetic_rows

LONG = ("rule broken: model_new.py:9: torch.tanh is PyTorch computation, which the strict policy forbids in "
        "forward: write it as a CUDA kernel and call it through the extension; model_new.py may only allocate "
        "(torch.empty, torch.empty_like, ...), read shapes, take views and call the extension [torch-compute]")


class Page(HTMLParser):
    """What the page holds, in document order: headings, tables (id, headers, rows of cells) and
    figures (alt, PNG, the overlay's viewBox and circles). A cell keeps its whole text, the text of its
    <summary> (None without one), and whether it holds a <details>."""

    def __init__(self, text: str):
        super().__init__()
        self.order: list[tuple[str, str]] = []    # ("h1" | "h2" | "table" | "figure", text or id or alt)
        self.tables: dict[str, dict] = {}
        self.figures: list[dict] = []
        self._text: list[str] | None = None
        self._table = self._cell = self._circle = None
        self._in_summary = False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("h1", "h2", "th", "title"):
            self._text = []
        elif tag == "table":
            self._table = {"id": a.get("id", ""), "headers": [], "rows": []}
            self.tables[self._table["id"] or f"table {len(self.tables) + 1}"] = self._table
            self.order.append(("table", self._table["id"]))
        elif tag == "tr" and self._table is not None and self._table["headers"]:
            self._table["rows"].append([])
        elif tag == "td" and self._table is not None:
            self._cell = {"text": "", "summary": None, "details": False}
            self._table["rows"][-1].append(self._cell)
        elif tag == "details" and self._cell is not None:
            self._cell["details"] = True
        elif tag == "summary" and self._cell is not None:
            self._cell["summary"], self._in_summary = "", True
        elif tag == "img":
            png = base64.b64decode(a["src"].removeprefix("data:image/png;base64,"))
            self.figures.append({"alt": a["alt"], "png": png, "viewbox": None, "circles": []})
            self.order.append(("figure", a["alt"]))
        elif tag == "svg":
            self.figures[-1]["viewbox"] = [float(v) for v in a["viewbox"].split()]
        elif tag == "circle":
            self._circle = {"x": float(a["cx"]), "y": float(a["cy"])}
            self.figures[-1]["circles"].append(self._circle)

    def handle_endtag(self, tag):
        text = "".join(self._text or [])
        if tag in ("h1", "h2"):
            self.order.append((tag, text))
        elif tag == "th" and self._table is not None:
            self._table["headers"].append(text)
        elif tag == "title" and self._circle is not None:
            self._circle["label"], self._circle = text, None
        elif tag == "summary":
            self._in_summary = False
        elif tag == "td":
            self._cell = None
        elif tag == "table":
            self._table = None
        if tag in ("h1", "h2", "th", "title"):
            self._text = None

    def handle_data(self, data):
        if self._text is not None:
            self._text.append(data)
        if self._cell is not None:
            self._cell["text"] += data
            if self._in_summary:
                self._cell["summary"] += data


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    rows = synthetic_rows(per_level=10)
    failed = next(r for r in rows if not r["correct"])
    failed.update(reason=LONG, stage="static")
    out = tmp_path_factory.mktemp("report")
    rep = write_report(rows, out, {"device": "synthetic"})
    return rows, rep, Page((out / "report.html").read_text(encoding="utf-8")), out


def test_the_page_leads_with_each_tasks_verdict(report):
    rows, _, page, _ = report
    assert page.order[0] == ("h1", "KernelBench report")
    assert page.order[1:3] == [("h2", "Verdicts"), ("table", "tasks")], "the verdicts come before anything else"
    verdicts = page.tables["tasks"]
    assert verdicts["headers"] == ["level", "id", "task", "verdict", "reward", "vs eager", "vs compile", "reason"]
    assert len(verdicts["rows"]) == len(rows)
    by_name = {r["task"]: r for r in rows}
    for cells in verdicts["rows"]:
        r = by_name[cells[2]["text"].replace("\u200b", "")]
        assert cells[3]["text"] == tables.verdict(r) and cells[4]["text"] == f"{r['reward']:g}"
        assert cells[5]["text"] == tables.times(metrics.speedup(r, "eager"))
    assert {tables.verdict(r) for r in rows} >= {"faster than compile", "failed: static", "failed: correctness"}
    headings = [text for kind, text in page.order if kind == "h2"]
    assert headings.index("Summary") == 1 and headings[-1] == "Times per task"


def test_a_long_reason_is_whole_one_click_away(report):
    rows, _, page, out = report
    cells = {c[2]["text"]: c[7] for c in page.tables["tasks"]["rows"]}
    long = [c for c in cells.values() if c["details"]]
    assert len(long) == 1
    cell = long[0]
    shown = cell["summary"]
    assert shown.endswith(" …") and len(shown) <= REASON_SHOWN + 2 and LONG.startswith(shown[:-2])
    assert cell["text"] == shown + LONG, "the whole reason is in the cell, after its summary"
    short = [c for c in cells.values() if not c["details"]]
    assert short and all(c["summary"] is None and c["text"] in ("verified", "output mismatch: max abs error 0.5")
                         for c in short)
    assert f"| {LONG} |" in (out / "report.md").read_text(), "Markdown keeps the whole reason too"


def test_plot_points_name_their_tasks_and_sit_on_their_marks(report):
    from PIL import Image

    rows, rep, page, _ = report
    figures = {f["alt"]: f for f in page.figures}
    assert set(figures) == set(rep.figures)
    speedups = figures["speed-up distribution"]
    expected = {f"{r['task']}: {metrics.speedup(r, b):.2f}x vs {name}" for r in rows if r["correct"]
                for b, name in (("eager", "eager"), ("compile", "torch.compile"))}
    assert [c["label"] for c in speedups["circles"]] and {c["label"] for c in speedups["circles"]} == expected
    sol = figures["speed-of-light fractions"]
    assert {c["label"].split(":")[0] for c in sol["circles"]} == {r["task"] for r in rows}
    assert figures["fast_p curve"]["circles"] == [] and figures["fast_p curve"]["viewbox"] is None
    for f in (speedups, sol):
        img = Image.open(io.BytesIO(f["png"])).convert("L")
        assert f["viewbox"] == [0, 0, *img.size], "the overlay has the PNG's pixel size, so circles scale with it"

        def background(dx: float, dy: float) -> float:
            """Share of circles whose centre, moved by (dx, dy), falls on white."""
            px = [img.getpixel((min(max(int(c["x"] + dx), 0), img.width - 1),
                                min(max(int(c["y"] + dy), 0), img.height - 1))) for c in f["circles"]]
            return sum(p > 235 for p in px) / len(px)

        assert background(0, 0) == 0, f"{f['alt']}: a circle's centre is not on a drawn mark"
        assert background(0, 30) > 0.5, f"{f['alt']}: the check cannot tell a mark from the background"


@pytest.mark.parametrize("levels, groups", [((None, None), ["overall"]), ((1, 1), ["overall"]),
                                            ((1, None), ["level 1", "no level", "overall"])])
def test_one_group_of_tasks_gets_one_summary_row(tmp_path, levels, groups):
    rows = [row(f"T{i}", 1, i, True, 1.5, 1.2) for i in range(4)]
    for r, level in zip(rows, levels * 2):
        r["level"] = level
    rep = write_report(rows, tmp_path, {"device": "synthetic"})
    assert [s.group for s in rep.summaries] == groups
    page = Page((tmp_path / "report.html").read_text(encoding="utf-8"))
    summary = next(t for t in page.tables.values() if t["headers"][:2] == ["group", "tasks"])
    assert [cells[0]["text"] for cells in summary["rows"]] == groups
    md = (tmp_path / "report.md").read_text()
    assert ("| no level |" in md) == ("no level" in groups)
