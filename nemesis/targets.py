"""Which node a role target names, resolved against the live cluster when a fault fires.

Theory of operation. A fault op names a *role* (`group-leader`,
`meta-leader`, `placement-driver`, `primary`), never a node: who holds a
role changes during the run, so the worker asks the cluster at the moment
the fault is applied. The pure functions below read the documents the
nodes serve (`GET /admin/status`: per group role, term and known leader;
`GET /admin/placement`: the driver lease and every primary lease, each
`{holder, expires}` with `expires` in Unix seconds); `Resolver` fetches
them from every node at once with short timeouts and takes what answers
first, so a paused or partitioned node costs nothing while others answer.

A role nobody holds (no driver elected yet, every lease expired, no node
answering, no leader known) raises `UnresolvedError` with the reason: the
worker completes the op `info` with it and applies nothing. A resolution
says how the node was found (`resolved`), which the history records.

- `group-leader` (alias `leader`): the change-stage emitter when the
  trigger came from the op's group (the leader said so itself, so no round
  trip), else the self-declared leader with the highest term.
- `meta-leader`: the same for the metastore's group `meta`.
- `placement-driver`: the holder of the unexpired `placement.driver` lease.
- `primary`: the unexpired lease holder of the trigger's partition (group
  `part-<p>`), else of a seeded choice among the zone's partitions with an
  unexpired lease; the same choice when the trigger's partition never had
  a lease or the zone dropped it (a group outside the zone), so the fault
  still lands on a primary.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

ROLE_TARGETS = ("group-leader", "meta-leader", "placement-driver", "primary")
# How a fault aimed at `random`, or at a joining peer when the trigger named
# none, found its node (the completion's `resolved`; harness.coverage reads it).
RANDOM_NODE = "random node"
META_GROUP = "meta"
# Leases carry the holder's wall clock: allow this much skew between hosts
# before calling a lease expired.
CLOCK_SLACK_S = 1.0
FETCH_TIMEOUT_S = 1.5

Doc = dict[str, Any]
Fetch = Callable[[str], Doc | None]


class UnresolvedError(ValueError):
    """No node holds the role now; the message says why."""


@dataclass(frozen=True, slots=True)
class Resolution:
    """The node a role target named, and how it was found."""

    node: str
    resolved: str


def partition_of(group: object) -> int | None:
    """`part-3` -> 3; anything else -> None."""
    if isinstance(group, str) and group.startswith("part-"):
        tail = group.removeprefix("part-")
        return int(tail) if tail.isdigit() else None
    return None


def leader_from_status(docs: Mapping[str, Doc | None], group: str) -> str:
    """The node that declares itself `group`'s leader in the highest term."""
    best: tuple[int, str] | None = None
    for node, doc in sorted(docs.items()):
        g = ((doc or {}).get("groups") or {}).get(group)
        if isinstance(g, dict) and g.get("role") == "leader":
            term = int(g.get("term") or 0)
            if best is None or term > best[0]:
                best = (term, node)
    if best is None:
        answered = sorted(n for n, d in docs.items() if d is not None)
        raise UnresolvedError(f"no node declares itself leader of {group} "
                         f"(answered: {', '.join(answered) or 'none'})")  # fmt: skip
    return best[1]


def _live_holder(lease: object, what: str, now: float) -> str:
    if not isinstance(lease, dict) or not lease.get("holder"):
        raise UnresolvedError(f"no {what} yet (no lease)")
    holder, expires = str(lease["holder"]), lease.get("expires")
    if isinstance(expires, int | float) and expires + CLOCK_SLACK_S < now:
        raise UnresolvedError(f"the {what} lease of {holder} expired {now - expires:.1f}s ago")
    return holder


def driver_from_placement(doc: Doc, now: float) -> str:
    """The holder of the unexpired placement-driver lease."""
    return _live_holder(doc.get("driver"), "placement driver", now)


def primary_from_placement(doc: Doc, partition: int, now: float) -> str:
    """The holder of partition `partition`'s unexpired primary lease."""
    leases = doc.get("leases") or {}
    return _live_holder(leases.get(str(partition)), f"primary of partition {partition}", now)


def leased_partitions(doc: Doc) -> list[int]:
    """The zone's partitions that have a primary lease, ascending (a partition
    the zone dropped keeps its lapsed lease key, left out here)."""
    count = doc.get("partitions")
    leased = (int(p) for p in (doc.get("leases") or {}) if str(p).isdigit())
    return sorted(p for p in leased if not isinstance(count, int) or p < count)


def live_partitions(doc: Doc, now: float) -> list[int]:
    """The leased partitions whose lease has not run out, ascending."""
    leases = doc.get("leases") or {}
    live = []
    for p in leased_partitions(doc):
        expires = (leases[str(p)] or {}).get("expires")
        if not isinstance(expires, int | float) or expires + CLOCK_SLACK_S >= now:
            live.append(p)
    return live


class Resolver:
    """Resolves role targets by asking every node at once (see the module doc)."""

    def __init__(
        self,
        names: Sequence[str],
        status: Fetch,
        placement: Fetch,
        groups: Callable[[], list[str]],
        *,
        clock: Callable[[], float] | None = None,
        timeout_s: float = FETCH_TIMEOUT_S,
    ) -> None:
        self.names = list(names)
        self.status, self.placement, self.groups = status, placement, groups
        # Looked up now, not at import: the simulator's clock replaces time's.
        self.clock, self.timeout_s = clock or time.time, timeout_s

    def resolve(self, target: str, value: Mapping[str, Any], rng: random.Random) -> Resolution:
        """The node `target` names now; UnresolvedError if none does."""
        trigger = value.get("trigger") or {}
        if target in ("group-leader", "leader"):
            group = value.get("group") or trigger.get("group") or rng.choice(self.groups())
            if trigger.get("group") == group and trigger.get("node") in self.names and \
                    trigger.get("stage") in ("catching-up", "joint", "stable", "done"):  # fmt: skip
                # change-stage comes from the group's leader: no round trip, so
                # the fault lands while the phase still holds.
                return Resolution(str(trigger["node"]), f"leader of {group} (reported the phase)")
            node = leader_from_status(self._all(self.status), str(group))
            return Resolution(node, f"leader of {group} (status, highest term)")
        if target == "meta-leader":
            node = leader_from_status(self._all(self.status), META_GROUP)
            return Resolution(node, f"leader of {META_GROUP} (status, highest term)")
        if target in ("placement-driver", "primary"):
            asked, doc = self._first(self.placement, rng)
            if target == "placement-driver":
                node = driver_from_placement(doc, self.clock())
                return Resolution(node, f"placement driver lease (asked {asked})")
            partition = partition_of(value.get("group") or trigger.get("group"))
            leased, instead = leased_partitions(doc), ""
            if partition is not None and partition not in leased and leased:
                # Never leased (a group outside every zone, as the change-peers
                # workload's are) or dropped by the zone: its primary cannot
                # exist, so aim at one that does rather than waste the fault. An
                # expired lease in the zone stays unresolved below: that primary
                # existed and lapsed.
                count = doc.get("partitions")
                why = (
                    f"is not in the zone ({count} partitions)"
                    if isinstance(count, int) and partition >= count
                    else "has no primary lease"
                )
                instead, partition = f"; partition {partition} {why}", None
            if partition is None:
                if not leased:
                    raise UnresolvedError("no primary yet (no partition has a lease)")
                # A free choice aims at a primary that holds its lease now; only
                # when every lease has lapsed does it stay unresolved, saying so.
                partition = rng.choice(live_partitions(doc, self.clock()) or leased)
            node = primary_from_placement(doc, partition, self.clock())
            return Resolution(
                node, f"primary lease of partition {partition} (asked {asked}{instead})"
            )
        raise ValueError(f"unknown role target {target!r}; known: {', '.join(ROLE_TARGETS)}")

    def _all(self, fetch: Fetch) -> dict[str, Doc | None]:
        """Every node's document (None: no answer within the timeout)."""
        pool = ThreadPoolExecutor(max_workers=len(self.names), thread_name_prefix="resolve")
        futures = {pool.submit(fetch, n): n for n in self.names}
        done, _ = wait(futures, timeout=self.timeout_s)
        pool.shutdown(wait=False)  # a node that does not answer is not waited for
        return {n: (f.result() if f in done and f.exception() is None else None)
                for f, n in futures.items()}  # fmt: skip

    def _first(self, fetch: Fetch, rng: random.Random) -> tuple[str, Doc]:
        """The first answer of any node (each answer is a linearizable read)."""
        order = list(self.names)
        rng.shuffle(order)
        pool = ThreadPoolExecutor(max_workers=len(order), thread_name_prefix="resolve")
        pending: dict[Future[Doc | None], str] = {pool.submit(fetch, n): n for n in order}
        deadline = time.monotonic() + self.timeout_s
        try:
            while pending:
                done, _ = wait(pending, timeout=max(0.0, deadline - time.monotonic()),
                               return_when=FIRST_COMPLETED)  # fmt: skip
                if not done:
                    break
                for fut in done:
                    node = pending.pop(fut)
                    doc = fut.result() if fut.exception() is None else None
                    if doc is not None:
                        return node, doc
        finally:
            pool.shutdown(wait=False)
        raise UnresolvedError(f"no node answered within {self.timeout_s:g}s")
