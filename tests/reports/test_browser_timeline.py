"""The report's one timeline figure in a real headless chromium, measured in pixels.

What a reader relies on is checked on screen, not in the figure's JSON:
a fault band and the node events it caused are drawn at the x their
history times give (read off the axis' own tick labels), every lane
shares that axis (a zoom moves all of them and the latency plot), no two
labels overprint, and the summary's anomaly link zooms to the anomaly.

The synthetic run's node clocks are made to lie (every node 135 s ahead,
as a slow setup made them look in issue 16, and a restarted node's clock
40 s behind), so a report that drew node events by their own walls would
put them far from the bands; the placement from the shared monotonic clock
(checkers.audit.place_events) is what keeps them aligned.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from harness.synthetic import make_run
from harness.synthetic_story import KILL, PARTITION
from reports.render import write_report
from tests.reports.conftest import keep_artifact

pytestmark = pytest.mark.browser

WIDTH, HEIGHT = 1400, 2400
PX_TOLERANCE = 2.5  # tick labels are centred to half a pixel; a bar edge is anti-aliased
DURATION_S = 20.0  # make_run's length for up to 4000 ops

# Screen geometry read from the rendered SVG (getBoundingClientRect), with
# plotly's own trace objects bound to each trace group (d3's __data__) only
# to find which group is which.
_MEASURE = """
const gd = document.getElementById('timeline');
const ticks = [...gd.querySelectorAll('.xtick text')].map(t => {
  const r = t.getBoundingClientRect();
  return [parseFloat(t.textContent.replace('\\u2212', '-')), (r.left + r.right) / 2];
}).filter(p => !isNaN(p[0]));
function shape(name) {
  const i = gd.layout.shapes.findIndex(s => s.name === name);
  const el = gd.querySelector(`path[data-index="${i}"]`);
  if (!el) return null;
  const r = el.getBoundingClientRect();
  return [r.left, r.right];
}
function bar(trace, k) {
  for (const g of gd.querySelectorAll('.barlayer .trace')) {
    if (g.__data__ && g.__data__[0].trace.name === trace) {
      const r = g.querySelectorAll('.point')[k].getBoundingClientRect();
      return [r.left, r.right];
    }
  }
  return null;
}
function marker(trace, y) {
  for (const g of gd.querySelectorAll('.scatterlayer .trace')) {
    if (g.__data__ && g.__data__[0].trace.name === trace) {
      const ys = g.__data__[0].trace.y;  // the points are drawn in the trace's order
      return [...g.querySelectorAll('path.point')].filter((p, i) => ys[i] === y)
        .map(p => { const r = p.getBoundingClientRect(); return (r.left + r.right) / 2; });
    }
  }
  return null;
}
return {ticks: ticks, partition: shape('fault partition'), kill: shape('fault kill'),
        n5_leads: bar('part-1 leader', 1), n2_starts: marker('node started', 'node n2')};
"""

# Every visible text of the figure with its box; the test asserts no two overlap.
_TEXTS = """
const gd = document.getElementById(arguments[0]);
return [...gd.querySelectorAll('svg text')].filter(t => {
  const s = getComputedStyle(t), r = t.getBoundingClientRect();
  return t.textContent.trim() && s.display !== 'none' && s.visibility !== 'hidden'
    && parseFloat(s.opacity || '1') > 0 && r.width > 0 && r.height > 0;
}).map(t => { const r = t.getBoundingClientRect();
  return {text: t.textContent, l: r.left, r: r.right, t: r.top, b: r.bottom}; });
"""


def _lying_clocks(run: Path) -> None:
    """Node walls 135 s ahead, n2's restarted process 40 s behind (module doc)."""
    for events_file in (run / "nodes").glob("*/events.jsonl"):
        events = [msgspec.json.decode(line) for line in events_file.read_bytes().splitlines()]
        starts = 0
        for ev in events:
            starts += ev["kind"] == "started"
            ev["wall"] += -40.0 if starts > 1 else 135.0
        events_file.write_bytes(b"".join(msgspec.json.encode(ev) + b"\n" for ev in events))


def _load(browser: Any, page: Path, shot: Path) -> None:
    """Opens `page` at a fixed size, waits for the timeline's axis, screenshots
    the figure, and fails on any console error."""
    browser.set_window_size(WIDTH, HEIGHT)
    browser.get(page.resolve().as_uri())
    ready = "return document.querySelectorAll('#timeline .xtick text').length"
    for _ in range(100):
        if browser.execute_script(ready):
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"{page}: the timeline's axis never rendered")
    browser.find_element("id", "timeline").screenshot(str(shot))
    keep_artifact(shot)
    errors = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
    assert errors == [], f"console errors on {page}: {errors}"


def _axis(ticks: list[list[float]]) -> tuple[float, float]:
    """(px at 0 s, px per second) from the tick labels' centres."""
    assert len(ticks) >= 2, f"too few x ticks to read the axis: {ticks}"
    (t0, x0), (t1, x1) = ticks[0], ticks[-1]
    return x0 - t0 * (x1 - x0) / (t1 - t0), (x1 - x0) / (t1 - t0)


def _overlaps(texts: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Pairs of texts whose boxes overlap by more than a pixel both ways."""
    out = []
    for i, a in enumerate(texts):
        for b in texts[i + 1 :]:
            dx = min(a["r"], b["r"]) - max(a["l"], b["l"])
            dy = min(a["b"], b["b"]) - max(a["t"], b["t"])
            if dx > 1 and dy > 1:
                out.append((a["text"], b["text"]))
    return out


@pytest.fixture(scope="module")
def lying_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An invalid synthetic run (partition, kill and restart, a rebalance) with lying clocks."""
    run = make_run(tmp_path_factory.mktemp("store"), seed=21, ops=1200, valid=False).path
    _lying_clocks(run)
    write_report(run)
    return run


def test_fault_bands_and_node_events_share_the_time_axis(
    browser: Any, lying_run: Path, tmp_path: Path
) -> None:
    """The partition band starts where the history says (3.0 s) and part-1's new
    leader n5 (3.006 s) is drawn there too; the kill band ends where the
    restarted n2 says `started` (13.001 s): within PX_TOLERANCE, on screen."""
    _load(browser, lying_run / "report.html", tmp_path / "timeline-aligned.png")
    got = browser.execute_script(_MEASURE)
    zero, per_s = _axis(got["ticks"])
    assert per_s > 40, f"the axis is too narrow to measure: {per_s:.1f} px/s"

    def at(seconds: float) -> float:
        return zero + seconds * per_s

    partition_s, kill_end_s = PARTITION[0] * DURATION_S, KILL[1] * DURATION_S + 0.001
    assert got["partition"][0] == pytest.approx(at(partition_s), abs=PX_TOLERANCE)
    assert got["n5_leads"][0] == pytest.approx(at(partition_s + 0.006), abs=PX_TOLERANCE)
    assert got["kill"][1] == pytest.approx(at(kill_end_s), abs=PX_TOLERANCE)
    assert len(got["n2_starts"]) == 2  # its first start and the restart after the kill
    assert got["n2_starts"][1] == pytest.approx(at(kill_end_s), abs=PX_TOLERANCE)


def test_zoom_moves_every_lane_and_the_anomaly_link_zooms_to_it(
    browser: Any, lying_run: Path, tmp_path: Path
) -> None:
    """One x axis for all rows (each row's y axis anchors to `x`); the latency plot
    follows a zoom; the summary names the rule and its link zooms to the anomaly."""
    _load(browser, lying_run / "report.html", tmp_path / "timeline-zoom.png")
    axes = browser.execute_script(
        "const l = document.getElementById('timeline')._fullLayout;"
        "return {x: Object.keys(l).filter(k => /^xaxis\\d*$/.test(k)),"
        " anchors: Object.keys(l).filter(k => /^yaxis\\d*$/.test(k)).map(k => l[k].anchor)};"
    )
    assert axes["x"] == ["xaxis"]
    assert len(axes["anchors"]) >= 4  # faults, operations, Raft, nodes, rebalance rows
    assert set(axes["anchors"]) == {"x"}
    summary = browser.find_element("id", "summary")
    assert summary.get_attribute("data-verdict") == "invalid"
    assert "linearizable's rule nonlinearizable broke first" in summary.text
    assert "2 faults (kill 1, partition 1) and 1 membership change" in summary.text
    assert browser.find_elements("id", "clock-note") == []  # every event was placed
    link = browser.find_element("id", "anomaly-link")
    t = float(link.get_attribute("data-t"))
    link.click()
    ranges = browser.execute_script(
        "return [document.getElementById('timeline').layout.xaxis.range,"
        " document.getElementById('latency').layout.xaxis.range];"
    )
    lo, hi = ranges[0]
    assert lo < t < hi
    assert hi - lo < DURATION_S / 2  # zoomed in, not the whole run
    assert ranges[1] == pytest.approx(ranges[0])  # the latency plot followed


def test_no_label_overprints_another(browser: Any, lying_run: Path, tmp_path: Path) -> None:
    """Synthetic run: every visible text in the figure has room of its own."""
    _load(browser, lying_run / "report.html", tmp_path / "timeline-labels.png")
    texts = browser.execute_script(_TEXTS, "timeline")
    assert len(texts) > 20  # headings, ticks, bar labels: the check saw them
    assert _overlaps(texts) == []


def test_a_simulated_runs_labels_do_not_overprint(browser: Any, tmp_path: Path) -> None:
    """A real (simulated) run with the full nemesis mix: many changes, rebalance
    writes and faults; the rendered figure still has no overlapping labels."""
    store = tmp_path / "store"
    cmd = [sys.executable, "-m", "harness.cli", "run", "--backend", "sim", "--seed", "3",
           "--time-limit", "12", "--store", str(store), "--no-progress"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stderr
    page = next(store.glob("*/*/report.html"))
    _load(browser, page, tmp_path / "timeline-sim.png")
    texts = browser.execute_script(_TEXTS, "timeline")
    assert len(texts) > 20
    assert _overlaps(texts) == []


def test_the_overlap_check_sees_overprinted_labels(browser: Any, tmp_path: Path) -> None:
    """Two annotations at one spot overlap: the check is not blind."""
    page = tmp_path / "overprint.html"
    from reports.render import plotly_js

    page.write_text(
        f"<!doctype html><script>{plotly_js()}</script><div id='timeline'></div><script>"
        "Plotly.newPlot('timeline',[{x:[0,1],y:[0,1]}],{annotations:["
        "{x:0.5,y:0.5,text:'partition n1',showarrow:false},"
        "{x:0.5,y:0.5,text:'kill n2',showarrow:false}]});</script>"
    )
    _load(browser, page, tmp_path / "overprint.png")
    assert ("partition n1", "kill n2") in _overlaps(browser.execute_script(_TEXTS, "timeline"))
