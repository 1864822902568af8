"""Certainly-stale reads: a register read no linearization can satisfy,
found in O(n log n) before any search.

A known read `r` returning `v` needs, just before its linearization point,
a state of `v`: left by some op that can write `v` (a write of `v`, a cas to
`v` that swapped or may have; the initial state when `v` is absent) and not
overwritten since. If there is a known op `y` that sets the register to
something else (a write, or a cas that swapped, of a value other than `v`)
which was called after every writer of `v` that could precede `r` had
returned, and which returned before `r` was called, then every
linearization orders each such writer before `y` before `r`: the state at
`r` is not `v`, and the history is not linearizable. Writers called after
`r` returned cannot precede it; an unknown-outcome writer never returns, so
no `y` can follow it and the rule does not apply.

This is exactly the case that is hardest for the search (a late stale
read on a hot register with many crashed writes: every way to linearize
what came before must be ruled out), and the rule settles it at once. It
is only a sufficient condition; the search remains the decision procedure.
"""

from __future__ import annotations

import bisect
import math
from typing import Any

from checkers.linearizability.models import RegisterModel, _cas_succeeded, _written
from checkers.linearizability.types import LinOp


class StaleRead:
    """A read no linearization can satisfy, and why: the writers of its
    value that could precede it, and the op that certainly overwrote them."""

    def __init__(self, read: LinOp, writers: list[LinOp], overwriter: LinOp) -> None:
        self.read = read
        self.writers = writers
        self.overwriter = overwriter


def _setter(op: LinOp) -> bool:
    """A known op that certainly set the register to `_written(op)`."""
    return op.known and (op.f == "write" or (op.f == "cas" and _cas_succeeded(op)))


def _may_write(op: LinOp) -> bool:
    return op.f == "write" or (op.f == "cas" and (not op.known or _cas_succeeded(op)))


def find_stale_read(model: Any, ops: list[LinOp]) -> StaleRead | None:
    """The earliest-returning certainly-stale read of a register partition,
    or None (always None for models other than the registers)."""
    if not isinstance(model, RegisterModel):
        return None
    # Writers of each value, by call, with the running max of their returns.
    writers: dict[Any, list[LinOp]] = {}
    for op in sorted((o for o in ops if _may_write(o)), key=lambda o: o.call):
        writers.setdefault(_hashable(_written(op)), []).append(op)
    calls = {v: [w.call for w in ws] for v, ws in writers.items()}
    max_ret: dict[Any, list[float]] = {}
    for v, ws in writers.items():
        acc, run = [], -math.inf
        for w in ws:
            run = max(run, math.inf if w.ret is None else w.ret)
            acc.append(run)
        max_ret[v] = acc
    setters = sorted((o for o in ops if _setter(o)), key=lambda o: o.ret or 0)
    reads = sorted((o for o in ops if o.known and o.f == "read"), key=lambda o: o.call)
    # Sweep reads by call; keep the latest-called setter returned so far,
    # and the latest-called one of a different value.
    best: LinOp | None = None
    other: LinOp | None = None
    k = 0
    found: list[StaleRead] = []
    for r in reads:
        while k < len(setters) and (setters[k].ret or 0) < r.call:
            y = setters[k]
            k += 1
            if best is None or y.call > best.call:
                if best is not None and _written(best) != _written(y):
                    other = best
                best = y
            elif _written(y) != _written(best) and (other is None or y.call > other.call):
                other = y
        v = r.output
        killer = best if best is not None and _written(best) != v else other
        if killer is None:
            continue
        key = _hashable(v)
        n = bisect.bisect_left(calls.get(key, []), r.ret) if r.ret is not None else 0
        latest = max_ret[key][n - 1] if n else -math.inf
        if latest < killer.call:
            found.append(StaleRead(r, writers.get(key, [])[:n], killer))
    return min(found, key=lambda s: s.read.ret or 0) if found else None


def _hashable(value: Any) -> Any:
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


def check_stale(model: Any, ops: list[LinOp], read_id: int, overwriter_id: int) -> str | None:
    """What keeps read `read_id` from being certainly stale because of op
    `overwriter_id` in the partition `ops` (the module docstring's rule,
    checked directly in one pass), or None when it is."""
    if not isinstance(model, RegisterModel):
        return f"model {model.name} has no stale-read rule"
    by_id = {op.id: op for op in ops}
    r, y = by_id.get(read_id), by_id.get(overwriter_id)
    if r is None or y is None or not (r.known and r.f == "read") or not _setter(y):
        return "the read or the overwriting op is not in the history as claimed"
    v = r.output
    if _written(y) == v or y.ret is None or r.ret is None or not y.ret < r.call:
        return f"op {y.id} does not certainly overwrite {v!r} before read {r.id}"
    for w in ops:
        precedes = _may_write(w) and _written(w) == v and w.call < r.ret
        if precedes and (w.ret is None or not w.ret < y.call):
            return f"op {w.id} may write {v!r} after op {y.id} and before read {r.id}"
    return None
