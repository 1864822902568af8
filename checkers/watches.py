"""Watch streams against etcd's documented watch guarantees (G3-G9, docs/invariants.md).

Theory of operation. A watch (declared `watch`) is one operation: invoked
with {"key": k} or {"prefix": p} and "from", the revision it starts at (0
or absent: the store's current one); it completes (ok, or info when cut
off) with what the stream delivered, in one of two shapes:

- a list of events {key, revision, type (PUT/DELETE), value}: the stream's
  events in order, without response boundaries (the shape older runs
  wrote), so atomicity, progress and compaction cannot be judged on it;
- an object {"responses": [...], "compacted": c, "unframed": bool}: each
  response {"revision": header, "events": [...]} in arrival order, a
  progress notification {"revision": p, "progress": true}; `compacted`,
  when the stream was refused or cancelled because its revisions were
  compacted, is the compact revision the store reported; `unframed` says
  the responses are not the store's atomic units (ember's NDJSON stream
  sends one event per line), so atomicity (G5) is not judged.

Against the history's writes (`WriteIndex`), each stream must be:

- G3 ordered and unique: revisions never go back, no (key, revision) twice;
- G4 reliable: every certain write to its range between the first and the
  last revision it delivered was delivered;
- G5 atomic: all events of one revision arrive in one response;
- G6 bounded: nothing before `from`, nothing outside its range, and nothing
  that no write made: an event at a revision an acknowledged write owns
  must be one of that write's effects (`watch-event-mismatch`), and one at
  any other revision must be a key and value some operation that did not
  fail wrote (`watch-phantom-event`); values are compared where events
  carry them; and across every stream, a put's key and value delivered at
  more revisions than operations could have written it is one write applied
  twice (`watch-write-applied-twice`: a write sent again after a lost answer
  and applied again, which client sessions exist to prevent);
- G7 truthful progress: a notification at p follows every certain write
  to its range from `from` to p, no event at or below p comes after it,
  and p is not below a revision the stream already delivered;
- G8 resumable: a watch from r (a resume after the last revision the
  previous one delivered) loses no certain write between r and its first
  event (`watch-resume-gap`);
- G9 compaction: a watch from below a revision compacted (a `compaction`
  op, value {"revision": c}, that completed ok before the watch began, or
  a `compact-kill` fault whose compaction was answered: `fault_compactions`)
  is refused with the compact revision, never served without the events
  the compaction removed; a refusal names a compact revision above the
  watch's start. A member still behind the compaction may serve such a
  watch whole (etcd's members and ember's replicas each compact as they
  apply it): that loses nothing and is no break. The compaction revision
  itself stays watchable, events included: a delete at it that a watch
  from it never delivers is `watch-compaction-lost-event` (etcd-io/etcd#18089,
  in etcd before 3.4.34 / 3.5.16: the tombstone at the compaction revision
  was compacted away).

Certain writes: an ok `put`, an ok `invoke`'s taken branch's puts, and an ok
`delete` whose result says it deleted ({"deleted": n > 0, "revision": r}).
A delete whose result does not say, or a delete inside a transaction, may
have found no key and written nothing: never required, but allowed.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from checkers.api import Anomaly
from checkers.history import Operation

PUT, DELETE = "PUT", "DELETE"
Effect = tuple[Any, str, Any]  # (key, PUT/DELETE, value; None for deletes)


def branch_of(op: Operation) -> list[dict[str, Any]] | None:
    """The writes of an invoke's taken branch; None when the result does not say."""
    if not isinstance(op.value, dict):
        return []
    result = op.result if isinstance(op.result, dict) else {}
    if result.get("succeeded") is None:
        return None
    writes = op.value.get("then" if result["succeeded"] else "else") or []
    return [w for w in writes if isinstance(w, dict)]


def _effects_of(writes: Iterable[dict[str, Any]]) -> list[Effect]:
    return [(w.get("key"), PUT, w.get("value")) if w.get("op", "put") == "put"
            else (w.get("key"), DELETE, None) for w in writes]  # fmt: skip


def possible_effects(op: Operation) -> list[Effect]:
    """Every (key, type, value) `op` may have written, taken branch or not."""
    if op.f == "put":
        return [(op.key, PUT, op.value)]
    if op.f == "delete":
        return [(op.key, DELETE, None)]
    if op.f == "invoke" and isinstance(op.value, dict):
        branch = branch_of(op)
        if branch is not None and op.type == "ok":
            return _effects_of(branch)
        both = (op.value.get("then") or []) + (op.value.get("else") or [])
        return _effects_of(w for w in both if isinstance(w, dict))
    return []


def certain_effects(op: Operation) -> list[Effect]:
    """What an ok `op` certainly wrote (module doc: certain writes)."""
    if op.type != "ok":
        return []
    if op.f == "put":
        return [(op.key, PUT, op.value)]
    if op.f == "delete":
        deleted = op.result.get("deleted") if isinstance(op.result, dict) else None
        return [(op.key, DELETE, None)] if isinstance(deleted, int) and deleted > 0 else []
    if op.f == "invoke":
        branch = branch_of(op) or []
        if not any(w.get("op", "put") == "put" for w in branch):
            return []  # only deletes: each may have found no key
        out: dict[Any, Effect] = {}
        for key, kind, value in _effects_of(branch):
            if kind == PUT:
                out[key] = (key, kind, value)
            else:
                out.pop(key, None)  # deleted later in the same transaction, if it existed
        return list(out.values())
    return []


@dataclass
class WriteIndex:
    """The history's writes, as the watch rules ask for them."""

    owners: dict[int, tuple[Operation, list[Effect]]] = field(default_factory=dict)
    certain: list[tuple[int, Effect, int]] = field(default_factory=list)  # sorted by revision
    written: dict[Any, list[tuple[str, Any]]] = field(default_factory=dict)
    compactions: list[tuple[int, int]] = field(default_factory=list)  # (complete index, rev)

    @classmethod
    def build(
        cls,
        revised: Iterable[tuple[Operation, int]],
        operations: Iterable[Operation] = (),
        compactions: Iterable[Operation] = (),
    ) -> WriteIndex:
        """From (ok op, revision) pairs, every operation, and the compaction ops."""
        index = cls()
        for op, rev in revised:
            sure = certain_effects(op)
            if sure:
                index.owners[rev] = (op, possible_effects(op))
                index.certain += [(rev, e, op.invoke_index) for e in sure]
        index.certain.sort(key=lambda c: c[0])
        for op in operations:
            if op.type != "fail":
                for key, kind, value in possible_effects(op):
                    index.written.setdefault(key, []).append((kind, value))
        for op in compactions:
            at = op.value.get("revision") if isinstance(op.value, dict) else None
            if op.type == "ok" and isinstance(at, int) and op.complete_index is not None:
                index.compactions.append((op.complete_index, at))
        return index

    def compacted_before(self, index: int) -> int:
        """The highest revision compacted by operations completed before `index`."""
        return max((rev for done, rev in self.compactions if done < index), default=0)

    def compaction_points(self, index: int) -> set[int]:
        """The revisions compactions completed before `index` compacted at."""
        return {rev for done, rev in self.compactions if done < index}


@dataclass
class Stream:
    """What one watch delivered: (response number, event) pairs, progress
    notifications (response number, revision), and how it ended."""

    events: list[tuple[int, dict[str, Any]]]
    progress: list[tuple[int, int]]
    framed: bool
    compacted: int | None = None


def stream_of(result: Any) -> Stream | None:
    """The stream a watch's result describes; None if it is neither shape."""
    if isinstance(result, list):
        return Stream([(i, e) for i, e in enumerate(result)], [], framed=False)
    if not isinstance(result, dict) or not isinstance(result.get("responses", []), list):
        return None
    events, progress = [], []
    for i, resp in enumerate(result.get("responses") or []):
        if not isinstance(resp, dict):
            return None
        if resp.get("progress") and isinstance(resp.get("revision"), int):
            progress.append((i, int(resp["revision"])))
        events += [(i, e) for e in resp.get("events") or []]
    compacted = result.get("compacted")
    return Stream(events, progress, framed=not result.get("unframed"),
                  compacted=compacted if isinstance(compacted, int) else None)  # fmt: skip


def covers(spec: dict[str, Any], key: Any) -> bool:
    """Whether a watch of `spec` ({"key"} or {"prefix"}) sees `key`."""
    if "key" in spec:
        return bool(key == spec["key"])
    prefix = spec.get("prefix", "")
    return isinstance(key, str) and isinstance(prefix, str) and key.startswith(prefix)


class _Judge:
    """One watch's rules (module doc); `found` collects what breaks them."""

    def __init__(self, watch: Operation, index: WriteIndex) -> None:
        self.watch, self.index = watch, index
        self.spec = watch.value if isinstance(watch.value, dict) else {}
        self.start = int(self.spec.get("from") or 0)
        self.found: list[Anomaly] = []

    def flag(self, kind: str, message: str, revisions: list[int], ops: list[int] | None = None,
             ) -> None:  # fmt: skip
        self.found.append(Anomaly(
            kind=kind, message=f"watch op {self.watch.invoke_index}: {message}",
            ops=[self.watch.invoke_index, *(ops or [])], revisions=revisions,
            time=self.watch.invoke_time))  # fmt: skip

    def judge(self, stream: Stream) -> None:
        delivered: dict[tuple[Any, int], int] = {}  # (key, revision) -> response number
        responses_of: dict[int, set[int]] = {}
        last = None
        for resp, item in stream.events:
            key, rev = item.get("key"), item.get("revision")
            if not isinstance(rev, int):
                self.flag("watch-malformed", f"event {item!r} has no integer revision", [])
                return
            if rev < self.start:
                self.flag("watch-before-start", f"delivered {rev} before from={self.start}", [rev])
            if last is not None and rev < last:
                self.flag("watch-revision-went-back", f"delivered {rev} after {last}", [last, rev])
            if (key, rev) in delivered:
                self.flag("watch-duplicate", f"delivered {key!r}@{rev} twice", [rev])
            if not covers(self.spec, key):
                self.flag("watch-outside-range", f"delivered {key!r}, outside {self.spec!r}", [rev])
            self._made(key, rev, item)
            delivered.setdefault((key, rev), resp)
            responses_of.setdefault(rev, set()).add(resp)
            last = rev if last is None else max(last, rev)
        if stream.framed:
            for rev, resps in sorted(responses_of.items()):
                if len(resps) > 1:
                    self.flag("watch-split-revision", f"revision {rev}'s events came in "
                              f"{len(resps)} responses, not one", [rev])  # fmt: skip
        self._progress(stream, delivered)
        self._compaction(stream)
        if last is not None:
            self._gaps(delivered, min(r for _, r in delivered), last, stream)

    def _made(self, key: Any, rev: int, item: dict[str, Any]) -> None:
        """G6: the event is one a write made (its value judged where it carries one)."""
        kind = str(item.get("type") or PUT).upper()

        def matches(t: str, v: Any) -> bool:
            return t == kind and (t == DELETE or "value" not in item or v == item["value"])

        owner = self.index.owners.get(rev)
        if owner is not None:
            op, effects = owner
            if not any(k == key and matches(t, v) for k, t, v in effects):
                self.flag("watch-event-mismatch", f"delivered {kind} {key!r}={item.get('value')!r}"
                          f"@{rev}, but revision {rev} is op {op.invoke_index}'s ({op.f}), which "
                          "wrote nothing of the kind", [rev], [op.invoke_index])  # fmt: skip
            return
        if not any(matches(t, v) for t, v in self.index.written.get(key, [])):
            self.flag("watch-phantom-event", f"delivered {kind} {key!r}={item.get('value')!r}"
                      f"@{rev}, which no operation wrote", [rev])  # fmt: skip

    def _missing(self, delivered: dict[tuple[Any, int], int], lo: int, hi: int,
                 before: int | None = None) -> list[tuple[int, Any, int]]:  # fmt: skip
        """Certain writes to the range in [lo, hi] not delivered (by response `before`)."""
        certain = self.index.certain
        a = bisect.bisect_left(certain, lo, key=lambda c: c[0])
        b = bisect.bisect_right(certain, hi, key=lambda c: c[0])
        out = []
        for rev, (key, _, _), op_index in certain[a:b]:
            got = delivered.get((key, rev))
            if covers(self.spec, key) and (got is None or (before is not None and got > before)):
                out.append((rev, key, op_index))
        return out

    def _gaps(self, delivered: dict[tuple[Any, int], int], first: int, last: int,
              stream: Stream) -> None:  # fmt: skip
        """G4 between the first and last delivered, G8 between `from` and the
        first; G9 instead for what a compaction made before the watch took:
        below its revision (served silently, not refused) or at it."""
        compacted = self.index.compacted_before(self.watch.invoke_index)
        points = self.index.compaction_points(self.watch.invoke_index)
        lo = self.start or first
        for rev, key, op in self._missing(delivered, lo, last):
            if rev < compacted and stream.compacted is None:
                self.flag("watch-compacted-not-refused", f"from={self.start} was compacted "
                          f"(at {compacted}) before the watch began, yet it was served "
                          f"without {key!r}@{rev}", [rev, compacted], [op])  # fmt: skip
            elif rev in points:
                self.flag("watch-compaction-lost-event", f"missed {key!r}@{rev}, the revision "
                          f"a compaction kept before the watch began (the defect of "
                          f"etcd-io/etcd#18089, fixed in etcd 3.4.34 and 3.5.16)", [rev],
                          [op])  # fmt: skip
            elif rev < first:
                self.flag("watch-resume-gap", f"started at {self.start} but its first "
                          f"event is @{first}: missed {key!r}@{rev}", [rev], [op])  # fmt: skip
            else:
                self.flag("watch-gap", f"missed {key!r}@{rev}", [rev], [op])

    def _progress(self, stream: Stream, delivered: dict[tuple[Any, int], int]) -> None:
        """G7: a progress notification at p claims every event up to p delivered."""
        # A watch of "now" (no start) owes nothing before its first event.
        lo = self.start or min((r for _, r in delivered), default=None)
        last = max((r for _, r in delivered), default=None)
        for resp, p in stream.progress:
            missing = [] if lo is None else self._missing(delivered, lo, p, before=resp)
            for rev, key, op in missing:
                if (key, rev) not in delivered and last is not None and rev <= last:
                    continue  # never delivered, before the last event: a gap rule's (G4/G8/G9)
                self.flag("watch-progress-ahead", f"progress at {p} before {key!r}@{rev} was "
                          "delivered", [p, rev], [op])  # fmt: skip
            late = [
                (r, e.get("key"))
                for n, e in stream.events
                if n > resp and isinstance(r := e.get("revision"), int) and r <= p
            ]
            for rev, key in late:
                self.flag("watch-progress-ahead", f"delivered {key!r}@{rev} after a progress "
                          f"notification at {p}", [p, rev])  # fmt: skip
            before = [r for n, e in stream.events
                      if n < resp and isinstance(r := e.get("revision"), int)]  # fmt: skip
            if before and p < max(before):  # etcd-io/etcd#15220 was this
                self.flag("watch-progress-behind", f"progress at {p} after the stream had "
                          f"delivered revision {max(before)}", [p, max(before)])  # fmt: skip

    def _compaction(self, stream: Stream) -> None:
        """G9's other half: a refusal names a compact revision above the start."""
        if stream.compacted is not None and self.start and self.start >= stream.compacted:
            self.flag("watch-refused-wrongly", f"refused as compacted at {stream.compacted}, "
                      f"but it starts at {self.start}", [stream.compacted])  # fmt: skip


def fault_compactions(operations: Iterable[Operation]) -> list[Operation]:
    """The compactions the nemesis's `compact-kill` faults made and saw
    answered (`nemesis.maintenance`), as compaction ops at their revision,
    completed when the fault did (after the answer: a safe bound). One whose
    answer the kill cut off is not assumed to have happened."""
    out = []
    for op in operations:
        done = op.result.get("maintenance") if isinstance(op.result, dict) else None
        if op.f != "compact-kill" or op.type != "ok" or not isinstance(done, dict):
            continue
        if done.get("action") != "compact" or done.get("answered") is not True:
            continue
        answer = done.get("answer")
        at = answer.get("compact_revision") if isinstance(answer, dict) else None
        at = done.get("revision") if at is None else at
        if isinstance(at, int) and not isinstance(at, bool):
            out.append(msgspec.structs.replace(op, value={"revision": at}))
    return out


def check_applications(watches: Iterable[Operation],
                       operations: Iterable[Operation]) -> list[Anomaly]:  # fmt: skip
    """G6 across streams: each put's (key, value) at no more revisions than
    operations could have written it (module doc). Each op applies once, and
    counts once however many of its branches write the pair; a pair no op
    wrote is the phantom rule's."""
    from checkers.linearizability.check import freeze  # hashable values, compared with ==

    at: dict[tuple[Any, Any], dict[int, int]] = {}  # (key, value) -> revision -> a watch
    for watch in watches:
        stream = stream_of(watch.result)
        for _, item in stream.events if stream is not None else ():
            rev = item.get("revision")
            if str(item.get("type") or PUT).upper() == PUT and "value" in item \
                    and isinstance(rev, int):  # fmt: skip
                pair = (item.get("key"), freeze(item["value"]))
                at.setdefault(pair, {}).setdefault(rev, watch.invoke_index)
    writers: dict[tuple[Any, Any], list[int]] = {}
    for op in operations:
        if op.type != "fail":
            pairs = {(k, freeze(v)) for k, t, v in possible_effects(op) if t == PUT}
            for pair in pairs & at.keys():
                writers.setdefault(pair, []).append(op.invoke_index)
    out = []
    # The plainest first: a pair one op wrote, delivered twice.
    for (key, value), revisions in sorted(at.items(), key=lambda kv: (
            len(writers.get(kv[0], ())), min(kv[1]))):  # fmt: skip
        ops = writers.get((key, value), [])
        if ops and len(revisions) > len(ops):
            revs = sorted(revisions)
            out.append(Anomaly(
                kind="watch-write-applied-twice",
                message=f"{key!r}={value!r} was delivered at revisions {revs}, but only "
                        f"{len(ops)} operation(s) wrote it ({ops[:5]}): a write applied twice",
                ops=[*ops[:5], *sorted(set(revisions.values()))], revisions=revs))  # fmt: skip
    return out


def check_watch(watch: Operation, index: WriteIndex) -> list[Anomaly]:
    """One watch stream's rules (module doc)."""
    stream = stream_of(watch.result)
    judge = _Judge(watch, index)
    if stream is None:
        judge.flag("watch-malformed", f"result {str(watch.result)[:80]!r} is no watch stream", [])
    else:
        judge.judge(stream)
    return judge.found
