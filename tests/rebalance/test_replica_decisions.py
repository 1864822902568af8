"""The step-5 decision (ember.rebalance.replicas) over random key and configuration
states: a replica in the configuration in force, or named by any assignment key,
is never stopped; one named nowhere is stopped once stable exists."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

import ember.placement  # noqa: F401 -- loads the rebalance modules in the order the node does
from ember.rebalance.keys import key
from ember.rebalance.replicas import (
    Assignment,
    conf_in_force,
    decide,
    members,
    settled_leader_view,
)

NODES = ["n1", "n2", "n3", "n4", "n5"]
ME = "n4"
peer_lists = st.lists(st.sampled_from(NODES), unique=True).map(sorted)
confs = st.fixed_dictionaries({
    "peers": peer_lists,
    "old_peers": st.none() | peer_lists,
    "learners": peer_lists,
    "joint": st.booleans(),
})  # fmt: skip
statuses = st.none() | st.fixed_dictionaries({
    "role": st.sampled_from(["leader", "follower", "candidate"]),
    "term": st.integers(0, 5),
    "stage": st.sampled_from(["none", "catching-up", "joint"]),
    "commit": st.integers(0, 10),
    "last_index": st.integers(0, 10),
    "conf": confs,
})  # fmt: skip


@st.composite
def zone_keys(draw: st.DrawFn) -> dict[str, Any]:
    """A `zone.` range for partition 0: each key absent, empty or a peer list."""
    kv: dict[str, Any] = {}
    for kind in ("stable", "pending", "planned"):
        value = draw(st.none() | st.just([]) | peer_lists)
        if value is not None:
            kv[key("default", 0, kind)] = {"value": value}
    if draw(st.booleans()):
        cancel = {"old": draw(peer_lists), "new": draw(peer_lists), "pending_revision": 7}
        kv[key("default", 0, "cancel")] = {"value": cancel}
    return kv


def _named(kv: dict[str, Any]) -> set[str]:
    out: set[str] = set()
    for rec in kv.values():
        v = rec["value"]
        out |= {*v.get("old", []), *v.get("new", [])} if isinstance(v, dict) else set(v)
    return out


@given(zone_keys(), confs, st.lists(statuses, max_size=5))
def test_never_stops_a_member_of_the_configuration_in_force(
    kv: dict[str, Any], local: dict[str, Any], views: list[dict[str, Any] | None]
) -> None:
    a = Assignment.from_keys(kv, 0)
    leader_view = settled_leader_view(views)
    in_force = conf_in_force(members(local), leader_view)
    decision = decide(ME, a, in_force)
    if decision == "stop":
        assert ME not in in_force
        assert ME not in _named(kv)
        assert key("default", 0, "stable") in kv
    if ME in _named(kv) or ME in in_force:
        assert decision == "run"
    elif key("default", 0, "stable") in kv:
        assert decision == "stop"
    else:
        assert decision == "keep"


@given(st.lists(statuses, max_size=5))
def test_only_a_settled_leader_names_the_configuration_in_force(
    views: list[dict[str, Any] | None],
) -> None:
    view = settled_leader_view(views)
    leaders = [v for v in views if v is not None and v["role"] == "leader"]
    if view is None:
        return
    top = max(v["term"] for v in leaders)
    best = next(v for v in leaders if v["term"] == top)
    assert best["stage"] == "none"
    assert not best["conf"]["joint"]
    assert best["commit"] >= best["last_index"]
    assert view == members(best["conf"])


def test_a_local_configuration_is_used_when_no_leader_can_say() -> None:
    local = frozenset({"n1", ME})
    conf = {"peers": ["n1"], "old_peers": None, "learners": [], "joint": False}
    unsettled = {"role": "leader", "term": 3, "stage": "joint", "commit": 5, "last_index": 5,
                 "conf": conf}  # fmt: skip
    assert conf_in_force(local, settled_leader_view([unsettled, None])) == local
    assert decide(ME, Assignment(stable=("n1", "n2", "n3")), local) == "run"
    settled = {**unsettled, "stage": "none"}
    assert decide(ME, Assignment(stable=("n1",)), conf_in_force(
        local, settled_leader_view([settled]))) == "stop"  # fmt: skip
