"""The sentence at the top of a report: what happened, in one line.

It names the verdict; for a run that failed, the checker and rule
(anomaly kind) that failed first on the timeline and when, as a link that
zooms the one figure (reports.timeline) to that moment; how many
operations, faults (applied, and not applied) and membership changes the
run had. A run whose node lanes could not be placed on the harness's clock
gets a second sentence saying so (reports.data.clock_note).
"""

from __future__ import annotations

import html
from collections import Counter
from typing import Any

from reports.data import NS_PER_S, RunData, anomaly_times, clock_note, validity_label

_ESC = html.escape


def _plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else many or word + 's'}"


def _faults(data: RunData) -> str:
    kinds = Counter(w["f"] for w in data.faults)
    applied = _plural(len(data.faults), "fault")
    if kinds:
        applied += " (" + ", ".join(f"{f} {n}" for f, n in sorted(kinds.items())) + ")"
    missed = f", {len(data.unapplied)} more not applied" if data.unapplied else ""
    return f"{applied}{missed} and {_plural(len(data.changes), 'membership change')}"


def _failed(results: dict[str, Any], verdict: bool | None) -> list[tuple[str, dict[str, Any]]]:
    checkers = results.get("checkers") or {}
    return [(name, r) for name, r in sorted(checkers.items())
            if isinstance(r, dict) and r.get("valid") is verdict]  # fmt: skip


def _anomaly_link(t: int, label: str) -> str:
    seconds = t / NS_PER_S
    return (f'<a id="anomaly-link" href="#timeline" data-t="{seconds:.6f}" '
            f'title="zoom the timeline to {_ESC(label)}">at {seconds:.3f} s</a>')  # fmt: skip


def summary_html(data: RunData) -> str:
    """`<p id="summary">`: the one sentence (module doc), and the clock note if any."""
    results = data.results or {}
    verdict = validity_label(results.get("valid")) if results else "unchecked"
    tail = f"over {len(data.client_ops)} client operations with {_faults(data)}"
    first = anomaly_times(data)[:1]
    if verdict == "invalid":
        failed = _failed(results, False)
        names = ", ".join(name for name, _ in failed) or "a checker"
        if first:
            t, label = first[0]
            checker, kind = label.split(": ", 1)
            count = sum(len(r.get("anomalies") or []) for _, r in failed)
            what = (f"<b>invalid</b>: {_ESC(checker)}'s rule <code>{_ESC(kind)}</code> broke "
                    "first, "
                    f"{_anomaly_link(t, label)} ({_plural(count, 'anomaly', 'anomalies')} from "
                    f"{_ESC(names)})")  # fmt: skip
        else:
            what = f"<b>invalid</b>: {_ESC(names)} failed with nothing to place on the timeline"
    elif verdict == "unknown":
        unsure = _failed(results, None)
        why = "; ".join(f"{name}: {r.get('error') or 'could not judge'}" for name, r in unsure)
        what = f"<b>unknown</b>: {_ESC(why or 'no checker could judge')}"
    elif verdict == "valid":
        what = f"<b>valid</b>: all {len(results.get('checkers') or {})} checkers passed"
    else:
        what = "<b>not checked</b>: the run has no results.json"
    note = clock_note(data)
    extra = f' <span id="clock-note">{_ESC(note)}</span>' if note else ""
    return (f'<p id="summary" data-verdict="{verdict}" data-faults="{len(data.faults)}" '
            f'data-changes="{len(data.changes)}">{what}, {tail}.{extra}</p>')  # fmt: skip
