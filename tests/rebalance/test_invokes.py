"""The rebalance invokes, the cancel table and assignment audit events, without processes."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from checkers.assignments import check_assignments
from ember.metastore import MetaState
from ember.rebalance import (
    TABLE,
    assignment_writes,
    cancel_invoke,
    cancel_outcome,
    done_invoke,
    key,
    trigger_invoke,
)

NODES = ["n1", "n2", "n3", "n4", "n5"]
peer_sets = st.lists(st.sampled_from(NODES), min_size=1, max_size=5, unique=True).map(sorted)
maybe_peers = st.none() | peer_sets


def keys_of(state: MetaState) -> dict[str, Any]:
    """The partition's assignment values (None when absent)."""
    return {k: state.kv[key("z", 0, k)].value if key("z", 0, k) in state.kv else None
            for k in ("stable", "pending", "planned", "change", "cancel")}  # fmt: skip


def reference_trigger(keys: dict[str, Any], new: list[str], ts: int) -> dict[str, Any]:
    """Seed 004's pseudo-code, with the planned-without-pending case skipped."""
    out = dict(keys)
    if keys["change"] is None or keys["change"] < ts:
        if keys["pending"] is None and keys["stable"] != new:
            out["pending"], out["change"] = new, ts
        elif keys["pending"] is not None and keys["pending"] != new:
            out["planned"], out["change"] = new, ts
        elif keys["pending"] is not None:
            out["planned"] = None
    return out


@given(peer_sets, maybe_peers, maybe_peers, st.none() | st.integers(1, 5), peer_sets,
       st.integers(1, 6))  # fmt: skip
def test_trigger_invoke_follows_the_design_pseudo_code(
    stable: list[str], pending: Any, planned: Any, change: Any, new: list[str], ts: int
) -> None:
    """The one atomic trigger invoke leaves the keys exactly as the pseudo-code says."""
    state = MetaState()
    start = {"stable": stable, "pending": pending, "planned": planned if pending else None,
             "change": change, "cancel": None}  # fmt: skip
    writes = [{"op": "put", "key": key("z", 0, k), "value": v} for k, v in start.items() if v]
    state.invoke({"then": writes})
    state.invoke(trigger_invoke("z", 0, new, ts))
    assert keys_of(state) == reference_trigger(start, new, ts)


def test_done_invoke_promotes_planned_and_a_repeat_changes_nothing() -> None:
    """Done: stable = peers, pending = planned, cancel and planned removed; twice is once."""
    state = MetaState()
    state.put(key("z", 0, "stable"), ["n1", "n2", "n3"])
    state.invoke(trigger_invoke("z", 0, ["n1", "n2", "n3", "n4", "n5"], 10))
    pending_rev = state.revision
    state.invoke(trigger_invoke("z", 0, ["n1", "n2", "n4"], 11))
    snap = state.range(prefix="zone.z.p0.")["kvs"]
    spec = done_invoke({kv["key"]: kv for kv in snap}, "z", 0, NODES, pending_rev)
    assert state.invoke(spec)["succeeded"]
    assert keys_of(state) == {"stable": NODES, "pending": ["n1", "n2", "n4"], "planned": None,
                              "change": 11, "cancel": None}  # fmt: skip
    before = state.revision
    assert not state.invoke(spec)["succeeded"]
    assert state.revision == before


def test_cancel_is_written_only_for_the_pending_named() -> None:
    """A cancel naming an older pending revision fails; the right one succeeds."""
    state = MetaState()
    state.put(key("z", 0, "stable"), ["n1", "n2", "n3"])
    state.invoke(trigger_invoke("z", 0, NODES, 5))
    rev = state.revision
    stale = cancel_invoke("z", 0, ["n1", "n2", "n3"], NODES, rev - 1)
    assert not state.invoke(stale)["succeeded"]
    assert state.invoke(cancel_invoke("z", 0, ["n1", "n2", "n3"], NODES, rev))["succeeded"]
    assert keys_of(state)["cancel"] == {"old": ["n1", "n2", "n3"], "new": NODES,
                                        "pending_revision": rev}  # fmt: skip
    unguarded = cancel_invoke("z", 0, ["n1"], NODES, 1, guard=False)
    assert state.invoke(unguarded)["succeeded"]


def test_cancel_table_gives_the_three_outcomes_of_the_design() -> None:
    """Ongoing -> cancelled; none at old -> noop; none at new -> cannot-cancel."""
    old, new = ["n1", "n2", "n3"], ["n1", "n2", "n4"]
    assert cancel_outcome("catching-up", new, old, old, new) == "cancelled"
    assert cancel_outcome("none", None, old, old, new) == "noop"
    assert cancel_outcome("none", None, new, old, new) == "cannot-cancel"
    assert cancel_outcome("joint", new, ["n1", "n2", "n3", "n4"], old, new) == "wait"
    assert cancel_outcome("none", None, ["n5"], old, new) == "mismatch"
    assert cancel_outcome("catching-up", ["n5"], old, old, new) == "mismatch"
    assert set(TABLE.values()) == {"cancelled", "wait", "noop", "cannot-cancel", "mismatch"}


steps = st.lists(st.tuples(st.sampled_from(["trigger", "done", "cancel"]), peer_sets), max_size=25)


@given(steps)
def test_any_sequence_of_invokes_passes_the_assignment_checker(seq: list[Any]) -> None:
    """Writes made only through these invokes never break the rebalance invariants."""
    state = MetaState()
    state.put(key("z", 0, "stable"), ["n1", "n2", "n3"])
    audit: list[dict[str, Any]] = []
    wall = 0.0
    for action, peers in seq:
        wall += 1
        before = len(state.events)
        pending = state.kv.get(key("z", 0, "pending"))
        if action == "trigger":
            state.invoke(trigger_invoke("z", 0, peers, state.revision + 1))
        elif action == "done" and pending is not None:
            audit.append({"kind": "config-committed", "group": "part-0", "stage": "stable",
                          "peers": pending.value, "wall": wall})  # fmt: skip
            snap = {kv["key"]: kv for kv in state.range(prefix="zone.z.p0.")["kvs"]}
            state.invoke(done_invoke(snap, "z", 0, pending.value, pending.mod_revision))
        elif action == "cancel" and pending is not None:
            stable = state.kv[key("z", 0, "stable")].value
            state.invoke(cancel_invoke("z", 0, stable, pending.value, pending.mod_revision))
        for ev in assignment_writes(state.events[before:]):
            audit.append({**ev, "wall": wall + 0.5})
    anomalies, _ = check_assignments({"n1": audit})
    assert anomalies == []
