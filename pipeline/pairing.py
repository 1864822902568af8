"""Pairing a history's events into operations, many processes at once.

The pre-check and `faultline check --spark` shuffle a history's events by
process, sorted by index, and pair each process's invokes with their
completions. Done one process at a time through the checkers' own
`HistoryValidator` and `pair` this was a third of a 10^6-op check (Python per
event). `pair_processes` does the same for a whole batch of processes with
array operations, and hands only the processes that break a rule to
`pair_process`, which goes event by event so the message is the checkers'
own words.

What "breaks a rule" means, within one process sorted by index (the
validator's rules that concern one process; see checkers/history.py):
events alternate invoke, completion; a completion's f is its invoke's; no
two events share an index and time never goes back; a client (an integer
process) invokes nothing after an info. A process that mixes integer and
string ids under one name is also left to the slow path, which decides as
it always did.
"""

from __future__ import annotations

from typing import Any

import msgspec

from checkers.history import Event, HistoryError, HistoryValidator, Operation, pair

# One operation, as the pre-check's stages hand it on (a problem row: a
# process breaking a rule, with only `process`, `is_client` and `problem`).
OP_SCHEMA = ("process string, is_client boolean, f string, type string, invoke_index long, "
             "invoke_time long, complete_index long, complete_time long, key string, "
             "value string, result string, revision long, problem string")  # fmt: skip
OP_COLUMNS = [c.split()[0] for c in OP_SCHEMA.split(", ")]


def to_json(value: Any) -> str | None:
    return None if value is None else msgspec.json.encode(value).decode()


def from_json(text: Any) -> Any:
    return msgspec.json.decode(text) if isinstance(text, str) else None


def as_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None  # pandas holds a missing string as NaN


def as_int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):  # None, NaN (pandas' float column) or pd.NA (Int64)
        return None


def pair_process(pdf: Any) -> list[tuple[Any, ...]]:
    """One process's events (pandas, in index order) -> its operations as
    OP_COLUMNS rows, validated event by event by the checkers' rules."""
    is_client = bool(pdf["is_client"].iat[0])
    columns = [pdf[c].tolist() for c in ("idx", "time", "process", "type", "f", "key", "value",
                                         "revision")]  # fmt: skip
    events = [
        Event(index=i, time=t, process=int(p) if is_client else p, type=ty, f=f, key=as_str(k),
              value=from_json(v), revision=as_int(r))
        for i, t, p, ty, f, k, v, r in zip(*columns, strict=True)
    ]  # fmt: skip
    try:
        validator = HistoryValidator(f"process {events[0].process}")
        for ev, line in zip(events, pdf["line"].tolist(), strict=True):
            validator.feed(ev, line)
    except HistoryError as exc:
        return [(str(events[0].process), is_client, *([None] * 10), str(exc))]
    return [_op_row(op, is_client) for op in pair(events)]


def _op_row(op: Operation, is_client: bool) -> tuple[Any, ...]:
    return (str(op.process), is_client, op.f, op.type, op.invoke_index, op.invoke_time,
            op.complete_index, op.complete_time, op.key, to_json(op.value),
            to_json(op.result), op.revision, None)  # fmt: skip


def _flagged_rows(ev: dict[str, Any], first: Any, group: Any, nxt_same: Any) -> Any:
    """Per event: does its process break a rule (module doc)? `first` marks each
    process's first event, `group` numbers the processes, `nxt_same` marks an
    event followed by another of its process."""
    import numpy as np

    n = len(first)
    same = ~first  # the event has an earlier one in its process
    pos = np.arange(n) - np.flatnonzero(first)[group]
    is_inv = ev["type"] == "invoke"
    prev = np.r_[0, np.arange(n - 1)]  # the event before (meaningful where `same`)
    bad = is_inv != (pos % 2 == 0)
    bad |= same & ~is_inv & (ev["f"] != ev["f"][prev])
    bad |= same & (ev["idx"] <= ev["idx"][prev])
    bad |= same & (ev["time"] < ev["time"][prev])
    bad |= same & (ev["is_client"] != ev["is_client"][prev])
    bad |= ev["is_client"] & (ev["type"] == "info") & nxt_same
    # Spread each event's finding to its whole process.
    per_process = np.zeros(int(group[-1]) + 1, dtype=bool)
    np.logical_or.at(per_process, group, bad)
    return per_process[group]


def pair_processes(pdf: Any) -> Any:
    """Whole processes' events (pandas, sorted by process then index) -> their
    operations as an OP_COLUMNS DataFrame; see the module doc."""
    import numpy as np
    import pandas as pd

    if pdf.empty:
        return pd.DataFrame(columns=OP_COLUMNS)
    names = ("idx", "time", "process", "is_client", "type", "f", "key", "value")
    ev = {c: pdf[c].to_numpy() for c in names}
    ev["is_client"] = ev["is_client"].astype(bool)
    revision = pdf["revision"]
    rev_known = revision.notna().to_numpy()
    ev["revision"] = revision.fillna(0).to_numpy().astype(np.int64)
    proc = ev["process"]
    first = np.r_[True, proc[1:] != proc[:-1]]
    group = np.cumsum(first) - 1
    nxt_same = np.r_[~first[1:], False]
    flagged = _flagged_rows(ev, first, group, nxt_same)

    n = len(proc)
    nxt = np.minimum(np.arange(n) + 1, n - 1)
    inv = np.flatnonzero((ev["type"] == "invoke") & ~flagged)
    # In a process that breaks no rule, the event after an invoke, if any in
    # its process, is its completion; an invoke last in its process is open.
    has_done = nxt_same[inv]
    at = nxt[inv]  # read only where has_done

    def pick(primary: Any, fallback: Any) -> Any:
        return np.where(pd.isna(primary), fallback, primary)

    def nullable(values: Any, known: Any) -> Any:
        return pd.arrays.IntegerArray(values.astype(np.int64), ~known)

    key = pick(ev["key"][inv], np.where(has_done, ev["key"][at], None))
    rev_inv, rev_done = rev_known[inv], rev_known[at] & has_done
    out = pd.DataFrame({
        "process": proc[inv], "is_client": ev["is_client"][inv], "f": ev["f"][inv],
        "type": np.where(has_done, ev["type"][at], "info"),
        "invoke_index": ev["idx"][inv], "invoke_time": ev["time"][inv],
        "complete_index": nullable(np.where(has_done, ev["idx"][at], 0), has_done),
        "complete_time": nullable(np.where(has_done, ev["time"][at], 0), has_done),
        "key": key, "value": ev["value"][inv],
        "result": np.where(has_done, ev["value"][at], None),
        "revision": nullable(np.where(rev_done, ev["revision"][at], ev["revision"][inv]),
                             rev_done | rev_inv),
        "problem": None,
    })  # fmt: skip
    if not flagged.any():
        return out
    slow = pd.DataFrame([row for _, one in pdf[flagged].groupby("process", sort=False)
                         for row in pair_process(one)], columns=OP_COLUMNS)  # fmt: skip
    if out.empty:
        return slow
    return pd.concat([out.astype(object), slow.astype(object)], ignore_index=True)
