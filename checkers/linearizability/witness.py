"""Linearization witnesses: what a `valid` verdict shows, and its check.

A witness is, per partition (key), the order in which the search placed
the operations, with the model state after each (rendered by the model's
`describe`). Anyone can check it against the history in one pass, without
searching:

1. every known (`ok`) operation of the partition appears exactly once; an
   operation of unknown outcome (`info`) at most once (absent: it never took
   effect); nothing else appears;
2. the order respects real time: no operation comes after one that was
   called only after it returned (a scan keeping the latest call seen);
3. replaying the model's `step` from its initial state, every operation is
   legal and leaves exactly the recorded state.

The checker builds each witness this way too and refuses its own `valid`
verdict (unknown, naming a checker bug) if one does not verify.
"""

from __future__ import annotations

from typing import Any

import msgspec

from checkers.linearizability.models import ILLEGAL, Model
from checkers.linearizability.types import LinOp, Witness


class WitnessError(ValueError):
    """A witness that does not prove its partition linearizable."""


def _plain(value: Any) -> Any:
    """`value` as it reads back from JSON (tuples become lists, ...)."""
    return msgspec.json.decode(msgspec.json.encode(value))


def _replay(
    model: Model, ops: list[LinOp], order: list[int], key: Any
) -> list[Any]:  # fmt: skip
    """Checks rules 1-3 except the recorded states; returns the states."""
    by_id = {op.id: op for op in ops}
    seen: set[int] = set()
    latest_call: tuple[int, int] | None = None  # (call, op id)
    state = model.init()
    states = []
    for op_id in order:
        op = by_id.get(op_id)
        if op is None:
            raise WitnessError(f"key {key!r}: op {op_id} is not an operation of this key")
        if op_id in seen:
            raise WitnessError(f"key {key!r}: op {op_id} appears twice")
        seen.add(op_id)
        if latest_call is not None and op.ret is not None and op.ret < latest_call[0]:
            raise WitnessError(
                f"key {key!r}: op {op_id} returned ({op.ret}) before op {latest_call[1]}, "
                f"placed earlier, was called ({latest_call[0]})"
            )
        if latest_call is None or op.call > latest_call[0]:
            latest_call = (op.call, op_id)
        after = model.step(state, op)
        if after is ILLEGAL:
            raise WitnessError(
                f"key {key!r}: op {op_id} ({op.f} {op.input!r} -> {op.output!r}) cannot "
                f"follow state {model.describe(state)!r}"
            )
        state = after
        states.append(model.describe(state))
    missing = [op.id for op in ops if op.known and op.id not in seen]
    if missing:
        raise WitnessError(f"key {key!r}: known op(s) {missing[:10]} are not placed")
    return states


def build(model: Model, key: Any, ops: list[LinOp], order: list[int]) -> Witness:
    """The witness for `order`, checked; raises WitnessError if it fails."""
    return Witness(key=key, ops=order, states=_replay(model, ops, order, key))


def verify(model: Model, key: Any, ops: list[LinOp], witness: Witness) -> None:
    """Check `witness` against the partition's `ops` in linear time; raise
    WitnessError naming the first thing wrong."""
    if len(witness.states) != len(witness.ops):
        raise WitnessError(f"key {key!r}: {len(witness.ops)} ops but {len(witness.states)} states")
    states = _replay(model, ops, witness.ops, key)
    for n, (got, want) in enumerate(zip(states, witness.states, strict=True)):
        if _plain(got) != _plain(want):
            raise WitnessError(
                f"key {key!r}: after op {witness.ops[n]} the state is {got!r}, "
                f"the witness says {want!r}"
            )
