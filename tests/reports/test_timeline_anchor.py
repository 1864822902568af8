"""The report places audit events on the history's clock through timeline.json."""

from __future__ import annotations

from pathlib import Path

from harness.store import RunDir
from reports.data import audit_clock


def _run(tmp_path: Path, anchor: str | None) -> RunDir:
    run = RunDir(tmp_path / "20260101T000000-1")
    run.path.mkdir()
    if anchor is not None:
        run.timeline.write_text(anchor)
    return run


def test_events_are_placed_from_the_workload_start_not_the_run_dir_stamp(tmp_path: Path) -> None:
    """Setup took 135 s before the workload: the stamp alone would shift every event by it."""
    stamp = 1767225600.0  # 20260101T000000
    run = _run(tmp_path, f'{{"history_zero_wall": {stamp + 135.0}}}')
    event = {"kind": "leader", "wall": stamp + 140.0, "mono_ns": 1}
    assert audit_clock(run, {"n1": [event]})(event) == 5_000_000_000


def test_without_an_anchor_the_stamp_still_serves(tmp_path: Path) -> None:
    stamp = 1767225600.0
    run = _run(tmp_path, "not json")
    event = {"kind": "leader", "wall": stamp + 140.0, "mono_ns": 1}
    assert audit_clock(run, {"n1": [event]})(event) == 140_000_000_000
