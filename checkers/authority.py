"""M9, one authority at a time: no placement driver acts once another has acted
under a newer driver lease, and no primary acts for a partition once another
has acted for it under a newer primary lease.

The driver lease is the metastore key `placement.driver`; each write of it
(a take-over or a renewal) has a new mod revision, and every event a driver
writes names the one it holds (`driver_lease`). Before each action (a write
to the assignments or the leases, a grant or revoke, a request to a
primary) the driver writes `driver-acting` (docs/events.md). A partition's
primary lease is the key `placement.lease.<zone>.<p>`, renewed by its
holder; before each action (a changePeers, a cancel asked of the group, a
cancel or done written) the primary writes `primary-acting` naming the
revision it holds (`primary_lease`).

Ordered by when they happened (the events' `wall`, placed on the harness's
clock by `checkers.audit.place_events`, so a node's skewed clock does not
reorder them), the actions' leases may only grow, for the driver and for
each partition: an action under an older lease than one another node
already acted under is an authority still acting after its successor took
over (`driver-acted-after-successor`, `primary-acted-after-successor`):
what a driver that trusts its own clock past its lease does, or a primary
that acts on after its lease ran out.

One anomaly per (node, lease): the first action says it. Events without the
lease field (runs older than it) are not judged; the figures
`driver-actions` and `primary-actions` count those that were.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from checkers.api import Anomaly
from checkers.audit import is_number

Audit = dict[str, list[dict[str, Any]]]
Act = tuple[float, str, int, dict[str, Any]]  # (wall, node, lease, event)


def check_authority(audit: Audit, out: list[Anomaly]) -> int:
    """Flags driver actions under a superseded driver lease; how many were judged."""
    acts = _acts(audit, "driver-acting", "driver_lease")
    _judge(acts, "driver", "driver-acted-after-successor", out)
    return len(acts)


def check_primaries(audit: Audit, out: list[Anomaly]) -> int:
    """Flags primary actions under a superseded primary lease of their
    partition; how many were judged."""
    acts = _acts(audit, "primary-acting", "primary_lease")
    by_partition: dict[tuple[Any, Any], list[Act]] = defaultdict(list)
    for act in acts:
        by_partition[(act[3].get("zone"), act[3].get("partition"))].append(act)
    for (zone, part), group in sorted(by_partition.items(), key=lambda kv: repr(kv[0])):
        _judge(group, f"primary of {zone}/{part}", "primary-acted-after-successor", out)
    return len(acts)


def _acts(audit: Audit, kind: str, field: str) -> list[Act]:
    acts = []
    for node in sorted(audit):
        for ev in audit[node]:
            lease, wall = ev.get(field), ev.get("wall")
            if ev.get("kind") != kind or not is_number(lease) or not is_number(wall):
                continue
            if lease > 0:
                acts.append((float(wall), node, int(lease), ev))
    acts.sort(key=lambda a: a[0])
    return acts


def _judge(acts: list[Act], role: str, anomaly: str, out: list[Anomaly]) -> None:
    newest: Act | None = None  # the action under the newest lease so far
    flagged: set[tuple[str, int]] = set()
    for wall, node, lease, ev in acts:
        if newest is not None and lease < newest[2] and node != newest[1]:
            if (node, lease) not in flagged:
                flagged.add((node, lease))
                out.append(Anomaly(
                    kind=anomaly,
                    message=f"{node} acted ({ev.get('act')}) as {role} under lease {lease} "
                    f"{wall - newest[0]:.3f}s after {newest[1]} had acted under the newer "
                    f"lease {newest[2]}",
                    events=[newest[3], ev], revisions=[lease, newest[2]], time=wall,
                ))  # fmt: skip
            continue
        if newest is None or lease > newest[2]:
            newest = (wall, node, lease, ev)
