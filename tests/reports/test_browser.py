"""Reports opened in a real headless chromium: they load cleanly and show the right counts.

Each test loads a page from disk (file://, no server: the reports must be
self-contained), fails on any console error, reads what plotly drew from
the page's own graph divs, and saves a screenshot (conftest.keep_artifact:
pytest's tmp dir, and $FAULTLINE_ARTIFACTS when set; run with -s to see
the paths). The one timeline figure is checked where it matters to a
reader, in screen pixels: tests/reports/test_browser_timeline.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from harness.synthetic import make_run
from reports.figures import COLORS
from reports.index import write_index
from reports.render import write_report
from tests.reports.conftest import keep_artifact
from tests.reports.helpers import fixture_run

pytestmark = pytest.mark.browser


def open_page(browser: Any, page: Path, shot: Path) -> None:
    browser.get(page.resolve().as_uri())
    height = browser.execute_script("return document.body.scrollHeight")
    browser.set_window_size(1400, min(int(height) + 120, 8000))
    browser.save_screenshot(str(shot))
    keep_artifact(shot)
    errors = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
    assert errors == [], f"console errors on {page}: {errors}"


def traces_of(browser: Any, div: str) -> list[dict[str, Any]]:
    """What plotly holds for a graph div: name, type and point count of each trace."""
    return browser.execute_script(
        "const gd = document.getElementById(arguments[0]);"
        "if (!gd || !gd.data || !gd.querySelector('.main-svg')) return null;"
        "return gd.data.map(t => ({name: t.name, type: t.type, mode: t.mode || '',"
        " n: (t.x || []).filter(v => v !== null).length}));",
        div,
    )


def _results(run: Path) -> dict[str, Any]:
    return msgspec.json.decode((run / "results.json").read_bytes())


@pytest.mark.parametrize(
    ("fixture", "verdict"),
    [("kv/c01-ok.txt", "valid"), ("kv/c01-bad.txt", "invalid"),
     ("jepsen/etcd_002.log", "valid"), ("jepsen/etcd_000.log", "invalid")],
)  # fmt: skip
def test_fixture_report_loads_and_draws_every_op(
    browser: Any, tmp_path: Path, fixture: str, verdict: str
) -> None:
    """Porcupine fixtures: the verdict shows, every op is a hover point, a violation is drawn."""
    run = fixture_run(tmp_path, fixture)
    open_page(browser, write_report(run), tmp_path / f"fixture-{run.parent.name}.png")
    assert browser.find_element("id", "verdict").get_attribute("data-valid") == verdict
    traces = traces_of(browser, "timeline")
    assert traces is not None, "the timeline was not drawn"
    points = sum(t["n"] for t in traces if t["mode"] == "markers" and t["name"] in COLORS)
    drawn = browser.find_element("id", "timeline").get_attribute("data-ops-drawn")
    assert points == int(drawn) == _results(run)["checkers"]["stats"]["figures"]["ops"]
    violations = browser.find_elements("id", "violation")
    if verdict == "valid":
        assert violations == []
        return
    failure = _results(run)["checkers"]["linearizable"]["figures"]["failure"]
    assert len(browser.find_elements("css selector", "#lin-svg .lin-unplaceable")) == len(
        failure["unplaceable"]
    )
    prefix = browser.find_elements("css selector", "#lin-svg .lin-prefix")
    assert len(prefix) == min(40, len(failure["linearized_prefix"]))
    assert browser.find_elements("css selector", "#lin-states li")


def test_index_filters_and_sorts(browser: Any, tmp_path: Path) -> None:
    """The index lists every run; the verdict filter and a header click work."""
    for seed in (1, 2, 3):
        write_report(make_run(tmp_path, seed=seed, ops=200, started=1.7e9 + seed).path)
    bad = make_run(tmp_path, seed=4, ops=600, valid=False, started=1.7e9 + 4)
    write_report(bad.path)
    open_page(browser, write_index(tmp_path), tmp_path / "index.png")
    assert browser.find_element("id", "shown").text == "4"
    select = browser.find_element("id", "verdict-filter")
    select.find_element("css selector", "option[value=invalid]").click()
    assert browser.find_element("id", "shown").text == "1"
    visible = [
        r for r in browser.find_elements("css selector", "#runs tbody tr") if r.is_displayed()
    ]
    assert [r.get_attribute("data-verdict") for r in visible] == ["invalid"]
    select.find_element("css selector", "option[value='']").click()
    browser.find_element("css selector", "th[data-col=seed]").click()
    seeds = [c.text for c in browser.find_elements("css selector", "td[data-col=seed]")]
    assert seeds == ["1", "2", "3", "4"]


def test_console_errors_are_caught(browser: Any, tmp_path: Path) -> None:
    """The console check sees a page's errors (so a clean report means something)."""
    page = tmp_path / "broken.html"
    page.write_text("<!doctype html><script>console.error('planted'); undefinedCall();</script>")
    with pytest.raises(AssertionError, match="planted"):
        open_page(browser, page, tmp_path / "broken.png")
