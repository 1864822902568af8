"""Sequential specifications the search checks histories against.

A model is a pure, deterministic state machine over hashable states:

- `init()` is the state before any operation.
- `step(state, op)` is the state after `op` takes effect in `state`, or
  ILLEGAL when `op` cannot take effect there with the output it reported
  (None is a state: an absent register). For an operation of unknown
  outcome (`op.known` False) the output is ignored and `step` never
  returns ILLEGAL.
- `is_pure(op)` is True when `op` can never change the state (a read, or a
  compare-and-set known to have failed). The search linearizes a pure
  operation as soon as it is legal, which never loses a linearization, and
  drops pure operations of unknown outcome, which constrain nothing.
- `erases(op)`: `op` is always legal and leaves a state that does not
  depend on the state before (a blind write). `always_legal(op)`: `op` is
  legal in every state. An always-legal op placed just before an erasing
  one has no visible effect, so the search may "hide" it there after the
  fact instead of trying every subset of such ops up front.
- `commutes(a, b)`: `a` and `b` touch disjoint parts of the state, so
  placing `a` before `b` is never needed to place `b` (only the whole-map
  model says True, for different keys).
- `observable(op, checkers)`: whether the effect of `op` (of unknown
  outcome) could ever matter to one of `checkers`, the partition's known
  ops whose legality depends on the state. One that cannot is dropped: not
  firing it is always at least as good.
- `check_shape(op)` names what is wrong with an operation the model cannot
  interpret, or returns None; the check reports it instead of crashing.
- `summarize(op, writers)` and `viable(state, op, summary)`: look-ahead
  pruning. For a pure known op, `writers` are the non-pure ops that could
  take effect between its call and its return; `summarize` boils them down
  once, and `viable` answers, cheaply and conservatively, whether the op
  could still become legal from `state` before it returns, using only the
  writers `is_open` says are still unplaced. False must mean
  "certainly not"; the search then abandons the configuration at once
  instead of discovering the dead end many moves later.
- `describe(state)` renders a state as JSON-able data for reports.
- `partitioned`: operations on different `key`s are independent, so each
  key's sub-history can be checked alone (P-compositionality).
- `aliases`: other names for the model's ops (Jepsen's read/write for the
  kv model's get/put, and the reverse for registers), applied before any
  other method sees an op.

Op shapes are documented in docs/models.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

from checkers.linearizability.types import LinOp

# A model's state: any hashable value (each model has its own shape, so the
# type says no more than Any would; Hashable would only force casts).
State = Any
IsOpen = Callable[[LinOp], bool]


class _Illegal:
    """The type of ILLEGAL, step's answer for an op that cannot happen."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ILLEGAL"


ILLEGAL: Final = _Illegal()


class Model(Protocol):
    """The interface every model implements (see the module docstring)."""

    name: str
    partitioned: bool
    aliases: Mapping[str, str]

    def init(self) -> State:
        """The state before any operation."""
        ...

    def step(self, state: Any, op: LinOp) -> State | _Illegal:
        """The state after `op` in `state`, or ILLEGAL."""
        ...

    def is_pure(self, op: LinOp) -> bool:
        """Whether `op` can never change the state."""
        ...

    def erases(self, op: LinOp) -> bool:
        """Whether `op` is an always-legal blind write."""
        ...

    def always_legal(self, op: LinOp) -> bool:
        """Whether `op` is legal in every state."""
        ...

    def commutes(self, a: LinOp, b: LinOp) -> bool:
        """Whether `a` and `b` touch disjoint parts of the state."""
        ...

    def observable(self, op: LinOp, checkers: list[LinOp]) -> bool:
        """Whether unknown `op` could matter to any of `checkers`."""
        ...

    def check_shape(self, op: LinOp) -> str | None:
        """What is wrong with `op` for this model, or None."""
        ...

    def summarize(self, op: LinOp, writers: list[LinOp]) -> Any:
        """What `viable` needs to know about the ops that may precede `op`."""
        ...

    def viable(self, state: Any, op: LinOp, summary: Any, is_open: IsOpen) -> bool:
        """False only if `op` can certainly not become legal from `state`,
        given which writers are still open (`is_open`: not yet placed)."""
        ...

    def describe(self, state: Any) -> Any:
        """`state` as JSON-able data."""
        ...


def _cas_args(op: LinOp) -> tuple[Any, Any] | None:
    value = op.input
    if isinstance(value, list | tuple) and len(value) == 2:
        return value[0], value[1]
    return None


def _written(op: LinOp) -> Any:
    """The value a register write or cas would leave."""
    return op.input[1] if op.f == "cas" else op.input


def _cas_succeeded(op: LinOp) -> bool:
    # An `ok` cas with no output (faultline) or output True succeeded; the
    # etcd fixtures' "fail cas" arrives as output False: it ran, compared
    # unequal and changed nothing.
    return op.output is not False


def cas_step(state: Any, op: LinOp) -> Any:
    """The state after a cas on a register holding `state` (ILLEGAL if the
    outcome cannot follow from it); an unknown cas may or may not have swapped."""
    expected, new = op.input
    if not op.known:
        return new if state == expected else state
    if _cas_succeeded(op):
        return new if state == expected else ILLEGAL
    return state if state != expected else ILLEGAL


class RegisterModel:
    """One register per key, initially None (absent).

    `register` knows read/write; `cas-register` and `etcd` add cas, whose
    output False means "ran and compared unequal" (the etcd fixtures'
    meaning of a failed cas).
    """

    partitioned = True
    # faultline's kv names for the same ops (Jepsen and porcupine say read/write).
    aliases: Mapping[str, str] = {"get": "read", "put": "write"}

    def __init__(self, name: str, *, with_cas: bool) -> None:
        self.name = name
        self._fs = {"read", "write", "cas"} if with_cas else {"read", "write"}

    def init(self) -> State:
        """A register starts absent."""
        return None

    def step(self, state: Any, op: LinOp) -> State | _Illegal:
        """Apply read, write or cas."""
        f = op.f
        if f == "read":
            return state if (not op.known or op.output == state) else ILLEGAL
        if f == "write":
            return op.input
        return cas_step(state, op)

    def is_pure(self, op: LinOp) -> bool:
        """Reads, and cas known to have compared unequal."""
        return op.f == "read" or (op.f == "cas" and op.known and not _cas_succeeded(op))

    def erases(self, op: LinOp) -> bool:
        """Writes."""
        return op.f == "write"

    def always_legal(self, op: LinOp) -> bool:
        """Writes."""
        return op.f == "write"

    def commutes(self, a: LinOp, b: LinOp) -> bool:
        """Never: one partition is one register."""
        return False

    def observable(self, op: LinOp, checkers: list[LinOp]) -> bool:
        """Whether some read returns, or some cas expects, the value `op`
        writes; any cas that compared unequal may need any change at all."""
        written = _written(op)
        for c in checkers:
            if c.f == "cas" and c.known and not _cas_succeeded(c):
                return True
            if (c.output if c.f == "read" else c.input[0]) == written:
                return True
        return False

    def check_shape(self, op: LinOp) -> str | None:
        """f must be known; cas takes [expected, new]."""
        if op.f not in self._fs:
            return f"model {self.name} has no operation {op.f!r} (knows {sorted(self._fs)})"
        if op.f == "cas" and _cas_args(op) is None:
            return f"cas needs input [expected, new], got {op.input!r}"
        return None

    def summarize(self, op: LinOp, writers: list[LinOp]) -> Any:
        """The writers that could leave a value `op` accepts."""
        if op.f == "read":
            return [w for w in writers if _written(w) == op.output]
        return [w for w in writers if _written(w) != op.input[0]]

    def viable(self, state: Any, op: LinOp, summary: Any, is_open: IsOpen) -> bool:
        """A read needs its value now or from an open writer; a failed cas
        needs a value other than its expected one."""
        if (state == op.output) if op.f == "read" else (state != op.input[0]):
            return True
        return any(is_open(w) for w in summary)

    def describe(self, state: Any) -> Any:
        """The register's value."""
        return state
