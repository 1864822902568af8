"""Partition groupings: the grudges they build have the promised shapes."""

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nemesis import partition as p

names_st = st.integers(min_value=3, max_value=9).map(lambda n: [f"n{i}" for i in range(1, n + 1)])
seed_st = st.integers(min_value=0, max_value=2**32)


def _sees(grudge: dict[str, frozenset[str]], names: list[str], node: str) -> set[str]:
    return set(names) - grudge.get(node, frozenset())


@given(names_st, seed_st)
def test_random_halves_cut_two_sides_both_ways(names: list[str], seed: int) -> None:
    """Halves: two sides of sizes n//2 and n - n//2 that drop each other symmetrically."""
    grudge = p.random_halves(names, random.Random(seed))
    sides = {frozenset(_sees(grudge, names, n)) for n in names}
    assert sorted(len(s) for s in sides) == sorted([len(names) // 2, len(names) - len(names) // 2])
    for a in names:
        for b in grudge[a]:
            assert a in grudge[b]


@given(names_st, seed_st)
def test_majorities_ring_views_are_distinct_majorities(names: list[str], seed: int) -> None:
    """Ring: every node sees a majority (itself included) and no two see the same set."""
    grudge = p.majorities_ring(names, random.Random(seed))
    views = [frozenset(_sees(grudge, names, n)) for n in names]
    assert all(len(v) == len(names) // 2 + 1 for v in views)
    assert all(n in v for n, v in zip(names, views, strict=True))
    assert len(set(views)) == len(names)


@given(names_st, seed_st)
def test_bridge_joins_two_blind_halves_through_one_node(names: list[str], seed: int) -> None:
    """Bridge: one node sees everyone and is seen by everyone; the halves drop each other."""
    grudge = p.bridge(names, random.Random(seed))
    middles = [n for n in names if not grudge[n]]
    assert len(middles) == 1
    others = [n for n in names if n != middles[0]]
    assert all(middles[0] not in grudge[n] for n in others)
    assert all(grudge[n] for n in others)
    assert len({frozenset(_sees(grudge, others, n)) for n in others}) == 2


def test_isolate_cuts_one_node_from_the_rest() -> None:
    """Isolate: the node drops everyone, and everyone drops it."""
    grudge = p.isolate(["n1", "n2", "n3"], "n2")
    assert grudge == {
        "n2": frozenset({"n1", "n3"}),
        "n1": frozenset({"n2"}),
        "n3": frozenset({"n2"}),
    }
    with pytest.raises(ValueError, match="cannot isolate 'n9'"):
        p.isolate(["n1"], "n9")


def test_one_way_drops_only_at_the_targets() -> None:
    """One-way: only targets drop, and only packets from the sources."""
    assert p.one_way(["n1"], ["n2", "n3"]) == {"n2": frozenset({"n1"}), "n3": frozenset({"n1"})}


def test_same_seed_same_grouping() -> None:
    """Groupings are a function of the seed, so a run can be replayed."""
    names = [f"n{i}" for i in range(1, 6)]
    assert p.majorities_ring(names, random.Random(7)) == p.majorities_ring(names, random.Random(7))
    assert p.bridge(names, random.Random(7)) == p.bridge(names, random.Random(7))
