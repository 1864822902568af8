"""The sequential specification of ember's metastore.

State: (revision, entries) where entries is a sorted tuple of
(key, (value, create_revision, mod_revision, version)). Every write bumps
the one global revision, so the model cannot be split by key.

Ops (docs/models.md has the full shapes):
- put(key, value) -> revision after the put
- get(key) -> {value, mod_revision, revision}  (value None when absent)
- delete(key) -> revision after (unchanged if the key was absent), or
  {revision, deleted}: deleted 1 if the key was there, else 0
- invoke(if=[conditions], then=[writes], else=[writes]) -> {succeeded, revision}
A condition is {key, target: exists|value|mod_revision|create_revision|
version, op: eq|ne|lt|gt, value}; a write is {op: put, key, value} or
{op: delete, key}. A transaction that changes anything bumps the revision
once. Outputs may leave any field out (or be None): it is then unchecked.
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Callable, Mapping
from typing import Any

from checkers.linearizability.models import ILLEGAL, IsOpen, State, _Illegal
from checkers.linearizability.types import LinOp

Entry = tuple[Any, int, int, int]  # value, create_revision, mod_revision, version
Entries = tuple[tuple[Any, Entry], ...]

_CMP: dict[str, Callable[[Any, Any], bool]] = {
    "eq": operator.eq,
    "ne": operator.ne,
    "lt": operator.lt,
    "gt": operator.gt,
}


class _Recorded(enum.Enum):
    ANY_VALUE = "a recorded put whose event does not carry its value"


ANY_VALUE = _Recorded.ANY_VALUE
_TARGETS = {"exists", "value", "mod_revision", "create_revision", "version"}
_FS = {"get", "put", "delete", "invoke"}


def _find(entries: Entries, key: Any) -> Entry | None:
    for k, entry in entries:
        if k == key:
            return entry
    return None


def _write(entries: Entries, key: Any, entry: Entry | None) -> Entries:
    rest = tuple(item for item in entries if item[0] != key)
    if entry is None:
        return rest
    return tuple(sorted((*rest, (key, entry)), key=lambda item: repr(item[0])))


def _holds(entries: Entries, cond: Any) -> bool:
    entry = _find(entries, cond["key"])
    target = cond["target"]
    if target == "exists":
        actual: Any = entry is not None
    elif entry is None:
        actual = None if target == "value" else 0
    else:
        actual = entry[("value", "create_revision", "mod_revision", "version").index(target)]
    try:
        return _CMP[cond.get("op", "eq")](actual, cond["value"])
    except TypeError:  # None < 3: an absent value compares false
        return False


def _apply(revision: int, entries: Entries, writes: Any) -> tuple[int, Entries]:
    """Apply a transaction's writes at one new revision (if any changes)."""
    new_rev = revision + 1
    changed = False
    for w in writes:
        old = _find(entries, w["key"])
        if w["op"] == "put":
            create = old[1] if old is not None else new_rev
            version = old[3] + 1 if old is not None else 1
            entries = _write(entries, w["key"], (w["value"], create, new_rev, version))
            changed = True
        elif old is not None:
            entries = _write(entries, w["key"], None)
            changed = True
    return (new_rev, entries) if changed else (revision, entries)


def _events(entries: Entries, writes: Any) -> list[tuple[Any, str, Any]]:
    """The watch events `writes` make, applied to `entries` (as `_apply` does)."""
    events: list[tuple[Any, str, Any]] = []
    present = {k for k, _ in entries}
    for w in writes:
        if w["op"] == "put":
            events.append((w["key"], "PUT", w["value"]))
            present.add(w["key"])
        elif w["key"] in present:
            events.append((w["key"], "DELETE", None))
            present.discard(w["key"])
    return events


def _same_events(made: list[tuple[Any, str, Any]], recorded: tuple[Any, ...]) -> bool:
    """Whether `made` is `recorded` in some order; a recorded put without its
    value (ANY_VALUE) matches a put of any value."""
    left = list(recorded)
    for key, kind, value in made:
        fits = (i for i, (k, t, v) in enumerate(left)
                if (k, t) == (key, kind) and (v is ANY_VALUE or v == value))  # fmt: skip
        match = next(fits, None)
        if match is None:
            return False
        del left[match]
    return not left


def _out(op: LinOp, field: str) -> Any:
    out = op.output
    if isinstance(out, dict):
        return out.get(field)
    return None


def claimed_revision(op: LinOp) -> int | None:
    """The revision a known op certainly produced, if it did: a put, a delete
    that says it deleted, a transaction whose taken branch (or both, when the
    output does not say which) puts. Every linearization must place it
    there, and no other op can produce that revision in the same one."""
    if not op.known or op.output is None:
        return None
    out = op.output if isinstance(op.output, dict) else {"revision": op.output}
    revision = out.get("revision")
    if not isinstance(revision, int) or isinstance(revision, bool):
        return None
    if op.f == "put":
        return revision
    if op.f == "delete":
        return revision if out.get("deleted") else None
    if op.f == "invoke" and isinstance(op.input, dict):
        succeeded = out.get("succeeded")
        taken = (
            ("then",)
            if succeeded is True
            else ("else",)
            if succeeded is False
            else ("then", "else")
        )
        puts = [any(isinstance(w, dict) and w.get("op") == "put" for w in op.input.get(b) or ())
                for b in taken]  # fmt: skip
        return revision if all(puts) else None
    return None


class MetastoreModel:
    """ember's revisioned metastore (see the module docstring).

    `bind` specializes it to one history: an op of unknown outcome may not
    produce a revision a known op claims (`claimed_revision`), so a crashed
    write is tried only where the known writes leave a gap. That is exact
    (two ops never produce one revision) and turns histories with tens of
    `info` writes from an exponential search into a near-linear one.

    `pinned` (revision -> the events a watch record shows it wrote,
    checkers/meta_ranks.py) narrows those ops further: one that produces a
    pinned revision must write exactly its events.
    """

    name = "metastore"
    partitioned = False
    aliases: Mapping[str, str] = {}

    def __init__(self, claimed: frozenset[int] = frozenset(),
                 pinned: Mapping[int, tuple[Any, ...]] | None = None) -> None:  # fmt: skip
        self.claimed = claimed
        self.pinned: Mapping[int, tuple[Any, ...]] = pinned or {}

    def bind(self, ops: list[LinOp]) -> MetastoreModel:
        """This model, knowing which revisions the known ops of `ops` claim."""
        claimed = frozenset(r for op in ops if (r := claimed_revision(op)) is not None)
        return MetastoreModel(claimed, self.pinned)

    def init(self) -> State:
        """Revision 0, no keys."""
        return (0, ())

    def step(self, state: Any, op: LinOp) -> State | _Illegal:
        """Apply one metastore operation."""
        revision, entries = state
        f = op.f
        if f == "get":
            entry = _find(entries, op.key)
            got = (None, 0) if entry is None else (entry[0], entry[2])
            if op.known and (
                _out(op, "value") != got[0]
                or _out(op, "mod_revision") not in (None, got[1])
                or _out(op, "revision") not in (None, revision)
            ):
                return ILLEGAL
            return state
        if f == "invoke":
            spec = op.input
            ok = all(_holds(entries, c) for c in spec.get("if", ()))
            writes = spec.get("then" if ok else "else", ())
            after = _apply(revision, entries, writes)
            if op.known and (
                _out(op, "succeeded") not in (None, ok)
                or _out(op, "revision") not in (None, after[0])
            ):
                return ILLEGAL
            return self._unclaimed(op, state, writes, after)
        writes = [{"op": f, "key": op.key, "value": op.input}]
        after = _apply(revision, entries, writes)
        if not op.known:
            return self._unclaimed(op, state, writes, after)
        if op.known and op.output is not None:
            out = op.output if isinstance(op.output, dict) else {"revision": op.output}
            deleted = out.get("deleted")
            if out.get("revision") not in (None, after[0]) or (
                f == "delete" and deleted is not None
                and bool(deleted) != (_find(entries, op.key) is not None)
            ):  # fmt: skip
                return ILLEGAL
        return after

    def _unclaimed(self, op: LinOp, before: Any, writes: Any, after: Any) -> State | _Illegal:
        """`after`, unless an unknown op would produce a revision a known one
        claims, or a pinned one with other events than the record's."""
        if op.known or after[0] == before[0]:
            return after
        if after[0] in self.claimed:
            return ILLEGAL
        recorded = self.pinned.get(after[0])
        if recorded is not None and not _same_events(_events(before[1], writes), recorded):
            return ILLEGAL
        return after

    def is_pure(self, op: LinOp) -> bool:
        """get, and invokes whose branches write nothing."""
        if op.f == "get":
            return True
        if op.f == "invoke" and isinstance(op.input, dict):
            return not op.input.get("then") and not op.input.get("else")
        return False

    def summarize(self, op: LinOp, writers: list[LinOp]) -> Any:
        """Whether anything could write before `op` returns."""
        return bool(writers)

    def viable(self, state: Any, op: LinOp, summary: Any, is_open: IsOpen) -> bool:
        """Revisions only grow: a get that saw revision r is dead once the
        store is past r; with no writers ahead the state must fit now."""
        if not summary:
            return self.step(state, op) is not ILLEGAL
        seen = _out(op, "revision")
        return seen is None or state[0] <= seen

    def erases(self, op: LinOp) -> bool:
        """Never: every write depends on the revision before it."""
        return False

    def always_legal(self, op: LinOp) -> bool:
        """Writes whose output is not checked; we keep it simple: none."""
        return False

    def commutes(self, a: LinOp, b: LinOp) -> bool:
        """Never: every write bumps the one global revision."""
        return False

    def observable(self, op: LinOp, checkers: list[LinOp]) -> bool:
        """Always: every write moves the revision every read reports."""
        return True

    def check_shape(self, op: LinOp) -> str | None:
        """f must be known; invoke takes {if, then, else} of the right shapes."""
        if op.f not in _FS:
            return f"model metastore has no operation {op.f!r} (knows {sorted(_FS)})"
        if op.f == "invoke":
            return _check_invoke(op.input)
        if op.f in ("put", "get", "delete") and op.key is None:
            return f"{op.f} needs a key"
        return None

    def describe(self, state: Any) -> Any:
        """{revision, keys: {key: {value, create_revision, mod_revision, version}}}."""
        revision, entries = state
        keys = {
            str(k): {"value": e[0], "create_revision": e[1], "mod_revision": e[2], "version": e[3]}
            for k, e in entries
        }
        return {"revision": revision, "keys": keys}


def _check_invoke(spec: Any) -> str | None:
    if not isinstance(spec, dict):
        return f"invoke needs input {{if, then, else}}, got {spec!r}"
    for cond in spec.get("if", ()):
        if not isinstance(cond, dict) or "key" not in cond or "value" not in cond:
            return f"invoke condition needs key and value: {cond!r}"
        if cond.get("target") not in _TARGETS or cond.get("op", "eq") not in _CMP:
            return f"invoke condition has a bad target or op: {cond!r}"
    for branch in ("then", "else"):
        for w in spec.get(branch, ()):
            if not isinstance(w, dict) or w.get("op") not in ("put", "delete") or "key" not in w:
                return f"invoke {branch} write must be {{op: put|delete, key[, value]}}: {w!r}"
            if w["op"] == "put" and "value" not in w:
                return f"invoke put needs a value: {w!r}"
    return None
