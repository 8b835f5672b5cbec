"""The report as a reader sees it: headless Chromium renders report.html built from synthetic rows,
with every request sent to a proxy that refuses it, and the screenshot and the live page are
checked: each figure is drawn where the page puts it and is not blank, the page fetched nothing,
the verdicts come first and sort on a click, a long reason opens on a click, and each task point of
a figure is what the pointer finds there (its name on hover) and sits on a drawn mark.

Skipped where no Chromium or Chrome is installed (Debian: apt-get install -y chromium). PIL comes
with matplotlib, which the report needs anyway."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import pytest

from cuda_agent.bench.report import write_report

from .synthetic import synthetic_rows

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
BROWSER = next((found for name in BROWSERS if (found := shutil.which(name))), None)
WIDTH, HEIGHT = 1400, 3600

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(BROWSER is None, reason=f"none of {', '.join(BROWSERS)} on PATH: install one "
                                 "(apt-get install -y chromium) to check the rendered report")]

# Runs after the report's own script, once the images are decoded: records what the page fetched,
# where each figure landed, the first table, and what the pointer finds at each task point; then
# clicks the "vs eager" header twice (descending) and a long reason's summary, as a reader would.
PROBE = """<script>
window.addEventListener("load", function () {
  var body = document.body;
  body.setAttribute("data-fetched", JSON.stringify(performance.getEntriesByType("resource").map(
    function (e) { return e.name; })));
  body.setAttribute("data-figures", JSON.stringify(Array.prototype.map.call(document.images, function (img) {
    var r = img.getBoundingClientRect();
    return {alt: img.alt, natural: [img.naturalWidth, img.naturalHeight],
            box: [r.left + window.scrollX, r.top + window.scrollY, r.width, r.height]};
  })));
  body.setAttribute("data-first-table", JSON.stringify(document.querySelector("table").id));
  body.setAttribute("data-points", JSON.stringify(Array.prototype.map.call(
    document.querySelectorAll(".plot circle"), function (c) {
      var r = c.getBoundingClientRect(), x = r.left + r.width / 2, y = r.top + r.height / 2;
      var found = document.elementFromPoint(x, y), title = found && found.querySelector("title");
      return {label: c.querySelector("title").textContent, x: x + window.scrollX, y: y + window.scrollY,
              figure: c.closest("figure").querySelector("img").alt, r: r.width / 2,
              found: found && found.tagName === "circle" && title ? title.textContent : String(found && found.tagName)};
    })));
  var th = Array.prototype.find.call(document.querySelectorAll("#tasks th"),
                                     function (h) { return h.textContent === "vs eager"; });
  if (th) { th.click(); th.click(); }
  var details = document.querySelector("#tasks td.reason details");
  if (details) {
    var closed = details.getBoundingClientRect().height;
    details.querySelector("summary").click();
    body.setAttribute("data-reason", JSON.stringify({open: details.open, closed: closed,
      opened: details.getBoundingClientRect().height, text: details.innerText,
      head: getComputedStyle(details.querySelector(".head")).display}));
  }
});
</script>"""
LONG = ("rule broken: model_new.py:9: torch.tanh is PyTorch computation, which the strict policy forbids in "
        "forward: write it as a CUDA kernel and call it through the extension [torch-compute]")


def chromium(tmp: Path, page: Path, *action: str) -> str:
    """Headless Chromium on a local page, offline: a dead proxy for everything, loopback included."""
    cmd = [BROWSER, "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
           f"--user-data-dir={tmp / 'chromium-profile'}", f"--window-size={WIDTH},{HEIGHT}", *action,
           page.resolve().as_uri()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}"
    return done.stdout


def live_dom(tmp: Path, page: Path) -> str:
    """The page's DOM after load with PROBE run on it (a copy; the report itself is untouched)."""
    probed = tmp / f"probed-{page.name}"
    probed.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")
    return chromium(tmp, probed, "--virtual-time-budget=3000", "--dump-dom")


def body_data(dom: str, name: str):
    found = re.search(rf'<body[^>]*\sdata-{name}="([^"]*)"', dom)
    assert found, f"the probe did not run: no data-{name} on <body>"
    return json.loads(unescape(found.group(1)))


class TaskTable(HTMLParser):
    """Headers (text, class) and each row's data-v values of table#tasks in a DOM dump."""

    def __init__(self, dom: str):
        super().__init__()
        self.inside, self.headers, self.rows, self._th = False, [], [], None
        self.feed(dom)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self.inside = a.get("id") == "tasks"
        elif self.inside and tag == "th":
            self._th = [a.get("class") or "", ""]
        elif self.inside and tag == "tr" and self.headers:
            self.rows.append([])
        elif self.inside and tag == "td":
            self.rows[-1].append(a.get("data-v"))

    def handle_endtag(self, tag):
        if tag == "table":
            self.inside = False
        elif tag == "th" and self._th is not None:
            self.headers.append((self._th[1], self._th[0]))
            self._th = None

    def handle_data(self, data):
        if self._th is not None:
            self._th[1] += data


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """A report of 90 synthetic tasks, its screenshot and its live DOM."""
    tmp = tmp_path_factory.mktemp("render")
    rows = synthetic_rows(per_level=30)
    for r in [r for r in rows if not r["correct"]][:3]:
        r["reason"] = LONG
    rep = write_report(rows, tmp / "report", {"device": "synthetic", "source": "synthetic rows"})
    page = tmp / "report" / "report.html"
    png = tmp / "report.png"
    chromium(tmp, page, f"--screenshot={png}")
    return rows, rep, page, png, live_dom(tmp, page)


def _ink(img) -> float:
    """Share of pixels that are not (near) white."""
    hist = img.convert("L").histogram()
    return sum(hist[:235]) / sum(hist)


def _saturated(img) -> float:
    """Share of clearly coloured pixels (markers, bars)."""
    hist = img.convert("HSV").split()[1].histogram()
    return sum(hist[80:]) / sum(hist)


def test_screenshot_shows_the_summary_and_every_figure(rendered):
    from PIL import Image, ImageChops, ImageStat

    _, rep, _, png, dom = rendered
    shot = Image.open(png).convert("RGB")
    assert shot.size == (WIDTH, HEIGHT)
    assert _ink(shot.crop((0, 0, WIDTH, 300))) > 0.02, "no title or summary table at the top of the page"
    figures = body_data(dom, "figures")
    assert sorted(f["alt"] for f in figures) == sorted(rep.figures)
    boxes = []
    for f in figures:
        (nw, nh), (x, y, w, h) = f["natural"], [round(v) for v in f["box"]]
        assert nw > 300 and nh > 150, f"{f['alt']}: the embedded PNG did not decode ({nw}x{nh})"
        assert (w, h) == (nw + 2, nh + 2), f"{f['alt']}: shown at {w}x{h}, drawn at {nw}x{nh} (scaled or cut)"
        assert y + h <= HEIGHT, f"{f['alt']} is below the screenshot (y={y}): the page grew, raise HEIGHT"
        assert all(x + w <= bx or bx + bw <= x or y + h <= by or by + bh <= y for bx, by, bw, bh in boxes), \
            f"{f['alt']} overlaps another figure"
        boxes.append((x, y, w, h))
        seen = shot.crop((x + 1, y + 1, x + 1 + nw, y + 1 + nh))   # inside the 1px border
        assert _ink(seen) > 0.03 and _saturated(seen) > 0.002, f"{f['alt']} is blank or has no coloured marks"
        assert len(seen.getcolors(maxcolors=1 << 20) or []) > 100, f"{f['alt']} has too few colours for a plot"
        drawn = Image.open(io.BytesIO(rep.figures[f["alt"]])).convert("RGB")
        diff = ImageStat.Stat(ImageChops.difference(seen, drawn)).mean
        assert max(diff) < 4, f"{f['alt']}: the screenshot differs from the figure drawn (mean diff {diff})"


def test_page_is_rendered_without_fetching_anything(rendered):
    _, rep, page, _, dom = rendered
    html = page.read_text(encoding="utf-8")
    refs = re.findall(r"""(?:\b(?:src|href)\s*=\s*["']?|url\(\s*["']?|@import\s+["'])([^"')\s>]*)""", html)
    assert refs and all(r.startswith(("data:", "#")) for r in refs), [r for r in refs if not r.startswith("data:")]
    assert body_data(dom, "fetched") == [], "the page requested resources (it must open without a network)"
    assert len(body_data(dom, "figures")) == len(rep.figures) == 4


def test_offline_check_sees_an_external_image(tmp_path):
    """The probe is not vacuous: a page with a remote image is caught, and the image stays broken."""
    page = tmp_path / "remote.html"
    page.write_text('<!DOCTYPE html><html><body><img alt="remote" src="http://example.com/x.png"></body></html>')
    dom = live_dom(tmp_path, page)
    assert body_data(dom, "fetched") == ["http://example.com/x.png"]
    assert body_data(dom, "figures")[0]["natural"] == [0, 0]


def test_clicking_a_header_sorts_the_task_table(rendered):
    rows, _, _, _, dom = rendered
    table = TaskTable(dom)
    names = [h for h, _ in table.headers]
    col = names.index("vs eager")
    assert "desc" in table.headers[col][1].split(), "the sorter did not mark the clicked header"
    assert not any({"asc", "desc"} & set(c.split()) for h, c in table.headers if h != "vs eager"), \
        "other headers kept a sort mark"
    assert len(table.rows) == len(rows)
    keys = [r[col] for r in table.rows]
    filled = [float(k) for k in keys if k]
    assert filled == sorted(filled, reverse=True), "rows are not in descending 'vs eager' order"
    assert keys[len(filled):] == [""] * (len(keys) - len(filled)), "tasks without a speed-up must sort last"
    original = [r["speedup_vs_eager"] for r in sorted(rows, key=lambda r: (r["level"], r["problem_id"]))]
    assert [v for v in original if v is not None] != filled, "the rows were already in this order: nothing tested"


def test_the_verdicts_come_first_and_a_long_reason_opens_whole_on_a_click(rendered):
    *_, dom = rendered
    assert body_data(dom, "first-table") == "tasks"
    reason = body_data(dom, "reason")
    assert reason["open"] and reason["head"] == "none", "the summary's shortened text stays after opening"
    assert reason["opened"] > reason["closed"], "opening the reason did not show more of it"
    assert " ".join(reason["text"].split()) == LONG


def test_each_task_point_names_its_task_under_the_pointer_on_a_drawn_mark(rendered):
    from PIL import Image

    rows, rep, _, png, dom = rendered
    points = body_data(dom, "points")
    assert len(points) == sum(len(p) for p in rep.points.values()) > 100
    assert [p["found"] for p in points if p["found"] not in {q["label"] for q in points}] == [], \
        "the pointer finds something else than a task point at these points"
    alone = [p for p in points if not any(q is not p and q["figure"] == p["figure"] and
                                          abs(q["x"] - p["x"]) < 2 * q["r"] and abs(q["y"] - p["y"]) < 2 * q["r"]
                                          for q in points)]
    assert len(alone) > 50 and [p["label"] for p in alone if p["found"] != p["label"]] == [], \
        "a point that overlaps no other does not name its own task under the pointer"
    named = {p["label"].split(":")[0] for p in points}
    assert named == {r["task"] for r in rows}, "every task is named by a point (speed of light: all of them)"
    shot = Image.open(png).convert("L")
    on_white = [p["label"] for p in points if shot.getpixel((round(p["x"]), round(p["y"]))) > 235]
    assert on_white == [], "these points are not on a drawn mark in the screenshot"
