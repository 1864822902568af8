"""Metastore revisions ranked by the watch streams, so a history that shares
ember's metastore with other writers keeps its revisions in the check.

Theory of operation. ember's control plane writes the same metastore as the
`metastore` workload, so the store's revision jumps by writes the
linearizability model never sees, and checkers/compose.py checked such
histories on values alone. Without revisions a write whose answer was lost
can go anywhere, and about twenty of them put the search out of time and
memory (session 34's drop-replies runs).

The workload's chain of watches on the prefix records every write to it: a
watch from revision s delivers every event under the prefix from s on, in
order (etcd's guarantees G3-G4, which checkers/watches.py judges), and a
progress line at p says every event up to p was sent (ember's, G7). Where
the streams cover revisions 1..E without a gap, the revisions under E that
carry events are exactly the prefix's writes, and a revision's *rank*, how
many of those writes are at or below it, is the revision the model's own
store (the prefix alone) would have had. Every revision an op reports is
replaced by its rank; one past E is left out (unchecked), since the writes
between E and it are not on record. The model then checks revisions again,
and its `claimed` rule (an op of unknown outcome cannot produce a revision
a known op reports) holds as it does for a store of one writer. The
record's events pin more: an op of unknown outcome that the model places
at rank k must have written exactly the events recorded at the k-th write
(`pinned`), so a lost write either shows in the record where it applied or
did not apply before E. That is how etcd's robustness tests read a history
with lost answers (they patch it from a complete watch), here as a rule of
the search rather than an edit of the history.

No ranking when the record cannot be trusted to be complete: no stream
starts at revision 1, two streams disagree about a revision's events, a
stream goes back or delivers outside the prefix, or a known write reports a
revision at or below E that no stream delivered. The check then falls back
to values alone, and says why.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from checkers.history import Operation
from checkers.linearizability.check import freeze
from checkers.linearizability.metastore import ANY_VALUE
from checkers.watches import DELETE, PUT, certain_effects, stream_of

REVISION_TARGETS = ("mod_revision", "create_revision")


@dataclass(frozen=True)
class WatchRecord:
    """What the streams delivered under the prefix for revisions 1..end."""

    end: int
    writes: tuple[int, ...]  # the revisions at or below `end` that carry events, in order
    effects: dict[int, tuple[Any, ...]] = field(default_factory=dict)  # revision -> events

    def rank(self, revision: int) -> int | None:
        """How many prefix writes the store held at `revision`; None past `end`."""
        return None if revision > self.end else bisect.bisect_right(self.writes, revision)

    def pinned(self) -> dict[int, tuple[Any, ...]]:
        """The recorded events of the k-th write, by rank k."""
        return {k: self.effects[rev] for k, rev in enumerate(self.writes, start=1)}


class UnrankableError(ValueError):
    """Why the history's revisions cannot be ranked (the check uses values alone)."""


def record_of(operations: Iterable[Operation], prefix: str) -> WatchRecord:
    """The record of the watches on `prefix` started at a revision; raises UnrankableError."""
    spans: list[tuple[int, int, dict[int, list[Any]]]] = []
    for op in operations:
        spec = op.value if isinstance(op.value, dict) else {}
        start = spec.get("from")
        if op.f != "watch" or spec.get("prefix") != prefix or "key" in spec:
            continue
        stream = stream_of(op.result)
        if not isinstance(start, int) or start < 1 or stream is None or stream.compacted:
            continue  # from the current revision (not on record), or refused: covers nothing
        events: dict[int, list[Any]] = {}
        last = synced = start - 1  # the newest event; the newest revision known complete
        lines: list[tuple[int, Any]] = [*stream.events, *stream.progress]
        lines.sort(key=lambda line: line[0])  # by response: events and progress in arrival order
        for _, line in lines:
            if isinstance(line, int):  # progress: every event up to it was delivered
                synced = max(synced, line)
                continue
            rev, key = line.get("revision"), line.get("key")
            # After the newest revision known complete, or one more event of the
            # last revision (a transaction's), with no progress line between.
            if not (isinstance(rev, int) and rev >= start
                    and (rev > synced or rev == last == synced)):  # fmt: skip
                raise UnrankableError(f"watch op {op.invoke_index}: revision {rev!r} out of order")
            if not (isinstance(key, str) and key.startswith(prefix)):
                raise UnrankableError(f"watch op {op.invoke_index}: {key!r} is outside {prefix!r}")
            events.setdefault(rev, []).append(_event_effect(line))
            last = synced = rev
        spans.append((start, synced, events))
    return _merge(spans)


def _event_effect(item: dict[str, Any]) -> tuple[Any, str, Any]:
    kind = str(item.get("type") or PUT).upper()
    if kind == DELETE:
        return (item["key"], DELETE, None)
    return (item["key"], PUT, freeze(item["value"]) if "value" in item else ANY_VALUE)


def _merge(spans: list[tuple[int, int, dict[int, list[Any]]]]) -> WatchRecord:
    """The gapless cover from revision 1, checking that overlapping streams agree."""
    end = 0
    for start, last, _ in sorted(spans, key=lambda s: s[0]):
        if start > end + 1:
            break
        end = max(end, last)
    if end == 0:
        raise UnrankableError("no watch on the prefix from revision 1 delivered anything")
    # Each revision's events as every stream that delivered them has them; then
    # each stream must have every recorded revision in its cover (by count:
    # what it has is a subset), so a stream that covers a revision without its
    # event disagrees too. Revisions are never walked one by one: a progress
    # line can name any number.
    agreed: dict[int, tuple[Any, ...]] = {}
    for _, _, events in spans:
        for rev, found in events.items():
            mine = tuple(sorted(found, key=repr))
            if rev <= end and agreed.setdefault(rev, mine) != mine:
                raise UnrankableError(f"the watch streams disagree about revision {rev}'s events")
    writes = sorted(agreed)
    for start, last, events in spans:
        lo, hi = bisect.bisect_left(writes, start), bisect.bisect_right(writes, min(last, end))
        if hi - lo != sum(1 for rev in events if start <= rev <= min(last, end)):
            missing = next(rev for rev in writes[lo:hi] if rev not in events)
            raise UnrankableError(f"the watch streams disagree about revision {missing}'s events")
    return WatchRecord(end=end, writes=tuple(writes), effects=agreed)


def ranked_ops(ops: list[Operation], record: WatchRecord) -> list[Operation]:
    """`ops` with every revision replaced by its rank (module doc); raises UnrankableError."""
    return [_ranked(op, record) for op in ops]


def past_record(ops: list[Operation], ranked: list[Operation]) -> int:
    """How many of `ops` reported a revision past the record's end, which
    their ranked twins (`ranked_ops`) therefore leave unchecked."""
    return sum(1 for op, twin in zip(ops, ranked, strict=True)
               if _fewer(op.result, twin.result))  # fmt: skip


def _fewer(result: Any, ranked: Any) -> bool:
    if isinstance(result, dict) and isinstance(ranked, dict):
        return len(ranked) < len(result)
    return result is not None and ranked is None  # a put's revision


def _ranked(op: Operation, record: WatchRecord) -> Operation:
    value = _ranked_conditions(op, record) if op.f == "invoke" else op.value
    result = op.result
    if op.type == "ok":
        writes = bool(certain_effects(op))  # a put takes its own branch
        if op.f == "put" and isinstance(result, int) and not isinstance(result, bool):
            result = _rank_of(op, record, result, write=True)
        elif op.f == "get" and isinstance(result, dict):
            result = _ranked_fields(op, record, result, {"revision": False, "mod_revision": True})
        elif isinstance(result, dict):  # delete, invoke: {revision, deleted | succeeded}
            result = _ranked_fields(op, record, result, {"revision": writes})
    if value is op.value and result is op.result:
        return op
    return msgspec.structs.replace(op, value=value, result=result)


def _ranked_fields(op: Operation, record: WatchRecord, result: dict[str, Any],
                   fields: dict[str, bool]) -> dict[str, Any]:  # fmt: skip
    """`result` with each of `fields` (name -> whether it names a write) ranked,
    or left out when past the record."""
    out = dict(result)
    for name, write in fields.items():
        rev = out.get(name)
        if not isinstance(rev, int) or isinstance(rev, bool) or rev == 0:
            continue  # 0: a key never written (a get's mod_revision)
        rank = _rank_of(op, record, rev, write=write)
        if rank is None:
            del out[name]
        else:
            out[name] = rank
    return out


def _rank_of(op: Operation, record: WatchRecord, revision: int, *, write: bool) -> int | None:
    rank = record.rank(revision)
    if rank is not None and write and revision not in record.effects:
        raise UnrankableError(f"op {op.invoke_index} reports a write at revision {revision}, "
                       f"which no watch stream delivered")  # fmt: skip
    return rank


def _ranked_conditions(op: Operation, record: WatchRecord) -> Any:
    """An invoke's value with revision comparisons moved onto ranks: a revision
    that is not a write goes between the ranks around it, so <, > and = keep
    their answers against every write's rank. A comparison with a revision
    past the record is settled by the op's outcome (`settled`)."""
    spec = op.value
    if not any(compares_revision(c) for c in _conditions(spec)):
        return spec
    past = [
        c for c in _conditions(spec) if compares_revision(c) and record.rank(c["value"]) is None
    ]
    if past:
        settled_op = settled(op, past)
        if settled_op is None:
            how = "of unknown outcome" if op.type == "info" else "not saying which branch ran"
            raise UnrankableError(f"op {op.invoke_index}, {how}, compares with "
                                  f"revision {past[0]['value']}, past the watch record's "
                                  f"{record.end}")  # fmt: skip
        spec = settled_op.value
    conds = []
    for cond in _conditions(spec):
        rank = record.rank(cond["value"]) if compares_revision(cond) else None
        if rank is not None:  # none past the record is left (settled above)
            cond = {**cond, "value": rank if cond["value"] in record.effects else rank + 0.5}
        conds.append(cond)
    return {**spec, "if": conds}


def _conditions(spec: Any) -> list[Any]:
    return list(spec.get("if") or ()) if isinstance(spec, dict) else []


def compares_revision(cond: Any) -> bool:
    """Whether an invoke condition compares a mod or create revision with one
    the store had (0, a key never written, means the same in every store)."""
    if not isinstance(cond, dict) or cond.get("target") not in REVISION_TARGETS:
        return False
    at = cond.get("value")
    return isinstance(at, int) and not isinstance(at, bool) and at > 0


def settled_alone(op: Operation) -> Operation | None:
    """`op` with every revision comparison settled by its outcome, as a check
    of values alone must (no revision there can be ranked); `op` itself when
    it compares none; None when it cannot be settled (`settled`)."""
    blind = [c for c in _conditions(op.value) if compares_revision(c)] if op.f == "invoke" else []
    return settled(op, blind) if blind else op


def _then_ran(op: Operation) -> bool | None:
    """Whether an invoke's then branch ran, as its outcome settles it (see
    `settled`): its `succeeded`; for a lost answer, the branch that writes
    when the other writes nothing; else None."""
    result = op.result if op.type == "ok" and isinstance(op.result, dict) else {}
    succeeded = result.get("succeeded")
    if isinstance(succeeded, bool):
        return succeeded
    if op.type != "info":  # it took effect (or not) without saying which branch ran
        return None
    if not op.value.get("else"):
        return True
    if not op.value.get("then"):
        return False
    return None


def settled(op: Operation, blind: list[Any]) -> Operation | None:
    """An invoke whose conditions `blind` cannot be judged, with its outcome
    standing in for them: succeeded, they held (left out, the rest must hold
    where the search places it); failed, one of them may have failed (they
    become one that never holds, so the else branch runs wherever it is
    placed).

    An outcome that is unknown means either branch could have run, which one
    search state cannot hold, unless one of the branches writes nothing: a
    transaction of unknown outcome may also never take effect (the search
    allows it), and running a branch that writes nothing looks the same to
    every later read. So the op is settled to take the other branch wherever
    it takes effect, and None is returned when both branches write. An op
    that completed without saying which branch ran is not settled: it did
    take effect, so "never" is not open to it."""
    succeeded = _then_ran(op)
    if succeeded is None:
        return None
    spec = op.value
    kept = [c for c in _conditions(spec) if not any(c is b for b in blind)]
    if not succeeded:
        kept.append({"key": blind[0]["key"], "target": "version", "op": "lt", "value": 0})
    return msgspec.structs.replace(op, value={**spec, "if": kept})
