"""The key-value models: per key (`kv`), and over the whole map at once.

See models.py for the model interface and docs/models.md for op shapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from checkers.linearizability.models import (
    ILLEGAL,
    IsOpen,
    Model,
    State,
    _cas_args,
    _cas_succeeded,
    _Illegal,
    _written,
    cas_step,
)
from checkers.linearizability.types import LinOp


def _extends(value: Any, base: Any) -> bool:
    """Whether appends could turn `base` into `value` (True if unsure)."""
    if value is None:
        return False
    if base is None:
        return True
    if isinstance(value, str) and isinstance(base, str):
        return value.startswith(base)
    return True


def _tiles(value: Any, base: Any, pieces: list[Any]) -> bool:
    """Whether appending some of `pieces` to `base` could give `value`
    (strings: a reachability scan over positions; other types: True)."""
    if value is None:
        return False
    if base is None:
        base = "" if isinstance(value, str) else base
    if not (isinstance(value, str) and isinstance(base, str)):
        return True
    if not value.startswith(base):
        return False
    frontier, seen, end = [len(base)], {len(base)}, len(value)
    while frontier:
        at = frontier.pop()
        if at == end:
            return True
        for piece in pieces:
            if isinstance(piece, str) and piece and value.startswith(piece, at):
                nxt = at + len(piece)
                if nxt not in seen:
                    seen.add(nxt)
                    frontier.append(nxt)
    return False


def _kv_written(op: LinOp) -> Any:
    """The string a kv put, append or cas writes."""
    return op.input[1] if op.f == "cas" else op.input


class KvModel:
    """A map from key to value, checked one key at a time.

    get returns the value (None when absent); put sets it; append
    concatenates onto it (absent counts as empty); cas takes
    [expected, new] like a register; delete removes the key.
    """

    name = "kv"
    partitioned = True
    # Jepsen's, Knossos's and porcupine's names for get and put.
    aliases: Mapping[str, str] = {"read": "get", "write": "put"}
    _FS = frozenset({"get", "put", "append", "cas", "delete"})

    def init(self) -> State:
        """Every key starts absent."""
        return None

    def step(self, state: Any, op: LinOp) -> State | _Illegal:
        """Apply one operation to one key's value."""
        f = op.f
        if f == "get":
            return state if (not op.known or op.output == state) else ILLEGAL
        if f == "put":
            return op.input
        if f == "append":
            return op.input if state is None else state + op.input
        if f == "delete":
            return None
        return cas_step(state, op)

    def is_pure(self, op: LinOp) -> bool:
        """get, and cas known to have compared unequal."""
        return op.f == "get" or (op.f == "cas" and op.known and not _cas_succeeded(op))

    def erases(self, op: LinOp) -> bool:
        """put and delete."""
        return op.f in ("put", "delete")

    def always_legal(self, op: LinOp) -> bool:
        """put, delete and append."""
        return op.f in ("put", "delete", "append")

    def commutes(self, a: LinOp, b: LinOp) -> bool:
        """Never: one partition is one key."""
        return False

    def observable(self, op: LinOp, checkers: list[LinOp]) -> bool:
        """An unknown put/append/cas matters only if some get's result or
        cas's expected value could contain what it writes; a failed cas
        matters too if its expected value can be produced at all."""
        if op.f == "delete" or not isinstance(written := _kv_written(op), str):
            return True
        for c in checkers:
            target = c.output if c.f == "get" else c.input[0]
            if c.f == "cas" and not _cas_succeeded(c):
                return True  # "not equal" may need any change at all
            if not isinstance(target, str) or written in target:
                return True
        return False

    def check_shape(self, op: LinOp) -> str | None:
        """f must be known; cas takes [expected, new]; append takes str or list."""
        if op.f not in self._FS:
            return f"model kv has no operation {op.f!r} (knows {sorted(self._FS)})"
        if op.f == "cas" and _cas_args(op) is None:
            return f"cas needs input [expected, new], got {op.input!r}"
        if op.f == "append" and not isinstance(op.input, str | tuple):
            return f"append needs a string or tuple input, got {op.input!r}"
        return None

    def summarize(self, op: LinOp, writers: list[LinOp]) -> Any:
        """The appends that may come first, and the writers that could set a
        value the get's result equals or (by appends) extends."""
        if op.f != "get":
            return [], []
        target = op.output
        appends = []
        others = []
        for w in writers:
            if w.f != "append":
                others.append(w)
            elif not (isinstance(target, str) and isinstance(w.input, str)) or w.input in target:
                appends.append(w)  # a piece not in the result cannot be part of it
        resets = []
        for w in others:
            f = w.f
            base = None if f == "delete" else (w.input[1] if f == "cas" else w.input)
            if base == target or (appends and _extends(target, base)):
                resets.append(w)
        return appends, resets

    def viable(self, state: Any, op: LinOp, summary: Any, is_open: IsOpen) -> bool:
        """A get needs its value now, or reachable from the current value or
        an open writer's by open appends."""
        if op.f != "get" or state == op.output:
            return True
        appends, resets = summary
        pieces = [a.input for a in appends if is_open(a)]
        if pieces and _tiles(op.output, state, pieces):
            return True
        for r in resets:
            if is_open(r):
                base = None if r.f == "delete" else _written(r)
                if base == op.output or (pieces and _tiles(op.output, base, pieces)):
                    return True
        return False

    def describe(self, state: Any) -> Any:
        """The key's value."""
        return state


def _key_order(item: tuple[Any, Any]) -> str:
    return repr(item[0])


class WholeMapModel:
    """Any per-key model run over the whole map at once, unpartitioned.

    It exists to cross-check P-compositionality (porcupine's
    kvNoPartitionModel): the state is the sorted tuple of (key, value)
    pairs of the keys touched so far.
    """

    partitioned = False

    def __init__(self, inner: Model) -> None:
        self.inner = inner
        self.name = f"{inner.name}-nopart"
        self.aliases = inner.aliases

    def init(self) -> State:
        """No key touched yet."""
        return ()

    def step(self, state: Any, op: LinOp) -> State | _Illegal:
        """Step the inner model on the op's key, leaving other keys alone."""
        items: tuple[tuple[Any, Any], ...] = state
        for i, (key, value) in enumerate(items):
            if key == op.key:
                after = self.inner.step(value, op)
                if after is ILLEGAL:
                    return ILLEGAL
                if after == value:
                    return items
                return (*items[:i], (key, after), *items[i + 1 :])
        after = self.inner.step(self.inner.init(), op)
        if after is ILLEGAL:
            return ILLEGAL
        return tuple(sorted((*items, (op.key, after)), key=_key_order))

    def is_pure(self, op: LinOp) -> bool:
        """As the inner model."""
        return self.inner.is_pure(op)

    def erases(self, op: LinOp) -> bool:
        """Never: other keys survive any single-key write."""
        return False

    def always_legal(self, op: LinOp) -> bool:
        """As the inner model."""
        return self.inner.always_legal(op)

    def observable(self, op: LinOp, checkers: list[LinOp]) -> bool:
        """As the inner model, over the checkers of the same key."""
        return self.inner.observable(op, [c for c in checkers if c.key == op.key])

    def commutes(self, a: LinOp, b: LinOp) -> bool:
        """Ops on different keys."""
        return bool(a.key != b.key)

    def check_shape(self, op: LinOp) -> str | None:
        """As the inner model."""
        return self.inner.check_shape(op)

    def summarize(self, op: LinOp, writers: list[LinOp]) -> Any:
        """The inner model's summary over the writers of the same key."""
        return self.inner.summarize(op, [w for w in writers if w.key == op.key])

    def viable(self, state: Any, op: LinOp, summary: Any, is_open: IsOpen) -> bool:
        """The inner model's answer on the op's key."""
        for key, value in state:
            if key == op.key:
                return self.inner.viable(value, op, summary, is_open)
        return self.inner.viable(self.inner.init(), op, summary, is_open)

    def describe(self, state: Any) -> Any:
        """The map as a dict keyed by the keys' text."""
        return {str(k): self.inner.describe(v) for k, v in state}
