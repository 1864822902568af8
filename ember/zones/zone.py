"""Distribution zones: their definition, data nodes and replica assignment.

A zone has `replicas` copies of each of its `partitions`, placed on its data
nodes: the live nodes whose id matches the zone's `filter` (fnmatch globs,
"*" by default). Assignment is rendezvous (highest-random-weight) hashing:
each partition ranks every data node by a hash of (zone, partition, node)
and takes the top `replicas`. It is deterministic (every node computes the
same answer from the same data nodes) and minimal: a node joining moves
only the replicas it now outranks, a node leaving moves only its own.

Data nodes change after a delay (`scale_up_s` for a node that appeared,
`scale_down_s` for one that vanished), so a node that flaps does not cause
a rebalance per flap. `next_data_nodes` is that rule as a pure function of
what the caller observed and when.
"""

from __future__ import annotations

import fnmatch
import hashlib
from typing import Any

import msgspec


class ZoneError(ValueError):
    """A zone definition is invalid; the message names the bad field."""


class Zone(msgspec.Struct, frozen=True, kw_only=True):
    """A zone's definition, as stored under `zone.<id>.config`."""

    id: str
    replicas: int = 3
    partitions: int = 8
    filter: list[str] = msgspec.field(default_factory=lambda: ["*"])
    scale_up_s: float = 0.0
    scale_down_s: float = 0.0

    def check(self) -> Zone:
        """Self, or ZoneError naming the first invalid field."""
        if not self.id or "." in self.id:
            raise ZoneError(f"zone id must be non-empty without dots: {self.id!r}")
        if not 1 <= self.replicas <= 64:
            raise ZoneError(f"replicas must be in 1..64, got {self.replicas}")
        if not 1 <= self.partitions <= 1024:
            raise ZoneError(f"partitions must be in 1..1024, got {self.partitions}")
        if not self.filter or not all(isinstance(f, str) and f for f in self.filter):
            raise ZoneError("filter must be a non-empty list of node-id globs")
        if self.scale_up_s < 0 or self.scale_down_s < 0:
            raise ZoneError("scale_up_s and scale_down_s must be >= 0")
        return self

    def altered(self, changes: dict[str, Any]) -> Zone:
        """A copy with `changes` applied (only replicas, partitions, filter, delays)."""
        allowed = {"replicas", "partitions", "filter", "scale_up_s", "scale_down_s"}
        bad = sorted(set(changes) - allowed)
        if bad:
            raise ZoneError(
                f"cannot alter {', '.join(bad)}; alterable: {', '.join(sorted(allowed))}"
            )
        merged = {**msgspec.to_builtins(self), **changes}
        try:
            return msgspec.convert(merged, Zone).check()
        except msgspec.ValidationError as err:
            raise ZoneError(f"invalid zone: {err}") from None

    def admits(self, node: str) -> bool:
        """Whether the zone's filter lets `node` be a data node."""
        return any(fnmatch.fnmatchcase(node, pattern) for pattern in self.filter)


def _weight(zone: str, partition: int, node: str) -> bytes:
    return hashlib.sha256(f"{zone}\x00{partition}\x00{node}".encode()).digest()


def assign(zone: str, partition: int, data_nodes: list[str] | set[str], replicas: int) -> list[str]:
    """The sorted peers of one partition: the top `replicas` data nodes by weight."""
    ranked = sorted(data_nodes, key=lambda n: _weight(zone, partition, n), reverse=True)
    return sorted(ranked[:replicas])


def next_data_nodes(
    zone: Zone,
    current: list[str],
    alive: set[str],
    changed_at: dict[str, float],
    now: float,
) -> list[str]:
    """The zone's data nodes after applying the scale-up / scale-down delays.

    `current`: the data nodes now in force; `alive`: the nodes seen up;
    `changed_at`: when each node was last seen to change (appear or vanish).
    A node joins once it has been alive for `scale_up_s`, leaves once it has
    been gone for `scale_down_s`; otherwise it keeps its current standing.
    """
    out = set()
    for node in set(current) | alive:
        if not zone.admits(node):
            continue
        since = now - changed_at.get(node, float("-inf"))
        if node in alive:
            if node in current or since >= zone.scale_up_s:
                out.add(node)
        elif node in current and since < zone.scale_down_s:
            out.add(node)
    return sorted(out)
