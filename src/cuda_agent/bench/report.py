"""The benchmark report: report.md, and report.html that opens without a network (figures as
embedded PNGs whose task points name themselves on hover, an inline table sorter, no external
assets). Both lead with the verdict of each task and the harness's whole reason for it."""

from __future__ import annotations

import base64
import html
import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cuda_agent.bench import metrics, plots, tables
from cuda_agent.bench.tables import Table

Row = dict[str, Any]
LEFT = ("task", "verdict", "reason")   # text columns, aligned left

CONVENTIONS = [
    "Speed-up = baseline time / solution time, medians of timed runs with the L2 cache flushed between runs.",
    "Pass = compiles and is verified correct. Rates are shares of all tasks; a task without a solution is a failure.",
    "Geometric means count a failed task as 1.0x (as if the reference were kept); the bracketed variant is over "
    "correct tasks only.",
    "fast_p (KernelBench): share of all tasks that are correct and more than p times faster than the baseline.",
    "Speed of light (SOL): max(matrix FLOPs / measured TF32 matmul peak + other FLOPs / measured FP32 FMA peak, "
    "(inputs + parameters + outputs bytes) / measured copy bandwidth). FLOPs from torch's flop counter.",
]


@dataclass
class Report:
    """What a report is made of, so a test can check the numbers without parsing HTML. `tables` in
    reading order: verdicts, summary, fast_p, rewards, speed of light, times per task."""

    summaries: list[metrics.Summary]
    tables: list[Table]
    figures: dict[str, bytes] = field(default_factory=dict)              # PNG by name
    points: dict[str, list[plots.Point]] = field(default_factory=dict)   # each figure's named task points


def build(rows: list[Row], with_figures: bool = True) -> Report:
    summaries = metrics.by_level(rows)
    tabs = [tables.verdict_table(rows), tables.summary_table(summaries), tables.fast_p_table(summaries),
            tables.rewards_table(summaries), tables.sol_table(summaries, rows), tables.timing_table(rows)]
    drawn = {name: draw(rows) for name, draw in plots.FIGURES.items()} if with_figures and rows else {}
    return Report(summaries, tabs, {n: f.png for n, f in drawn.items()}, {n: f.points for n, f in drawn.items()})


# ---- Markdown ---------------------------------------------------------------------------------

def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table_markdown(t: Table) -> str:
    lines = [f"## {t.title}", ""]
    if t.note:
        lines += [t.note, ""]
    lines.append("| " + " | ".join(t.headers) + " |")
    lines.append("|" + "|".join("---" if i == 0 or h in LEFT else "--:" for i, h in enumerate(t.headers)) + "|")
    lines += ["| " + " | ".join(_md_cell(c.text) for c in row) + " |" for row in t.rows]
    return "\n".join(lines) + "\n"


def render_markdown(rep: Report, meta: dict[str, str]) -> str:
    head = ["# KernelBench report", ""] + [f"- **{k}**: {v}" for k, v in meta.items()] + [""]
    conv = ["## Conventions", ""] + [f"- {c}" for c in CONVENTIONS] + [""]
    figs = [f"Figures ({', '.join(rep.figures)}) are in report.html.", ""] if rep.figures else []
    verdicts, summary, *others, times = [table_markdown(t) for t in rep.tables]
    return "\n".join(head + [verdicts, summary] + conv + others + figs + [times])


# ---- HTML -------------------------------------------------------------------------------------

_CSS = """
body{font-family:-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:24px auto;max-width:1400px;
 padding:0 16px;color:#222;font-size:14px}
h1{font-size:24px;margin-bottom:4px} h2{font-size:18px;margin:28px 0 6px;border-bottom:1px solid #ddd;padding-bottom:4px}
.meta{color:#555;margin:0 0 12px} .meta span{margin-right:18px}
.note{color:#666;font-size:12.5px;margin:4px 0 8px}
table{border-collapse:collapse;font-variant-numeric:tabular-nums}
th,td{padding:4px 10px;border-bottom:1px solid #e6e6e6;text-align:right;white-space:nowrap}
th{background:#f4f5f7;font-weight:600;position:sticky;top:0}
td:first-child,th:first-child,th.left{text-align:left}
table.sortable td,table.sortable th{font-size:12.5px;padding:3px 7px}
tr.overall td{font-weight:600;border-top:2px solid #999}
table.summary td,table.summary th{font-size:15px;padding:6px 12px}
table.sortable th{cursor:pointer;user-select:none} table.sortable th:hover{background:#e8eaee}
table.sortable th.asc:after{content:" \\25B2";font-size:10px} table.sortable th.desc:after{content:" \\25BC";font-size:10px}
td.task{text-align:left;white-space:normal;min-width:190px;max-width:300px;overflow-wrap:break-word}
td.verdict{text-align:left}
td.reason{text-align:left;white-space:normal;min-width:240px;max-width:520px;overflow-wrap:anywhere;color:#444}
td.reason summary{cursor:pointer} details[open] .head{display:none}
.verdicts .scroll{max-height:480px}
.plot{position:relative;display:inline-block;max-width:100%;line-height:0}
.plot svg{position:absolute;left:1px;top:1px;width:calc(100% - 2px);height:calc(100% - 2px)}
.plot circle{fill:transparent;pointer-events:all} .plot circle:hover{stroke:#111;stroke-width:1.5}
td.good{color:#1a7f37} td.bad{color:#b42318}
.grid{display:flex;flex-wrap:wrap;gap:8px 24px} figure{margin:8px 0} figure img{max-width:100%;border:1px solid #eee}
figcaption{color:#555;font-size:12.5px} details.conventions{margin:8px 0} ul.conv{color:#444;font-size:13px;margin:4px 0}
.scroll{overflow-x:auto;max-height:900px;overflow-y:auto;border:1px solid #eee}
"""

REASON_SHOWN = 90   # characters of a long reason shown before it is opened

_SORTER = """
document.querySelectorAll("table.sortable").forEach(function (table) {
  table.querySelectorAll("th").forEach(function (th, col) {
    th.addEventListener("click", function () {
      var asc = !th.classList.contains("asc");
      table.querySelectorAll("th").forEach(function (h) { h.classList.remove("asc", "desc"); });
      th.classList.add(asc ? "asc" : "desc");
      var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
      function key(r) { var v = r.cells[col].getAttribute("data-v"); return v === null ? r.cells[col].textContent : v; }
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        if (x === "" && y !== "") return 1; if (y === "" && x !== "") return -1;
        var nx = parseFloat(x), ny = parseFloat(y), c;
        c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : String(x).localeCompare(String(y));
        return asc ? c : -c;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
"""


def _td(cell: tables.Cell, header: str) -> str:
    attrs = ""
    if cell.sort is not None:
        attrs += f' data-v="{html.escape(str(cell.sort))}"'
    elif cell.text == "–":
        attrs += ' data-v=""'
    if cell.title:
        attrs += f' title="{html.escape(cell.title)}"'
    cls = {"task": "task", "reason": "reason", "verdict": "verdict"}.get(header, "")
    if header == "verdict":
        cls += " good" if cell.text.startswith("faster") else " bad" if cell.text.startswith("failed") else ""
    if header.startswith("vs ") and isinstance(cell.sort, (int, float)):
        cls = "good" if cell.sort >= 1 + metrics.MARGIN else "bad" if cell.sort < 1 else ""
    if cls:
        attrs += f' class="{cls}"'
    text = html.escape(cell.text)
    if header == "task":   # let long names wrap at their underscores, not mid-word
        text = text.replace("_", "_<wbr>")
    if header == "reason" and len(cell.text) > REASON_SHOWN:   # the start shown, all of it a click away
        head = cell.text[:REASON_SHOWN].rsplit(" ", 1)[0]
        text = f'<details><summary><span class="head">{html.escape(head)} …</span></summary>{text}</details>'
    return f"<td{attrs}>{text}</td>"


def table_html(t: Table, css_class: str = "") -> str:
    classes = " ".join(c for c in (css_class, "sortable" if t.sortable else "") if c)
    head = "".join(f"<th{' class=left' if h in LEFT else ''}>{html.escape(h)}</th>" for h in t.headers)
    body = []
    for row in t.rows:
        tr = ' class="overall"' if row[0].text == "overall" else ""
        body.append(f"<tr{tr}>" + "".join(_td(c, h) for c, h in zip(row, t.headers)) + "</tr>")
    table = (f'<table class="{classes}"{f" id={chr(34)}{t.id}{chr(34)}" if t.id else ""}><thead><tr>{head}</tr>'
             f'</thead><tbody>{"".join(body)}</tbody></table>')
    if t.sortable:
        table = f'<div class="scroll">{table}</div>'
    note = f'<p class="note">{html.escape(t.note)}</p>' if t.note else ""
    return f"<h2>{html.escape(t.title)}</h2>{note}{table}"


def _figure(name: str, png: bytes, points: list[plots.Point]) -> str:
    """The PNG, and over it a transparent SVG of the same size whose circles name the task points
    (a tooltip on hover); the SVG scales with the image, so the circles stay on their points."""
    data = base64.b64encode(png).decode()
    width, height = struct.unpack(">II", png[16:24])   # the PNG header's IHDR
    marks = "".join(f'<circle cx="{p.x:g}" cy="{p.y:g}" r="5"><title>{html.escape(p.label)}</title></circle>'
                    for p in points)
    overlay = (f'<svg viewBox="0 0 {width} {height}" preserveAspectRatio="none" role="group" '
               f'aria-label="{html.escape(name)}: task points">{marks}</svg>') if points else ""
    caption = html.escape(name) + ("; a point names its task on hover" if points else "")
    return (f'<figure><div class="plot"><img alt="{html.escape(name)}" src="data:image/png;base64,{data}">'
            f'{overlay}</div><figcaption>{caption}</figcaption></figure>')


def render_html(rep: Report, meta: dict[str, str]) -> str:
    meta_html = "".join(f"<span><b>{html.escape(k)}</b>: {html.escape(v)}</span>" for k, v in meta.items())
    verdicts, summary, fastp, rewards, sol, times = rep.tables
    conv = "".join(f"<li>{html.escape(c)}</li>" for c in CONVENTIONS)
    figs = {n: _figure(n, png, rep.points.get(n, [])) for n, png in rep.figures.items()}
    parts = [f"<h1>KernelBench report</h1><p class='meta'>{meta_html}</p>",
             f"<div class='verdicts'>{table_html(verdicts)}</div>", table_html(summary, "summary"),
             f"<details class='conventions'><summary>Conventions</summary><ul class='conv'>{conv}</ul></details>"]
    if figs:
        parts.append("<h2>Speed-ups</h2>" + "".join(figs[n] for n in ("speed-up distribution", "fast_p curve")
                                                   if n in figs))
    parts += [table_html(fastp), table_html(rewards), table_html(sol)]
    parts += [figs[n] for n in ("speed-of-light fractions", "reward distribution") if n in figs]
    parts.append(table_html(times))
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>KernelBench report</title>"
            f"<style>{_CSS}</style></head><body>{''.join(parts)}<script>{_SORTER}</script></body></html>")


def write_report(rows: list[Row], out: str | Path, meta: dict[str, str] | None = None) -> Report:
    """Write report.md, report.html and summary.json into `out` from results rows."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    meta = dict(meta or {})
    meta.setdefault("tasks", str(len(rows)))
    rep = build(rows)
    (out / "report.md").write_text(render_markdown(rep, meta), encoding="utf-8")
    (out / "report.html").write_text(render_html(rep, meta), encoding="utf-8")
    (out / "summary.json").write_text(json.dumps([s.to_dict() for s in rep.summaries], indent=1))
    return rep
