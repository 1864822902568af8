"""Minimal counterexamples: what an `invalid` verdict shows.

A counterexample is a small set of one key's operations that is already
not linearizable, obtained from the failing partition only by changes that
can never turn a linearizable history into a non-linearizable one. So the
small set failing proves the whole partition fails, and a person can see
why in a handful of operations. The changes:

1. Cut at a time T: drop every operation called after T, and make every
   operation still running at T of unknown outcome. (A linearization of the
   whole restricted to the rest is a linearization of the cut: whatever
   took effect after T was pending at T, and now may take effect late or
   never.) The smallest failing T is found by bisection, as failing is
   monotone in T.
2. Drop pure operations (reads, cas that compared unequal): they change no
   state, so removing one from a linearization leaves it legal.
3. Drop a state-changing operation whose effect the remaining operations
   cannot observe (the model's `observable`, as for unknown writes).

Each candidate set is searched; a change is kept only if the smaller set
is still proven non-linearizable. The search runs until a deadline; what
it has then is still a proven counterexample, only perhaps not minimal
(`complete` says which). `check_reduction` re-checks that a counterexample
is such a reduction of a history, for `faultline verify`.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from checkers.linearizability.models import Model
from checkers.linearizability.search import Budget, OutOfBudgetError, Search
from checkers.linearizability.stale import StaleRead
from checkers.linearizability.types import Counterexample, LinOp

_PROBE_MEMO = 200_000  # memo cap of one probe search


def _fails(model: Model, ops: list[LinOp], deadline: float) -> bool:
    """Whether a search proves `ops` not linearizable before `deadline`."""
    budget = Budget(deadline, _PROBE_MEMO, 0)
    try:
        return Search(model, ops, budget, trace=False).run().valid is False
    except OutOfBudgetError:
        return False


def cut(ops: list[LinOp], t: int) -> list[LinOp]:
    """Rule 1: the ops called by `t`, those still running at `t` unknown."""
    out = []
    for op in ops:
        if op.call > t:
            continue
        if op.ret is not None and op.ret > t:
            op = msgspec.structs.replace(op, ret=None, output=None, known=False)
        out.append(op)
    return out


def _removable(model: Model, op: LinOp, rest: list[LinOp]) -> bool:
    """Rules 2 and 3: whether dropping `op` keeps the set a reduction."""
    if model.is_pure(op):
        return True
    checkers = [c for c in rest if not model.always_legal(c) and (c.known or not model.is_pure(c))]
    return not model.observable(op, checkers)


def _bisect_cut(model: Model, ops: list[LinOp], deadline: float) -> tuple[list[LinOp], int | None]:
    times = sorted({op.ret for op in ops if op.ret is not None})
    lo, hi = 0, len(times) - 1  # the answer is in times[lo..hi], or no cut
    best: int | None = None
    while lo <= hi and time.monotonic() < deadline:
        mid = (lo + hi) // 2
        if _fails(model, cut(ops, times[mid]), deadline):
            best, hi = mid, mid - 1
        else:
            lo = mid + 1
    if best is None:
        return ops, None
    return cut(ops, times[best]), times[best]


def shrink(model: Model, key: Any, ops: list[LinOp], deadline: float) -> Counterexample:
    """A counterexample from a partition `ops` already found not linearizable."""
    current, t = _bisect_cut(model, ops, deadline)
    # Drop removable ops in chunks, halving the chunk size (ddmin-like).
    chunk = max(1, len(current) // 2)
    complete = True
    while True:
        changed = False
        i = 0
        while i < len(current):
            if time.monotonic() > deadline:
                complete = False
                break
            rest = current[:i] + current[i + chunk :]
            group = current[i : i + chunk]
            if all(_removable(model, op, rest) for op in group) and _fails(model, rest, deadline):
                current, changed = rest, True
            else:
                i += chunk
        if not complete or (chunk == 1 and not changed):
            break
        if not changed:
            chunk = max(1, chunk // 2)
    return Counterexample(key=key, ops=current, of_ops=len(ops), cut=t, complete=complete)


def stale_counterexample(key: Any, ops: list[LinOp], stale: StaleRead) -> Counterexample:
    """The counterexample of a certainly-stale read: the read, the op that
    overwrote its value, and the ops that could write that value before it.
    They fail on their own by the same rule, and the rule holding on the
    whole partition (`stale.check_stale`) proves the partition fails."""
    keep = {stale.read.id, stale.overwriter.id, *(w.id for w in stale.writers)}
    return Counterexample(
        key=key,
        ops=[op for op in ops if op.id in keep],
        of_ops=len(ops),
        stale_read=[stale.read.id, stale.overwriter.id],
    )


def check_reduction(model: Model, ops: list[LinOp], cex: Counterexample) -> str | None:
    """What keeps `cex` from being a reduction of the partition `ops` by
    rules 1-3, or None. (Whether it fails is a search: see `_fails`.)"""
    allowed = cut(ops, cex.cut) if cex.cut is not None else ops
    by_id = {op.id: op for op in allowed}
    kept: set[int] = set()
    for op in cex.ops:
        orig = by_id.get(op.id)
        if orig is None:
            return f"op {op.id} is not in the history (or is after the cut)"
        if msgspec.to_builtins(orig) != msgspec.to_builtins(op):
            return f"op {op.id} differs from the history's: {op!r} vs {orig!r}"
        kept.add(op.id)
    for op in allowed:
        if op.id not in kept and not _removable(model, op, cex.ops):
            return f"op {op.id} ({op.f}) was dropped, but it changes state the others observe"
    return None


def proves_failure(model: Model, cex: Counterexample, time_limit_s: float) -> bool:
    """Whether a search shows the counterexample's ops not linearizable."""
    return _fails(model, cex.ops, time.monotonic() + time_limit_s)
