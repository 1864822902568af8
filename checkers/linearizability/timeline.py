"""A partition's operations compiled into the arrays the search walks.

Events (calls, and returns of known ops) are sorted by time, a call before
a return at the same instant (so such ops count as concurrent). Each known
op gets a slot: the lowest free at its call, freed at its return, so the
search's bitmasks are as wide as the concurrency. Unknown ops get instance
numbers in call order and a signature (f, key, input) under which they are
interchangeable. Each pure known op gets the model's summary of the writers
that overlap it, for look-ahead pruning.
"""

from __future__ import annotations

from typing import Any

from checkers.linearizability.models import Model
from checkers.linearizability.types import LinOp

CALL, RETURN = 0, 1
_CALL, _RETURN = CALL, RETURN


class Timeline:
    """A partition's operations compiled into arrays the search walks."""

    def __init__(self, model: Model, ops: list[LinOp]) -> None:
        # Ops whose legality depends on the state: known ones, and unknown
        # ones that may fire only from some states (a cas needs its expected
        # value, which an unknown write may be the only one to leave).
        checkers = [
            op for op in ops if not model.always_legal(op) and (op.known or not model.is_pure(op))
        ]
        self.ops = [
            op
            for op in ops
            if op.known or (not model.is_pure(op) and model.observable(op, checkers))
        ]
        events: list[tuple[int, int, int]] = []
        for j, op in enumerate(self.ops):
            events.append((op.call, _CALL, j))
            if op.known:
                assert op.ret is not None
                events.append((op.ret, _RETURN, j))
        # A call and a return at the same instant count as concurrent.
        events.sort()
        self.kind = [e[1] for e in events]
        self.op_at = [e[2] for e in events]
        n = len(self.ops)
        self.pure = [model.is_pure(op) for op in self.ops]
        self.erases = [model.erases(op) for op in self.ops]
        # Known ops that may be placed just before an erasing op at no cost.
        self.hideable = [op.known and model.always_legal(op) for op in self.ops]
        self.slot = [-1] * n
        self.ret_pos = [0] * n
        self.call_pos = [0] * n
        self.index = {op.id: j for j, op in enumerate(self.ops)}
        self.inst = [-1] * n  # instance number of an unknown op, in call order
        self.inst_op: list[int] = []
        self.inst_sig: list[int] = []
        self._assign(events)
        self.summary: list[Any] = [None] * n
        self._summarize(model, events)
        # For each position, the first pure known op called after it (-1: none).
        self.next_read = [-1] * (len(events) + 1)
        for pos in range(len(events) - 1, -1, -1):
            j = self.op_at[pos]
            is_read = self.kind[pos] == _CALL and self.pure[j] and self.ops[j].known
            self.next_read[pos] = j if is_read else self.next_read[pos + 1]

    def _assign(self, events: list[tuple[int, int, int]]) -> None:
        free: list[int] = []
        width = 0
        sigs: dict[tuple[str, str, bytes], int] = {}
        for pos, (_, kind, j) in enumerate(events):
            op = self.ops[j]
            if kind == _RETURN:
                self.ret_pos[j] = pos
                free.append(self.slot[j])
                free.sort(reverse=True)
                continue
            self.call_pos[j] = pos
            if op.known:
                if free:
                    self.slot[j] = free.pop()
                else:
                    self.slot[j] = width
                    width += 1
            else:
                sig = (op.f, repr(op.key), repr(op.input).encode())
                self.inst[j] = len(self.inst_op)
                self.inst_op.append(j)
                self.inst_sig.append(sigs.setdefault(sig, len(sigs)))
        self.width = width
        self.n_sigs = len(sigs)

    def _summarize(self, model: Model, events: list[tuple[int, int, int]]) -> None:
        """Give each pure known op the model's summary of the writers that
        overlap it: those active at its call, called before its return."""
        active: dict[int, LinOp] = {}  # known writers between call and return
        unknown: list[LinOp] = []  # writers of unknown outcome, open forever
        calls: list[LinOp] = []  # every writer, in call order
        at_call: dict[int, tuple[list[LinOp], int, int]] = {}
        for _, kind, j in events:
            op = self.ops[j]
            if self.pure[j]:
                if kind == _CALL:
                    at_call[j] = (list(active.values()), len(unknown), len(calls))
                else:
                    before, n_unknown, n_calls = at_call.pop(j)
                    writers = before + unknown[:n_unknown] + calls[n_calls:]
                    self.summary[j] = model.summarize(op, writers)
            elif kind == _CALL:
                calls.append(op)
                if op.known:
                    active[j] = op
                else:
                    unknown.append(op)
            else:
                del active[j]
