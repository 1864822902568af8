"""The simulated network: each fault knob does what it says."""

from __future__ import annotations

import random

import pytest

from ember.sim.clock import NS_PER_MS
from ember.sim.network import Network, NetworkConfig


def _net(**knobs: float) -> Network:
    return Network(random.Random(1), NetworkConfig(**knobs))


def test_delay_stays_within_bounds_and_links_are_fifo() -> None:
    """Without reordering, a link delivers in send order, within the delay bounds."""
    net = _net(min_delay_ms=1.0, max_delay_ms=5.0)
    arrivals = [net.send("a", "b", now_ns=t * NS_PER_MS)[0] for t in range(200)]
    assert arrivals == sorted(arrivals)
    for t, at in enumerate(arrivals):
        assert t * NS_PER_MS + NS_PER_MS <= at


def test_loss_drops_messages() -> None:
    """loss=1 loses everything; loss=0.3 loses about a third."""
    assert all(_net(loss=1.0).send("a", "b", 0) == [] for _ in range(50))
    net = _net(loss=0.3)
    lost = sum(1 for _ in range(2000) if not net.send("a", "b", 0))
    assert 450 < lost < 750
    assert net.stats.lost == lost


def test_duplication_delivers_twice() -> None:
    """dup=1 makes every message arrive twice."""
    net = _net(dup=1.0)
    assert all(len(net.send("a", "b", 0)) == 2 for _ in range(50))
    assert net.stats.duplicated == 50


def test_reordering_lets_later_messages_overtake() -> None:
    """With reordering on, some message arrives before one sent earlier."""
    net = _net(reorder=0.5)
    arrivals = [net.send("a", "b", now_ns=t * NS_PER_MS)[0] for t in range(200)]
    assert arrivals != sorted(arrivals)
    assert net.stats.reordered > 0


def test_partition_cuts_both_directions_between_sides_only() -> None:
    """A partition blocks cross-side links both ways and leaves each side connected."""
    net = _net()
    net.partition([["a", "b"], ["c"]])
    assert not net.may_deliver("a", "c")
    assert not net.may_deliver("c", "b")
    assert net.may_deliver("a", "b")
    net.heal()
    assert net.may_deliver("a", "c")


def test_one_way_block_cuts_one_direction() -> None:
    """block(a, b) stops a->b while b->a still works."""
    net = _net()
    net.block("a", "b")
    assert not net.may_deliver("a", "b")
    assert net.may_deliver("b", "a")


def test_bad_knobs_are_rejected_with_a_clear_message() -> None:
    """A probability outside [0, 1] names the knob."""
    with pytest.raises(ValueError, match="loss"):
        NetworkConfig(loss=1.5)
    with pytest.raises(ValueError, match="delays"):
        NetworkConfig(min_delay_ms=5.0, max_delay_ms=1.0)
