"""Run statistics and the guards that make weak runs unknown."""

from __future__ import annotations

from typing import Any

from checkers.api import CheckContext, CheckerResult
from checkers.history import Event, pair, validate
from checkers.stats import StatsChecker, longest_gap, quantiles
from tests.checkers.helpers import HistoryBuilder

MS = 1_000_000


def _check(h: HistoryBuilder, **options: Any) -> CheckerResult:
    events = [Event(**e) for e in h.events]
    validate(events)
    return StatsChecker().check(
        CheckContext(events=events, operations=pair(events), options=options)
    )


def _traffic(h: HistoryBuilder, n: int, dt: int = 100 * MS) -> None:
    for i in range(n):
        h.op(i % 3, "write", dt=dt, key="k", value=i)


def test_quantiles_use_nearest_rank() -> None:
    """p50/p90/p99/max of 1..100 ms are 50/90/99/100 ms."""
    q = quantiles([i * MS for i in range(1, 101)])
    assert q == {"count": 100, "p50": 50.0, "p90": 90.0, "p99": 99.0, "max": 100.0}


def test_longest_gap_counts_window_edges() -> None:
    """The stretch from a window's start to its first ok counts as unavailable."""
    assert longest_gap([5, 6, 20], 0, 10) == 5
    assert longest_gap([], 0, 10) == 10
    assert longest_gap([1, 9], 0, 10) == 8


def test_figures_and_fault_window_unavailability() -> None:
    """A fault with no acknowledged ops inside shows its whole length as unavailable."""
    h = HistoryBuilder()
    _traffic(h, 10)
    h.op("nemesis", "partition", type_="info", dt=MS)
    h.op(7, "read", type_="info", dt=MS)  # a timeout: not an ok op
    h.op("nemesis", "heal-partition", type_="info", dt=500 * MS)
    _traffic(h, 10)
    result = _check(h)
    assert result.valid is True, result.error
    (fault,) = result.figures["faults"]
    assert fault["f"] == "partition"
    assert fault["unavailable_ms"] >= 500
    assert result.figures["outcomes"] == {"ok": 20, "info": 1}
    assert result.figures["latency_ms"]["write"]["count"] == 20
    assert sum(result.figures["throughput_per_s"]) == 20
    assert result.figures["changes"] == []


def test_low_traffic_is_unknown_with_reason() -> None:
    """Fewer acknowledged ops than the minimum makes the verdict unknown."""
    h = HistoryBuilder()
    _traffic(h, 3)
    result = _check(h)
    assert result.valid == "unknown"
    assert result.error == "traffic too low: 3 ok client ops, fewer than 10"
    assert _check(h, min_ok_ops=3).valid is True


def test_faults_that_never_overlap_a_change_are_unknown() -> None:
    """A run with faults and changes that never met did not test what it meant to."""
    h = HistoryBuilder()
    _traffic(h, 10)
    h.op("nemesis", "kill", type_="info").op("nemesis", "start", type_="info")
    h.op(99, "change-peers", value=["n1", "n2", "n4"])
    _traffic(h, 2)
    result = _check(h)
    assert result.valid == "unknown"
    assert "no fault overlapped a membership change (1 faults, 1 changes)" in str(result.error)


def test_fault_overlapping_a_change_passes_the_guard() -> None:
    """A kill healed only after a change-peers completed overlaps it."""
    h = HistoryBuilder()
    _traffic(h, 10)
    h.op("nemesis", "kill", type_="info")
    h.op(99, "change-peers", value=["n1", "n2", "n4"])
    h.op("nemesis", "start", type_="info")
    result = _check(h, require_overlap=True)
    assert result.valid is True, result.error
    assert result.figures["fault_change_overlaps"] == 1


def test_required_overlap_without_changes_is_unknown() -> None:
    """require_overlap makes a run without any membership change unknown."""
    h = HistoryBuilder()
    _traffic(h, 10)
    assert _check(h, require_overlap=True).valid == "unknown"
