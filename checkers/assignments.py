"""Rebalance invariants over the assignment keys and rebalance requests.

Theory of operation. Each zone partition has the metastore keys
`zone.<id>.assignments.{stable,pending,planned,change,cancel}` (an event may
name them in full or by the last part). Nodes report every write to them as
an `assignments-written` audit event: {zone, partition, revision, keys:
{key: {old, new}}} and optionally `group` (the partition's Raft group,
`part-<partition>` when absent). Values: an assignment is a list of node
ids (or {"peers": [...]}), empty or null meaning absent; `change` is a
number (the trigger's revision or timestamp); `cancel` is
{"old": [...], "new": [...], "pending_revision": int}.

The checker dedupes writes by (zone, partition, revision) and replays them
in revision order, rebuilding each partition's keys, and checks:

- per node and process start, the revisions it reports for a partition never
  go back (a restart replays the metastore log and reports again);
- two reports of one revision agree; each write's `old` is the previous
  `new` of that key (no lost or reordered write);
- planned exists only while pending exists;
- the change trigger only increases;
- stable moves to a new peer set only after the partition's Raft group
  committed the stable configuration with exactly those peers (by `wall`
  time, when both events carry one);
- a cancel is written only while pending was last written at the revision
  the cancel names;
- stable switches only to pending's peers, or to a side of the cancel in
  force (M1); the write that clears a cancel clears pending too (or moves
  planned into it), and no cancel outlives its pending (M5).

M2 (stable moves forward) and M7 (membership containment), which place
writes in time against the groups' commits, are in checkers/membership.py.

From `rebalance-request` / `cancel-request` events: a request applied by a
primary is never older than its last seen revision, which never goes back;
and a cancel never reverts (outcome `cancelled`) a group that had already
committed the cancelled change's new configuration. "Already" counts only
commits of that peer set between the cancelled pending's write and the
cancel (by `wall`): the pending named by the event's `pending_revision`,
else the newest pending write of that peer set before the cancel. A group
that held those peers in some earlier, finished change was not reverted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from checkers.api import Anomaly
from checkers.authority import check_authority, check_primaries
from checkers.membership import check_containment, check_stable_order

Audit = dict[str, list[dict[str, Any]]]
PartitionKey = tuple[Any, Any]  # (zone, partition)
Commits = dict[str, list[tuple[tuple[str, ...], Any]]]  # group -> [(stable peers, wall)]


def peers_of(value: Any) -> tuple[str, ...] | None:
    """An assignment value as a sorted peer tuple; None when absent or empty."""
    if isinstance(value, dict):
        value = value.get("peers")
    if not value or not isinstance(value, list | tuple):
        return None
    return tuple(sorted(str(p) for p in value))


def _short(key: str) -> str:
    return key.rsplit(".", 1)[-1]


def _flag(out: list[Anomaly], kind: str, message: str, *events: dict[str, Any]) -> None:
    revisions = [ev["revision"] for ev in events if isinstance(ev.get("revision"), int)]
    when = events[-1].get("wall") if events else None
    out.append(
        Anomaly(kind=kind, message=message, events=list(events), revisions=revisions, time=when)
    )


def _events(audit: Audit, kinds: tuple[str, ...]) -> Iterator[tuple[str, dict[str, Any]]]:
    for node in sorted(audit):
        for ev in audit[node]:
            if ev.get("kind") in kinds:
                yield node, ev


def committed_stable(audit: Audit) -> Commits:
    """Per group, the stable configurations committed: (peers, wall), one per
    log index at the EARLIEST report of it. A node catching up (a replica step 5
    restarted, say) reports old commits again much later; counted at that
    late time, an old configuration looks committed after a newer pending
    write (soak seed 106 flagged a correct cancel that way)."""
    first: dict[tuple[str, Any], tuple[tuple[str, ...], Any]] = {}
    unindexed: Commits = {}
    for _, ev in _events(audit, ("config-committed",)):
        if ev.get("stage") != "stable" or not isinstance(ev.get("group"), str):
            continue
        entry = (peers_of(ev.get("peers")) or (), ev.get("wall"))
        if not isinstance(ev.get("index"), int):
            unindexed.setdefault(ev["group"], []).append(entry)
            continue
        key = (ev["group"], ev["index"])
        prev = first.get(key)
        if prev is None or (entry[1] is not None and (prev[1] is None or entry[1] < prev[1])):
            first[key] = entry
    out: Commits = unindexed
    for (group, _index), entry in sorted(first.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        out.setdefault(group, []).append(entry)
    return out


def _committed_before(commits: list[tuple[tuple[str, ...], Any]], peers: Any, wall: Any) -> bool:
    for committed, at in commits:
        if committed == peers and (at is None or wall is None or at <= wall):
            return True
    return False


def replay_partitions(audit: Audit, out: list[Anomaly]) -> dict[PartitionKey, _Partition]:
    """Every partition's assignment writes replayed (and checked) in revision order."""
    writes = _collect_writes(audit, out)
    commits = committed_stable(audit)
    parts: dict[PartitionKey, _Partition] = {}
    for part in sorted(writes, key=repr):
        replay = parts[part] = _Partition(part, commits, out)
        for rev in sorted(writes[part]):
            replay.apply(writes[part][rev])
    return parts


def check_assignments(audit: Audit) -> tuple[list[Anomaly], dict[str, Any]]:
    """Runs every rule of the module doc; returns anomalies and figures."""
    out: list[Anomaly] = []
    parts = replay_partitions(audit, out)
    requests = _check_requests(audit, committed_stable(audit), out)
    figures = {
        "partitions": len(parts),
        "writes": sum(len(p.written) for p in parts.values()),
        "requests": requests,
        "stable-switches-placed": check_stable_order(audit, out),
        "containment-checks": check_containment(audit, out),
        "driver-actions": check_authority(audit, out),
        "primary-actions": check_primaries(audit, out),
    }
    return out, figures


def _collect_writes(
    audit: Audit, out: list[Anomaly]
) -> dict[PartitionKey, dict[int, dict[str, Any]]]:
    writes: dict[PartitionKey, dict[int, dict[str, Any]]] = {}
    last_seen: dict[tuple[str, PartitionKey], dict[str, Any]] = {}
    for node, ev in _events(audit, ("assignments-written", "started")):
        if ev.get("kind") == "started":
            # A restarted node replays its metastore log from its last
            # snapshot and reports those writes again, from an old revision.
            for key in [k for k in last_seen if k[0] == node]:
                del last_seen[key]
            continue
        rev = ev.get("revision")
        if not isinstance(rev, int) or not isinstance(ev.get("keys"), dict):
            _flag(out, "assignments-malformed", f"{node}: no integer revision or keys", ev)
            continue
        part = (ev.get("zone"), ev.get("partition"))
        prev = last_seen.get((node, part))
        if prev is not None and rev < prev["revision"]:
            _flag(
                out,
                "assignment-revision-went-back",
                f"{node} reported zone {part[0]} partition {part[1]} at revision {rev} "
                f"after {prev['revision']}",
                prev,
                ev,
            )
        last_seen[(node, part)] = ev
        first = writes.setdefault(part, {}).setdefault(rev, ev)
        if first is not ev and first["keys"] != ev["keys"]:
            _flag(
                out,
                "assignment-write-conflict",
                f"two reports of revision {rev} for {part} disagree",
                first,
                ev,
            )
    return writes


class _Partition:
    """One partition's assignment keys as its writes replay in revision order."""

    def __init__(self, part: PartitionKey, commits: Commits, out: list[Anomaly]) -> None:
        self.state: dict[str, Any] = {}
        self.written_at: dict[str, int] = {}
        self.written: list[int] = []  # revisions applied
        self.where = f"zone {part[0]} partition {part[1]}"
        self.group = f"part-{part[1]}"
        self.commits = commits
        self.out = out

    def apply(self, ev: dict[str, Any]) -> None:
        """Checks one write against the state before it, then applies it."""
        keys = {_short(k): v for k, v in ev["keys"].items()}
        had_cancel = bool(self.state.get("cancel"))
        self.written.append(ev["revision"])
        for key, change in keys.items():
            if isinstance(change, dict):
                self.check_key(ev, key, change.get("old"), change.get("new"))
            else:
                self.check_key(ev, key, self.state.get(key), change)
        for key, change in keys.items():
            new = change.get("new") if isinstance(change, dict) else change
            self.state[key] = new
            self.written_at[key] = ev["revision"]
        if peers_of(self.state.get("planned")) and not peers_of(self.state.get("pending")):
            self.flag("planned-without-pending", "planned is set but pending is empty", ev)
        self._check_cleared_together(ev, had_cancel)

    def _targets_now(self) -> set[tuple[str, ...]]:
        """What stable may switch to now (M1): pending's peers, or either side of
        a cancel (reverted: old; cannot-cancel: new)."""
        out = {peers_of(self.state.get("pending"))}
        cancel = self.state.get("cancel")
        if isinstance(cancel, dict):
            out |= {peers_of(cancel.get("old")), peers_of(cancel.get("new"))}
        return {t for t in out if t is not None}

    def _check_cleared_together(self, ev: dict[str, Any], had_cancel: bool) -> None:
        """M5: the write that clears a cancel clears (or replaces) pending with it,
        and a cancel never outlives its pending."""
        keys = {_short(k) for k in ev["keys"]}
        cancel_now = bool(self.state.get("cancel"))
        if had_cancel and not cancel_now and "pending" not in keys:
            self.flag("cancel-cleared-alone", "cancel cleared without pending in the same "
                      "revision", ev)  # fmt: skip
        elif cancel_now and not peers_of(self.state.get("pending")):
            self.flag("cancel-cleared-alone", "pending cleared while the cancel naming it "
                      "stays", ev)  # fmt: skip

    def flag(self, kind: str, message: str, ev: dict[str, Any]) -> None:
        _flag(self.out, kind, f"{self.where} at revision {ev['revision']}: {message}", ev)

    def check_key(self, ev: dict[str, Any], key: str, old: Any, new: Any) -> None:
        """The rules on one key's write (see the module doc)."""
        if key in self.state and old != self.state[key]:
            self.flag("assignment-chain-broken", f"{key} written from {old!r} while it held "
                      f"{self.state[key]!r}", ev)  # fmt: skip
        was, now = _num(old), _num(new)
        if key == "change" and was is not None and now is not None and now <= was:
            self.flag("change-trigger-not-increasing", f"change went from {old} to {new}", ev)
        target, before = peers_of(new), peers_of(old)
        if key == "stable" and target and before and target != before:
            group = ev.get("group") or self.group
            if not _committed_before(self.commits.get(group, []), target, ev.get("wall")):
                self.flag("stable-before-commit", f"stable set to {list(target)} before "
                          f"{group} committed that configuration", ev)  # fmt: skip
            # Judged once the record shows pending at all: a stream that starts
            # after the pending write (or a hand-made one) cannot say what it held.
            if "pending" in self.written_at and target not in self._targets_now():
                self.flag("stable-not-pending", f"stable set to {list(target)} while pending "
                          f"was {self.state.get('pending')!r} and cancel "
                          f"{self.state.get('cancel')!r}", ev)  # fmt: skip
        if key == "cancel" and isinstance(new, dict) and "pending_revision" in new:
            named, actual = new["pending_revision"], self.written_at.get("pending")
            if named != actual:
                self.flag("cancel-wrong-pending", f"cancel names pending revision {named}, "
                          f"but pending was last written at {actual}", ev)  # fmt: skip


def _num(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


PendingWrites = dict[Any, list[tuple[int, tuple[str, ...], Any]]]  # partition -> writes


def pending_writes(audit: Audit) -> PendingWrites:
    """Per partition, each revision that set pending: (revision, peers, earliest wall)."""
    found: dict[Any, dict[int, tuple[tuple[str, ...], Any]]] = {}
    for _, ev in _events(audit, ("assignments-written",)):
        keys = ev.get("keys")
        if not isinstance(keys, dict) or not isinstance(ev.get("revision"), int):
            continue
        for k, change in keys.items():
            new = change.get("new") if isinstance(change, dict) else change
            peers = peers_of(new)
            if _short(k) != "pending" or peers is None:
                continue
            revs = found.setdefault(ev.get("partition"), {})
            rev, wall = ev["revision"], ev.get("wall")
            prev = revs.get(rev)
            if prev is not None and prev[1] is not None and (wall is None or prev[1] <= wall):
                wall = prev[1]
            revs[rev] = (peers, wall)
    return {p: [(r, peers, w) for r, (peers, w) in sorted(revs.items())]
            for p, revs in found.items()}  # fmt: skip


def _pending_wall(writes: PendingWrites, ev: dict[str, Any], new: tuple[str, ...]) -> Any:
    """When the pending a cancel event cancelled was written (None: unknown)."""
    mine = writes.get(ev.get("partition"), [])
    named = ev.get("pending_revision")
    if isinstance(named, int):
        return next((w for r, _, w in mine if r == named), None)
    cancel_at = ev.get("wall")
    before = [w for _, peers, w in mine if peers == new and w is not None
              and (cancel_at is None or w <= cancel_at)]  # fmt: skip
    return before[-1] if before else None


def _reverted(commits: list[tuple[tuple[str, ...], Any]], new: Any, since: Any, wall: Any) -> bool:
    """Whether `new` was committed after `since` (the pending write) and by `wall`."""
    return any(
        _committed_before([(peers, at)], new, wall) and (since is None or at is None or at >= since)
        for peers, at in commits
    )


def _check_requests(audit: Audit, commits: Commits, out: list[Anomaly]) -> int:
    writes = pending_writes(audit)
    seen: dict[tuple[str, Any], dict[str, Any]] = {}
    received: dict[tuple[str, Any, str, float | None], float] = {}
    count = 0
    for node, ev in _events(audit, ("rebalance-request", "cancel-request")):
        count += 1
        req, last = _num(ev.get("request_revision")), _num(ev.get("last_seen_revision"))
        key = (node, ev.get("partition"))
        prev = seen.get(key)
        before = None if prev is None else _num(prev.get("last_seen_revision"))
        if prev is not None and last is not None and before is not None and last < before:
            _flag(
                out,
                "last-seen-went-back",
                f"{node} partition {key[1]}: last seen revision went from {before:g} to {last:g}",
                prev,
                ev,
            )
        if last is not None:
            seen[key] = ev
        request = (node, ev.get("partition"), ev["kind"], req)
        if ev.get("direction") == "received" and last is not None:
            received[request] = last
        applied = ev.get("direction") == "applied" or ev.get("outcome") == "cancelled"
        # Judged by the last seen revision when the request was taken in: a
        # rebalance started at 83 that a cancel at 84 could not stop
        # (cannot-cancel: new was already committed) finishes, and reports
        # "applied" with last seen 84 (seed 75 of the simulator's sweep).
        at_receipt = received.get(request, last)  # its receipt never lost: flushed per event
        if applied and req is not None and at_receipt is not None and req < at_receipt:
            _flag(
                out,
                "stale-request-applied",
                f"{node} applied a {ev['kind']} of revision {req:g} below its last seen "
                f"{at_receipt:g}",
                ev,
            )
        if ev["kind"] == "cancel-request" and ev.get("outcome") == "cancelled":
            group = ev.get("group") or f"part-{ev.get('partition')}"
            new = peers_of(ev.get("peers"))
            since = _pending_wall(writes, ev, new) if new else None
            if new and _reverted(commits.get(group, []), new, since, ev.get("wall")):
                _flag(
                    out,
                    "cancel-reverted-new-config",
                    f"{node} cancelled a change of {group} already committed at {list(new)}",
                    ev,
                )
    return count
