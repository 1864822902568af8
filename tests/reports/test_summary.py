"""The sentence at the top of a report, and its note on node clocks (no browser)."""

from __future__ import annotations

from pathlib import Path

from harness.synthetic import make_run
from reports.data import load_run_data
from reports.summary import summary_html


def test_a_valid_run_says_so_with_its_counts(tmp_path: Path) -> None:
    run = make_run(tmp_path, seed=1, ops=300).path
    sentence = summary_html(load_run_data(run))
    assert 'data-verdict="valid"' in sentence
    assert "<b>valid</b>: all " in sentence
    assert "over 300 client operations with 2 faults (kill 1, partition 1)" in sentence
    assert "1 membership change." in sentence
    assert "anomaly-link" not in sentence
    assert "clock-note" not in sentence  # the synthetic run follows the clock contract


def test_an_invalid_run_names_checker_rule_and_links_the_moment(tmp_path: Path) -> None:
    run = make_run(tmp_path, seed=2, ops=600, valid=False).path
    data = load_run_data(run)
    sentence = summary_html(data)
    assert "linearizable's rule <code>nonlinearizable</code> broke first" in sentence
    assert '<a id="anomaly-link" href="#timeline" data-t="' in sentence


def test_an_old_run_dir_loads_with_a_note_that_node_lanes_may_be_offset(tmp_path: Path) -> None:
    """A run from before timeline.json: the run dir's stamp stands in, and the page says so."""
    run = make_run(tmp_path, seed=3, ops=300).path
    (run / "timeline.json").unlink()
    sentence = summary_html(load_run_data(run))
    assert '<span id="clock-note">Node lanes may be offset:' in sentence
    assert "predates timeline.json" in sentence
