"""The rebalance design's metastore invokes, as pure functions.

Theory of operation
-------------------
Seed 004 updates a partition's assignment keys in three atomic invokes:

1. trigger (a zone's replicas, partitions or data nodes changed at revision
   `ts`): if `change` is absent or older than `ts`:
     - pending absent and stable != new  -> pending = new, change = ts
     - pending present and pending != new -> planned = new, change = ts
     - pending present and pending == new -> remove planned
   else skip. The design's pseudo-code, read literally, would also write
   planned when pending is absent and stable == new (its `else` branch);
   that would leave planned without pending, which the rebalance invariant
   forbids, so that case does nothing (the partition is already there).
   "absent or older" is two conditions, so each case is two branches of
   the multi-branch invoke: one for `change` absent, one for `change < ts`.
2. done (the group committed `peers`): stable = peers, remove cancel,
   pending = planned (remove planned) or remove pending. The caller read
   planned from a snapshot; the invoke is guarded on pending still being the
   write the rebalance served (its mod revision) and planned unchanged, so a
   repeat of a finished rebalance changes nothing (it is already done).
3. cancel: cancel = {old, new, pending_revision} only if pending's mod
   revision is the one named; otherwise it fails (done won the race).
"""

from __future__ import annotations

from typing import Any

from ember.rebalance.keys import key

Spec = dict[str, Any]
Snapshot = dict[str, dict[str, Any]]  # key -> record_json (absent keys may be missing)


def _cond(k: str, target: str, value: Any, op: str = "eq") -> dict[str, Any]:
    return {"key": k, "target": target, "op": op, "value": value}


def _put(k: str, value: Any) -> dict[str, Any]:
    return {"op": "put", "key": k, "value": value}


def _delete(k: str) -> dict[str, Any]:
    return {"op": "delete", "key": k}


def put_if_unchanged(k: str, mod_revision: int, value: Any) -> Spec:
    """Put `value` at `k` only if the key is still at `mod_revision` (0: absent)."""
    return {"if": [_cond(k, "mod_revision", mod_revision)], "then": [_put(k, value)]}


def trigger_invoke(zone: str, partition: int, new: list[str], ts: int) -> Spec:
    """The multi-branch invoke of step 1 for one partition (see the module doc)."""
    stable, pending = key(zone, partition, "stable"), key(zone, partition, "pending")
    planned, change = key(zone, partition, "planned"), key(zone, partition, "change")
    new = sorted(new)
    cases = [
        (
            [_cond(pending, "exists", False), _cond(stable, "value", new, "ne")],
            [_put(pending, new), _put(change, ts)],
        ),
        (
            [_cond(pending, "exists", True), _cond(pending, "value", new, "ne")],
            [_put(planned, new), _put(change, ts)],
        ),
        (
            [_cond(pending, "exists", True), _cond(pending, "value", new)],
            [_delete(planned)],
        ),
    ]
    guards = [[_cond(change, "exists", False)], [_cond(change, "value", ts, "lt")]]
    branches = [{"if": g + conds, "then": writes} for conds, writes in cases for g in guards]
    return {"branches": branches, "else": []}


def done_invoke(
    snap: Snapshot, zone: str, partition: int, peers: list[str], pending_revision: int
) -> Spec:
    """Step 4's invoke over a snapshot of the partition's keys (see the module doc)."""
    stable, pending = key(zone, partition, "stable"), key(zone, partition, "pending")
    planned, cancel = key(zone, partition, "planned"), key(zone, partition, "cancel")
    planned_rec = snap.get(planned)
    planned_rev = planned_rec["mod_revision"] if planned_rec else 0
    writes = [_put(stable, sorted(peers)), _delete(cancel)]
    if planned_rec and planned_rec.get("value"):
        writes += [_put(pending, planned_rec["value"]), _delete(planned)]
    else:
        writes.append(_delete(pending))
    conds = [
        _cond(pending, "mod_revision", pending_revision),
        _cond(planned, "mod_revision", planned_rev),
    ]
    return {"if": conds, "then": writes, "else": []}


def cancel_value(old: list[str], new: list[str], pending_revision: int) -> dict[str, Any]:
    """The value of a cancel key (docs/events.md's shape)."""
    return {"old": sorted(old), "new": sorted(new), "pending_revision": pending_revision}


def cancel_invoke(
    zone: str,
    partition: int,
    old: list[str],
    new: list[str],
    pending_revision: int,
    *,
    guard: bool = True,
) -> Spec:
    """Step 1 of cancel: write the intent only while pending is the one named.

    `guard=False` is the planted defect `rebalance.cancel-without-revision-guard`.
    """
    pending, cancel = key(zone, partition, "pending"), key(zone, partition, "cancel")
    conds = [_cond(pending, "mod_revision", pending_revision)] if guard else []
    return {"if": conds, "then": [_put(cancel, cancel_value(old, new, pending_revision))]}
