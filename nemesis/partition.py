"""Network partitions with iptables, from a grouping of the nodes.

Theory of operation: a partition is a *grudge*: for each node, the set of
nodes whose packets it drops on input (as in Jepsen). Dropping on input at
both ends cuts a link both ways; at one end only, one way. The grouping
functions below build grudges (pure, seeded by the caller's `random.Random`);
`partition()` turns one into `iptables -A FAULTLINE -s <peer ip> -j DROP`
rules in our own chain, jumped to from INPUT, so healing flushes only our
chain and never another tool's rules. Traffic from the harness itself (SSH
from outside the cluster) never matches a peer's address, so it survives.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from harness.backends.base import NodeHandle
from harness.control import Control
from nemesis.fault import CHAIN, Fault, apply

Grudge = Mapping[str, frozenset[str]]

ENSURE_CHAIN = (
    f"iptables -w -N {CHAIN} 2>/dev/null || true",
    f"iptables -w -C INPUT -j {CHAIN} 2>/dev/null || iptables -w -I INPUT 1 -j {CHAIN}",
)
FLUSH_CHAIN = (f"iptables -w -F {CHAIN} 2>/dev/null || true",)


def complete(components: Sequence[Sequence[str]]) -> dict[str, frozenset[str]]:
    """Each node drops every node outside its own component."""
    everyone = {n for comp in components for n in comp}
    return {n: frozenset(everyone - set(comp)) for comp in components for n in comp}


def _halves(names: Sequence[str], rng: random.Random) -> tuple[list[str], list[str]]:
    shuffled = list(names)
    rng.shuffle(shuffled)
    cut = len(shuffled) // 2
    return shuffled[:cut], shuffled[cut:]


def random_halves(names: Sequence[str], rng: random.Random) -> dict[str, frozenset[str]]:
    """Two sides of sizes floor(n/2) and ceil(n/2), chosen at random."""
    return complete(_halves(names, rng))


def isolate(names: Sequence[str], node: str) -> dict[str, frozenset[str]]:
    """`node` alone on one side, everyone else on the other."""
    if node not in names:
        raise ValueError(f"cannot isolate {node!r}: not one of {', '.join(names)}")
    return complete([[node], [n for n in names if n != node]])


def majorities_ring(names: Sequence[str], rng: random.Random) -> dict[str, frozenset[str]]:
    """Every node sees a majority, and no two nodes see the same one: on a
    shuffled ring each node keeps the majority-sized window centred on it."""
    ring = list(names)
    rng.shuffle(ring)
    size = len(ring)
    majority = size // 2 + 1
    before = (majority - 1) // 2
    grudge = {}
    for i, node in enumerate(ring):
        visible = {ring[(i - before + k) % size] for k in range(majority)}
        grudge[node] = frozenset(set(ring) - visible)
    return grudge


def bridge(names: Sequence[str], rng: random.Random) -> dict[str, frozenset[str]]:
    """Two halves that cannot see each other, joined by one node that sees both."""
    if len(names) < 3:
        raise ValueError(f"a bridge needs at least 3 nodes, got {len(names)}")
    shuffled = list(names)
    rng.shuffle(shuffled)
    middle = shuffled[0]
    left, right = _halves(shuffled[1:], rng)
    grudge = complete([left, right])
    grudge[middle] = frozenset()
    return grudge


def one_way(sources: Sequence[str], targets: Sequence[str]) -> dict[str, frozenset[str]]:
    """Packets from `sources` to `targets` are lost; the other direction flows."""
    return {t: frozenset(set(sources) - {t}) for t in targets}


def partition(control: Control, nodes: Sequence[NodeHandle], grudge: Grudge) -> Fault:
    """Apply `grudge` with iptables, replacing any partition in place; the
    returned fault heals by flushing our chain."""
    by_name = {n.name: n for n in nodes}
    unknown = sorted({*grudge, *(p for ps in grudge.values() for p in ps)} - set(by_name))
    if unknown:
        raise ValueError(f"grudge names unknown nodes: {', '.join(unknown)}")
    # Every node's chain is flushed first, so the new grudge replaces any
    # partition already in place rather than adding to it.
    commands: dict[str, list[str]] = {}
    for node in sorted(by_name):
        peers = sorted(grudge.get(node, frozenset()))
        rules = [f"iptables -w -A {CHAIN} -s {by_name[p].ip} -j DROP" for p in peers]
        commands[node] = [*ENSURE_CHAIN, *FLUSH_CHAIN, *rules]
    heal = {node: list(FLUSH_CHAIN) for node in commands}
    detail = {"grudge": {n: sorted(p) for n, p in sorted(grudge.items())}}
    return apply(control, "partition", commands, heal, detail)
