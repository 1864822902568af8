"""M9, one authority at a time: no placement driver acts once another has acted
under a newer lease.

The driver lease is the metastore key `placement.driver`; each write of it
(a take-over or a renewal) has a new mod revision, and every event a driver
writes names the one it holds (`driver_lease`). Before each action (a write
to the assignments or the leases, a grant or revoke, a request to a
primary) the driver writes `driver-acting` (docs/events.md). Ordered by
when they happened (the events' `wall`, placed on the harness's clock by
`checkers.audit.place_events`, so a node's skewed clock does not reorder
them), the actions' leases may only grow: an action under an older lease
than one another node already acted under is a driver still acting after
its successor took over (`driver-acted-after-successor`), what a driver
that trusts its own clock past its lease does.

One anomaly per (node, lease): the first action says it. Events without
`driver_lease` (runs older than the field) are not judged; the figure
`driver-actions` counts those that were.
"""

from __future__ import annotations

from typing import Any

from checkers.api import Anomaly
from checkers.audit import is_number

Audit = dict[str, list[dict[str, Any]]]


def check_authority(audit: Audit, out: list[Anomaly]) -> int:
    """Flags actions under a superseded driver lease; returns how many were judged."""
    acts = []
    for node in sorted(audit):
        for ev in audit[node]:
            lease, wall = ev.get("driver_lease"), ev.get("wall")
            if ev.get("kind") != "driver-acting" or not is_number(lease) or not is_number(wall):
                continue
            if lease > 0:
                acts.append((float(wall), node, int(lease), ev))
    acts.sort(key=lambda a: a[0])
    newest: tuple[int, str, float, dict[str, Any]] | None = None
    flagged: set[tuple[str, int]] = set()
    for wall, node, lease, ev in acts:
        if newest is not None and lease < newest[0] and node != newest[1]:
            if (node, lease) not in flagged:
                flagged.add((node, lease))
                out.append(Anomaly(
                    kind="driver-acted-after-successor",
                    message=f"{node} acted ({ev.get('act')}) under driver lease {lease} "
                    f"{wall - newest[2]:.3f}s after {newest[1]} had acted under the newer "
                    f"lease {newest[0]}",
                    events=[newest[3], ev], revisions=[lease, newest[0]], time=wall,
                ))  # fmt: skip
            continue
        if newest is None or lease > newest[0]:
            newest = (lease, node, wall, ev)
    return len(acts)
