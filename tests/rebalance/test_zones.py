"""Zones: definitions, rendezvous assignment and the data-nodes delays."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ember.zones import Zone, ZoneError, assign, next_data_nodes

nodes = st.lists(st.sampled_from([f"n{i}" for i in range(1, 10)]), min_size=1, unique=True)


@given(nodes, st.integers(0, 20), st.integers(1, 5))
def test_assignment_is_deterministic_and_sized(data: list[str], part: int, replicas: int) -> None:
    """Same inputs, same peers, in any input order; min(replicas, nodes) of them."""
    peers = assign("z", part, data, replicas)
    assert peers == assign("z", part, list(reversed(data)), replicas)
    assert len(peers) == min(replicas, len(data))
    assert peers == sorted(peers)
    assert set(peers) <= set(data)


@given(nodes, st.sampled_from(["n10", "n11"]), st.integers(0, 20), st.integers(1, 5))
def test_a_joining_node_moves_at_most_one_replica(
    data: list[str], extra: str, part: int, replicas: int
) -> None:
    """Rendezvous hashing is minimal: a new node displaces at most one replica."""
    before = set(assign("z", part, data, replicas))
    after = set(assign("z", part, [*data, extra], replicas))
    assert len(before - after) <= 1
    assert after - before <= {extra}


def test_data_nodes_follow_the_scale_up_and_down_delays() -> None:
    """A node counts after scale_up_s alive, and is dropped after scale_down_s gone."""
    zone = Zone(id="z", scale_up_s=10, scale_down_s=20, filter=["n*"])
    seen = {"n4": 100.0, "n3": 100.0}
    alive = {"n1", "n2", "n4", "x9"}
    assert next_data_nodes(zone, ["n1", "n2", "n3"], alive, seen, 105) == ["n1", "n2", "n3"]
    assert next_data_nodes(zone, ["n1", "n2", "n3"], alive, seen, 110) == ["n1", "n2", "n3", "n4"]
    assert next_data_nodes(zone, ["n1", "n2", "n3"], alive, seen, 120) == ["n1", "n2", "n4"]


def test_altering_a_zone_checks_every_field() -> None:
    """alter names the field it refuses, and keeps the rest."""
    zone = Zone(id="z").check()
    assert zone.altered({"replicas": 5}).replicas == 5
    with pytest.raises(ZoneError, match=r"replicas must be in 1\.\.64"):
        zone.altered({"replicas": 0})
    with pytest.raises(ZoneError, match="cannot alter id"):
        zone.altered({"id": "y"})
    with pytest.raises(ZoneError, match="invalid zone"):
        zone.altered({"replicas": "many"})
