"""The metastore's state: a revisioned key-value map (pure, no IO).

Theory of operation
-------------------
One global `revision` starts at 0. A command that changes anything bumps it
exactly once, whatever the number of keys it writes; a command that changes
nothing (a read, a failed branch with no writes, a delete of an absent key)
leaves it alone. Each live key keeps `create_revision` (when it last came
into existence), `mod_revision` (its last write) and `version` (writes
since it was created).

Every change is also appended to `events`, one per key written, carrying the
key's previous record. That one list serves three needs:

- watches: the events with revision >= `from`, in log order, which is
  revision order with no gaps or duplicates, on every replica alike;
- reads at a past revision r: undo the events above r, newest first;
- compaction at c: drop the events below c. After it a watch from below c,
  or a read below c, raises `Compacted` naming both; a watch from c itself
  is served, as etcd serves it (its events at c are kept).

Commands and results use the JSON shapes of docs/models.md ("metastore"), so
the linearizability model checks what the API answers without translation.
An invoke is `{if: [cond], then: [write], else: [write]}`; the multi-branch
form `{branches: [{if, then}], else}` takes the first branch whose
conditions all hold (the trigger invoke of the rebalance design needs it).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from typing import Any

import msgspec

CMP: dict[str, Callable[[Any, Any], bool]] = {
    "eq": operator.eq,
    "ne": operator.ne,
    "lt": operator.lt,
    "gt": operator.gt,
}
TARGETS = ("exists", "value", "create_revision", "mod_revision", "version")


class MetastoreError(ValueError):
    """A command is malformed; the message names what is wrong."""


class Compacted(MetastoreError):  # noqa: N818 -- reads as the state it reports
    """The revision asked for was compacted away."""

    def __init__(self, revision: int, compact_revision: int) -> None:
        super().__init__(
            f"revision {revision} is compacted (compacted up to {compact_revision}; "
            f"read at or watch from it or above)"
        )
        self.revision = revision
        self.compact_revision = compact_revision


class Record(msgspec.Struct, frozen=True, array_like=True):
    """One live key."""

    value: Any
    create_revision: int
    mod_revision: int
    version: int


class Event(msgspec.Struct, frozen=True, array_like=True):
    """One key written at one revision (`record` None: deleted)."""

    revision: int
    key: str
    record: Record | None
    prev: Record | None

    def to_json(self) -> dict[str, Any]:
        """The event as a watch delivers it."""
        rec = self.record
        return {
            "key": self.key,
            "revision": self.revision,
            "type": "put" if rec is not None else "delete",
            "value": rec.value if rec is not None else None,
            "version": rec.version if rec is not None else 0,
            "create_revision": rec.create_revision if rec is not None else 0,
        }


def record_json(key: str, rec: Record | None) -> dict[str, Any]:
    """A key's record as the API shows it (zeros and null when absent)."""
    if rec is None:
        return {"key": key, "value": None, "create_revision": 0, "mod_revision": 0, "version": 0}
    return {
        "key": key,
        "value": rec.value,
        "create_revision": rec.create_revision,
        "mod_revision": rec.mod_revision,
        "version": rec.version,
    }


class MetaState(msgspec.Struct, kw_only=True):
    """The whole replicated state (what a snapshot carries)."""

    revision: int = 0
    compact_revision: int = 0
    kv: dict[str, Record] = msgspec.field(default_factory=dict)
    events: list[Event] = msgspec.field(default_factory=list)

    # -- reads ---------------------------------------------------------------

    def get(self, key: str) -> dict[str, Any]:
        """`{value, mod_revision, revision, ...}` of one key now (the model's get)."""
        return {**record_json(key, self.kv.get(key)), "revision": self.revision}

    def range(
        self, *, key: str | None = None, prefix: str | None = None, revision: int | None = None
    ) -> dict[str, Any]:
        """Every live key equal to `key` or under `prefix` at `revision` (default now)."""
        kv = self.kv if revision is None or revision >= self.revision else self._at(revision)
        keys = sorted(k for k in kv if _covers(k, key, prefix))
        at = self.revision if revision is None else min(revision, self.revision)
        return {"revision": at, "kvs": [record_json(k, kv[k]) for k in keys]}

    def _at(self, revision: int) -> dict[str, Record]:
        if revision < self.compact_revision:
            raise Compacted(revision, self.compact_revision)
        kv = dict(self.kv)
        for ev in reversed(self.events):
            if ev.revision <= revision:
                break
            if ev.prev is None:
                kv.pop(ev.key, None)
            else:
                kv[ev.key] = ev.prev
        return kv

    def watch_events(
        self, start: int, *, key: str | None = None, prefix: str | None = None
    ) -> list[Event]:
        """Events on `key` / under `prefix` with revision >= `start`, in order."""
        if start < self.compact_revision:
            raise Compacted(start, self.compact_revision)
        lo = _first_at_or_above(self.events, start)
        return [ev for ev in self.events[lo:] if _covers(ev.key, key, prefix)]

    # -- writes --------------------------------------------------------------

    def put(self, key: str, value: Any) -> int:
        """Write one key; returns the revision after."""
        self._commit([{"op": "put", "key": key, "value": value}])
        return self.revision

    def delete(self, key: str) -> int:
        """Delete one key; returns the revision after (unchanged if it was absent)."""
        self._commit([{"op": "delete", "key": key}])
        return self.revision

    def invoke(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Run an invoke atomically: `{succeeded, branch, revision}`.

        `branch` is the index of the branch taken, -1 for `else`; `succeeded`
        is whether the first branch was taken (the single-branch meaning).
        """
        branches = invoke_branches(spec)
        taken = -1
        for i, (conds, _) in enumerate(branches):
            if all(self.holds(c) for c in conds):
                taken = i
                break
        writes = branches[taken][1] if taken >= 0 else list(spec.get("else") or [])
        self._commit(writes)
        return {"succeeded": taken == 0, "branch": taken, "revision": self.revision}

    def holds(self, cond: dict[str, Any]) -> bool:
        """Whether one condition holds now (an absent value compares false)."""
        rec = self.kv.get(cond["key"])
        target = cond["target"]
        actual: Any
        if target == "exists":
            actual = rec is not None
        elif rec is None:
            actual = None if target == "value" else 0
        else:
            actual = getattr(rec, target)
        try:
            return CMP[cond.get("op", "eq")](actual, cond["value"])
        except TypeError:
            return False

    def compact(self, revision: int) -> int:
        """Forget history below `revision`; returns the compact revision."""
        if revision > self.revision:
            raise MetastoreError(f"cannot compact at {revision}: current revision {self.revision}")
        if revision <= self.compact_revision:
            return self.compact_revision
        lo = _first_at_or_above(self.events, revision)
        del self.events[:lo]
        self.compact_revision = revision
        return revision

    def _commit(self, writes: Iterable[dict[str, Any]]) -> None:
        # Writes apply in order (two puts to one key bump its version twice,
        # as the model says), but a watch sees one event per key per
        # revision: the key's final record, with its record before the invoke.
        rev = self.revision + 1
        first: dict[str, Record | None] = {}
        changed = False
        for w in writes:
            key = w["key"]
            prev = self.kv.get(key)
            if w["op"] == "put":
                self.kv[key] = Record(
                    w["value"],
                    prev.create_revision if prev is not None else rev,
                    rev,
                    prev.version + 1 if prev is not None else 1,
                )
            elif prev is not None:
                del self.kv[key]
            else:
                continue
            first.setdefault(key, prev)
            changed = True
        if changed:
            self.revision = rev
            self.events.extend(Event(rev, k, self.kv.get(k), p) for k, p in first.items())


def _covers(k: str, key: str | None, prefix: str | None) -> bool:
    if key is not None:
        return k == key
    return k.startswith(prefix or "")


def _first_at_or_above(events: list[Event], revision: int) -> int:
    lo, hi = 0, len(events)
    while lo < hi:
        mid = (lo + hi) // 2
        if events[mid].revision < revision:
            lo = mid + 1
        else:
            hi = mid
    return lo


def invoke_branches(spec: Any) -> list[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """The (conditions, writes) branches of an invoke spec, checked.

    MetastoreError names the first malformed part.
    """
    if not isinstance(spec, dict):
        raise MetastoreError(f"invoke needs an object {{if, then, else}}, got {spec!r}")
    if "branches" in spec:
        raw = spec["branches"]
        if not isinstance(raw, list) or not raw:
            raise MetastoreError("invoke branches must be a non-empty list of {if, then}")
    else:
        raw = [{"if": spec.get("if", []), "then": spec.get("then", [])}]
    out = []
    for branch in raw:
        if not isinstance(branch, dict):
            raise MetastoreError(f"invoke branch must be an object {{if, then}}: {branch!r}")
        conds = branch.get("if") or []
        writes = branch.get("then") or []
        _check_conds(conds)
        _check_writes(writes)
        out.append((list(conds), list(writes)))
    _check_writes(spec.get("else") or [])
    return out


def _check_conds(conds: Any) -> None:
    if not isinstance(conds, list):
        raise MetastoreError(f"invoke conditions must be a list: {conds!r}")
    for c in conds:
        if not isinstance(c, dict) or not isinstance(c.get("key"), str) or "value" not in c:
            raise MetastoreError(f"a condition needs a string key and a value: {c!r}")
        if c.get("target") not in TARGETS:
            raise MetastoreError(f"condition target must be one of {', '.join(TARGETS)}: {c!r}")
        if c.get("op", "eq") not in CMP:
            raise MetastoreError(f"condition op must be one of {', '.join(CMP)}: {c!r}")


def _check_writes(writes: Any) -> None:
    if not isinstance(writes, list):
        raise MetastoreError(f"invoke writes must be a list: {writes!r}")
    for w in writes:
        if not isinstance(w, dict) or w.get("op") not in ("put", "delete"):
            raise MetastoreError(f"a write must be {{op: put|delete, key[, value]}}: {w!r}")
        if not isinstance(w.get("key"), str):
            raise MetastoreError(f"a write needs a string key: {w!r}")
        if w["op"] == "put" and "value" not in w:
            raise MetastoreError(f"a put needs a value: {w!r}")
