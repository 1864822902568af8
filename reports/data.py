"""A run as the report sees it: loaded once, with the derived series it draws.

Theory of operation. `load_run_data` reads a run dir through the same
loaders the checkers use (so a malformed file fails with the same message)
and derives: fault and membership-change windows (the stats checker's own
`fault_windows`/`change_windows`, so the bands on the page are the windows
the verdict was judged on; a fault that was not applied has no window,
only a moment, `unapplied`), a clock for audit events, and the first
anomaly's time.

Audit events reach the report already placed on the harness's clock by
checkers.audit.load_audit (docs/events.md, "Placed walls"), and
`audit_ns` is checkers.audit.history_clock: ns since the history's zero,
from the placed `wall`. No other clock conversion happens here. An event
that could not be placed (a run from before the contract, or a node whose
clock offset was not measured) keeps its node's own wall; `clock_note` says
so on the page. Runs older than timeline.json fall back to the run dir's
stamp as the history's zero, which is off by however long setup took.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from checkers import compose
from checkers.audit import load_timeline, run_clock
from checkers.history import Event, Operation, pair
from checkers.stats import MEMBERSHIP_FS, change_windows, fault_windows, unapplied_faults
from harness.store import RunDir

NS_PER_S = 1_000_000_000


class ReportError(ValueError):
    """A run dir the report cannot be made from (one line naming why)."""


@dataclass
class RunData:
    """Everything one report draws."""

    run: RunDir
    plan: dict[str, Any]
    events: list[Event]
    ops: list[Operation]
    audit: dict[str, list[dict[str, Any]]]
    results: dict[str, Any] | None
    end_ns: int
    faults: list[dict[str, Any]] = field(default_factory=list)
    changes: list[dict[str, Any]] = field(default_factory=list)
    # Fault ops that were not applied: drawn as a marked tick, never a band.
    unapplied: list[dict[str, Any]] = field(default_factory=list)
    audit_ns: Callable[[dict[str, Any]], int] = lambda ev: int(ev.get("mono_ns") or 0)

    @property
    def client_ops(self) -> list[Operation]:
        """Operations by client processes (ints), membership ops excluded."""
        return [op for op in self.ops if isinstance(op.process, int) and op.f not in MEMBERSHIP_FS]

    def op_by_index(self) -> dict[int, Operation]:
        """Operations keyed by their invoke index (the ops' ids everywhere)."""
        return {op.invoke_index: op for op in self.ops}

    def checker(self, name: str) -> dict[str, Any] | None:
        """One checker's result from results.json, or None."""
        if not self.results:
            return None
        found = self.results.get("checkers", {}).get(name)
        return found if isinstance(found, dict) else None


def load_run_data(path: Path) -> RunData:
    """Loads a run dir; raises ReportError naming what is missing or malformed."""
    if not path.is_dir():
        raise ReportError(f"{path} is not a run directory")
    run = RunDir(path)
    if not run.history.is_file():
        raise ReportError(f"{path} has no history.jsonl")
    try:
        plan, events, audit, _ = compose.load_run(path)
    except ValueError as exc:  # HistoryError and a bad test.json are ValueErrors
        raise ReportError(str(exc)) from None
    results = None
    if run.results.is_file():
        try:
            results = msgspec.json.decode(run.results.read_bytes(), type=dict[str, Any])
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise ReportError(f"{run.results}: {exc}") from None
    ops = pair(events)
    end = events[-1].time if events else 0
    data = RunData(run, plan, events, ops, audit or {}, results, end)
    data.faults, data.changes = fault_windows(ops, end), change_windows(ops, end)
    data.unapplied = unapplied_faults(ops)
    data.audit_ns = audit_clock(run, data.audit)
    return data


def run_start_wall(run: RunDir) -> float | None:
    """The run's start as Unix seconds, from its dir's stamp (the index shows it)."""
    try:
        return float(calendar.timegm(time.strptime(run.started, "%Y%m%dT%H%M%S")))
    except ValueError:
        return None


def audit_clock(
    run: RunDir, audit: dict[str, list[dict[str, Any]]]
) -> Callable[[dict[str, Any]], int]:
    """Places an audit event on the history's clock: checkers.audit.run_clock,
    the one mapping the checkers and the lake use too (module doc)."""
    return run_clock(run.path, audit)


def anomaly_times(data: RunData) -> list[tuple[int, str]]:
    """(history time, "checker: kind") of each anomaly that can be placed: at its
    first history op's invoke, else at its last audit event (placed as every
    audit event is, `audit_ns`)."""
    by_index = data.op_by_index()
    out: list[tuple[int, str]] = []
    for name, result in (data.results or {}).get("checkers", {}).items():
        for anomaly in result.get("anomalies") or []:
            label = f"{name}: {anomaly.get('kind')}"
            ops = [by_index[i] for i in anomaly.get("ops") or [] if i in by_index]
            events = [ev for ev in anomaly.get("events") or [] if isinstance(ev, dict)
                      and ("wall" in ev or "mono_ns" in ev)]  # fmt: skip
            if ops:
                out.append((ops[0].invoke_time, label))
            elif events:
                out.append((data.audit_ns(events[-1]), label))
    return sorted(out)


def clock_note(data: RunData) -> str | None:
    """Why node lanes may be offset from the history, or None when every audit
    event was placed on the harness's clock (checkers.audit.place_events marks
    a placed event with `node_wall`)."""
    events = [ev for evs in data.audit.values() for ev in evs]
    unplaced = sum(1 for ev in events if "node_wall" not in ev)
    if not unplaced:
        return None
    why = ("this run predates timeline.json: the run dir's stamp stands in for the "
           "history's zero, off by however long setup took"
           if load_timeline(data.run.path) is None else
           "their nodes' clocks were not placed on the harness's (no shared monotonic "
           "clock and no measured offset)")  # fmt: skip
    return (f"Node lanes may be offset: {unplaced} of {len(events)} audit events are drawn "
            f"at their node's own wall clock; {why}.")  # fmt: skip


def validity_label(value: Any) -> str:
    """'valid', 'invalid' or 'unknown' for a results.json verdict."""
    if value is True:
        return "valid"
    if value is False:
        return "invalid"
    return "unknown"
