"""R5 from events: who stored a committed configuration entry, and by when.

Theory of operation: a node shows it stored the configuration entry at
(group, index) when it reports that configuration at that index appended,
applied (its restart's config-applied reads it from the durable log) or
committed, or installs a snapshot at or past the index. A leader counts a
follower only on its ack, and a node sends a round's acks in the same
uninterrupted step that writes that round's events, after the fsync: a kill
between the two loses both, never the event alone with the ack out. So
every node the leader counted has shown it stored the entry before the
leader's commit, and the first `config-committed` of the entry anywhere is
no earlier than the leader's. Where the nodes share one clock (the
simulator's virtual one, the containers of one Docker host) the holders
that commit needed are those that showed it by then (`wall` order); on
separate hosts (SSH) wall clocks may disagree, and the test falls back to
who ever stored it, which misses a quorum that stored it only later.
"""

from __future__ import annotations

from typing import Any

from checkers.raft_conf import Conf, conf_of

SHARED_CLOCK_BACKENDS = frozenset({"sim", "docker"})


def _wall(ev: dict[str, Any]) -> float | None:
    wall = ev.get("wall")
    return float(wall) if isinstance(wall, int | float) and not isinstance(wall, bool) else None


def _earlier(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None  # unknown: the lenient side
    return min(a, b)


class StoreEvidence:
    """When each node first showed it held each configuration entry, and when
    each entry was first known committed (see the module doc)."""

    def __init__(self) -> None:
        # (group, index) -> conf -> node -> first wall (None: no wall)
        self.stored: dict[tuple[str, int], dict[Conf, dict[str, float | None]]] = {}
        # group -> node -> [(snapshot index, wall)]
        self.snapshots: dict[str, dict[str, list[tuple[int, float | None]]]] = {}
        self.first_commit: dict[tuple[str, int], float | None] = {}

    def store(self, node: str, group: str, ev: dict[str, Any]) -> None:
        """A config-appended / -applied / -committed event of `node`."""
        key = (group, int(ev.get("index") or 0))
        nodes = self.stored.setdefault(key, {}).setdefault(conf_of(ev), {})
        nodes[node] = _earlier(nodes[node], _wall(ev)) if node in nodes else _wall(ev)

    def snapshot(self, node: str, group: str, ev: dict[str, Any]) -> None:
        """A snapshot-installed event of `node`."""
        entry = (int(ev.get("index") or 0), _wall(ev))
        self.snapshots.setdefault(group, {}).setdefault(node, []).append(entry)

    def committed(self, group: str, ev: dict[str, Any]) -> None:
        """A config-committed event (any node's)."""
        key = (group, int(ev.get("index") or 0))
        wall = _wall(ev)
        self.first_commit[key] = (
            _earlier(self.first_commit[key], wall) if key in self.first_commit else wall
        )

    def holders(self, group: str, index: int, conf: Conf, timed: bool) -> set[str]:
        """Who showed they held the entry: by its first commit when `timed` and
        it is placed in time, else at any time."""
        by = self.first_commit.get((group, index)) if timed else None
        shown = dict(self.stored.get((group, index), {}).get(conf, {}))
        for node, snaps in self.snapshots.get(group, {}).items():
            for at, wall in snaps:
                if at >= index:
                    shown[node] = _earlier(shown[node], wall) if node in shown else wall
        return {n for n, wall in shown.items() if by is None or wall is None or wall <= by}
