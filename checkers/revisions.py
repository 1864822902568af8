"""Revision ordering of metastore operations and watch streams.

Theory of operation. The metastore has one global revision, bumped once by
every write; its client reports the revision with each completion. Where it
reports it is the history's declaration (checkers/revision_fields.py:
test.json's `revisions`; ember's metastore workload declares the model's
output, an int for put/delete, a dict with `revision` for get/invoke;
docs/models.md), never a guess from a value's type: a kv history whose puts
complete with the integer written has no revisions. A history that declares
none gets no history checks here. Over the declared operations:

- a write (put, or an invoke whose taken branch writes) has a revision
  greater than every revision observed by an operation (hence every write)
  that completed before it was invoked, and no two writes share a revision;
- no operation observes a revision older than one an operation that
  completed before it was invoked observed (no stale read).

Real time is the history's index order. A sweep over operations by invoke
index, with completions fed in by complete index, keeps the highest revision
completed so far: O(n log n).

Watches (declared `watch`; ember's `f: "watch"`) are judged stream by stream
against etcd's watch guarantees in checkers/watches.py, with the
compactions (declared `compaction`) the history made.

A snapshot read (declared `snapshot`; ember's `f: "range"`) completes with {"at": r, "kvs": [{key,
value, mod_revision}]}: the keys as they were at revision r. It must
reflect every acknowledged put with a revision at or below r: no key shows
a mod revision above r, or below an acknowledged put to it at or below r
(a missed write), and a key whose mod revision is an acknowledged put's
shows that put's value.

Deletes (a `delete`, or a delete inside an invoke) write only when the key
existed, which the result does not say, so they are never required of a
watch nor counted as writes: a delete op is ordered as a read.

The assignment-key rules (rebalance) are in checkers/assignments.py and run
here too when the run has audit events.
"""

from __future__ import annotations

import heapq
from typing import Any

from checkers.api import Anomaly, CheckContext, CheckerResult, verdict
from checkers.assignments import check_assignments
from checkers.history import Operation
from checkers.revision_fields import RevisionFields, parse
from checkers.watches import WriteIndex, check_applications, check_watch, fault_compactions


def revision_of(op: Operation, fields: RevisionFields | None) -> int | None:
    """The revision an ok operation reports where the history declares one, or None."""
    return None if fields is None else fields.revision_of(op)


def written_values(op: Operation) -> dict[Any, Any]:
    """The keys an operation certainly wrote, with the values (puts only:
    see the module doc on deletes), in write order."""
    if op.f == "put":
        return {op.key: op.value}
    if op.f == "invoke" and isinstance(op.value, dict):
        branch = "then"
        if isinstance(op.result, dict) and op.result.get("succeeded") is False:
            branch = "else"
        out: dict[Any, Any] = {}
        for w in op.value.get(branch) or []:
            if isinstance(w, dict) and w.get("op", "put") == "put":
                out[w.get("key")] = w.get("value")
            elif isinstance(w, dict):
                out.pop(w.get("key"), None)  # a later delete in the same invoke
        return out
    return {}


def written_keys(op: Operation) -> list[Any]:
    """The keys an operation certainly wrote (empty for reads and no-op invokes)."""
    return list(written_values(op))


class RevisionChecker:
    """Checks revision ordering, watches and (with audit events) assignments."""

    name = "revisions"

    def check(self, ctx: CheckContext) -> CheckerResult:
        """Valid when no ordering rule is broken; figures count what was checked.

        Raises DeclarationError (the composer's unknown, naming it) on a
        malformed declaration."""
        fields = parse(ctx.setting("revisions"))
        ops = [(op, rev) for op in ctx.operations if (rev := revision_of(op, fields)) is not None]
        anomalies = check_order(ops)
        kinds = [(op, fields.kind(op)) for op in ctx.operations] if fields else []
        watches = [op for op, k in kinds if k == "watch" and op.result is not None]
        writes = sorted(((op, rev) for op, rev in ops if written_keys(op)), key=lambda w: w[1])
        compactions = [op for op, k in kinds if k == "compaction"]
        compactions += fault_compactions(ctx.operations)  # the nemesis's, where answered
        index = WriteIndex.build(ops, ctx.operations, compactions)
        for watch in watches:
            anomalies.extend(check_watch(watch, index))
        anomalies.extend(check_applications(watches, ctx.operations))
        snaps = [op for op, k in kinds if k == "snapshot" and op.type == "ok"]
        anomalies.extend(check_snapshots(snaps, writes))
        figures: dict[str, Any] = {"declared": fields is not None, "ops": len(ops),
                                   "writes": len(writes), "watches": len(watches),
                                   "compactions": len(index.compactions),
                                   "snapshot_reads": len(snaps)}  # fmt: skip
        if ctx.audit:
            found, assignment_figures = check_assignments(ctx.audit)
            anomalies.extend(found)
            figures["assignments"] = assignment_figures
        return verdict(self.name, anomalies, **figures)


def check_order(ops: list[tuple[Operation, int]]) -> list[Anomaly]:
    """The real-time rules over (op, revision) pairs; see the module doc."""
    anomalies: list[Anomaly] = []
    by_rev: dict[int, Operation] = {}
    completions = [(op.complete_index, i) for i, (op, _) in enumerate(ops)]
    heapq.heapify(completions)
    best: tuple[int, Operation] | None = None  # highest revision completed so far
    for op, rev in sorted(ops, key=lambda pair: pair[0].invoke_index):
        while completions and (completions[0][0] or 0) < op.invoke_index:
            done, done_rev = ops[heapq.heappop(completions)[1]]
            if best is None or done_rev > best[0]:
                best = (done_rev, done)
        if written_keys(op):
            twin = by_rev.setdefault(rev, op)
            if twin is not op:
                anomalies.append(_pair("duplicate-write-revision", "shares", twin, op, rev, rev))
            # A write bumps the revision past everything already observed.
            if best is not None and rev <= best[0]:
                anomalies.append(
                    _pair("write-revision-not-increasing", "is not above", best[1], op,
                          best[0], rev)
                )  # fmt: skip
        elif best is not None and rev < best[0]:
            anomalies.append(_pair("stale-revision", "is older than", best[1], op, best[0], rev))
    return anomalies


def _pair(kind: str, verb: str, first: Operation, then: Operation, r1: int, r2: int) -> Anomaly:
    return Anomaly(
        kind=kind,
        message=f"op {then.invoke_index} ({then.f}, revision {r2}) {verb} revision {r1} of "
        f"op {first.invoke_index} ({first.f}), which completed before it was invoked",
        ops=[first.invoke_index, then.invoke_index],
        revisions=[r1, r2],
        time=then.invoke_time,
    )


def check_snapshots(snaps: list[Operation], writes: list[tuple[Operation, int]]) -> list[Anomaly]:
    """Snapshot reads against the acknowledged puts (see the module doc)."""
    by_key: dict[Any, list[tuple[int, Any, int]]] = {}
    for op, rev in writes:
        for key, value in written_values(op).items():
            by_key.setdefault(key, []).append((rev, value, op.invoke_index))
    found: list[Anomaly] = []
    for snap in snaps:
        result = snap.result if isinstance(snap.result, dict) else {}
        at = result.get("at")
        if not isinstance(at, int):
            continue
        seen = {kv.get("key"): kv for kv in result.get("kvs") or [] if isinstance(kv, dict)}
        for key, kv in seen.items():
            mod = kv.get("mod_revision")
            if not isinstance(mod, int):
                continue
            if mod > at:
                found.append(
                    _snap(
                        snap,
                        "snapshot-from-future",
                        f"{key!r} has mod revision {mod} above the read's revision {at}",
                        [mod, at],
                    )
                )
            for rev, value, index in by_key.get(key, []):
                if mod < rev <= at:
                    found.append(
                        _snap(
                            snap,
                            "snapshot-missed-write",
                            f"{key!r} at mod revision {mod} misses the put at {rev}",
                            [mod, rev],
                            index,
                        )
                    )
                elif rev == mod and kv.get("value") != value:
                    found.append(
                        _snap(
                            snap,
                            "snapshot-wrong-value",
                            f"{key!r}@{mod} reads {kv.get('value')!r}, the put wrote {value!r}",
                            [mod],
                            index,
                        )
                    )
    return found


def _snap(
    snap: Operation, kind: str, message: str, revisions: list[int], other: int | None = None
) -> Anomaly:
    ops = [snap.invoke_index] + ([other] if other is not None else [])
    return Anomaly(
        kind=kind,
        message=f"snapshot read op {snap.invoke_index}: {message}",
        ops=ops,
        revisions=revisions,
        time=snap.invoke_time,
    )
