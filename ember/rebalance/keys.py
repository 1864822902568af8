"""The metastore keys of zones and their assignments, and the audit view of them.

Per zone: `zone.<id>.config` (the Zone), `zone.<id>.data_nodes` (sorted
list). Per partition p of the zone, under `zone.<id>.p<p>.assignments.`:
`stable`, `pending`, `planned` (sorted peer lists), `change` (the revision
of the trigger that last wrote pending or planned), and `cancel`
({old, new, pending_revision}). An empty assignment is an absent key.
"""

from __future__ import annotations

import re
from typing import Any

from ember.metastore import Event

KINDS = ("stable", "pending", "planned", "change", "cancel")
ZONES_PREFIX = "zone."
_ASSIGNMENT = re.compile(r"^zone\.([^.]+)\.p(\d+)\.assignments\.(\w+)$")


def config_key(zone: str) -> str:
    """The key holding a zone's definition."""
    return f"zone.{zone}.config"


def data_nodes_key(zone: str) -> str:
    """The key holding a zone's data nodes."""
    return f"zone.{zone}.data_nodes"


def assignments_prefix(zone: str, partition: int) -> str:
    """The prefix of one partition's assignment keys."""
    return f"zone.{zone}.p{partition}.assignments."


def key(zone: str, partition: int, kind: str) -> str:
    """One assignment key (`kind` one of KINDS)."""
    if kind not in KINDS:
        raise ValueError(f"unknown assignment key kind {kind!r}")
    return assignments_prefix(zone, partition) + kind


def parse(name: str) -> tuple[str, int, str] | None:
    """(zone, partition, kind) of an assignment key, else None."""
    m = _ASSIGNMENT.match(name)
    return (m.group(1), int(m.group(2)), m.group(3)) if m else None


def assignment_writes(events: list[Event]) -> list[dict[str, Any]]:
    """`assignments-written` audit events for the assignment keys among `events`.

    One event per (zone, partition, revision), naming every key written with
    its old and new value, as docs/events.md describes.
    """
    out: dict[tuple[str, int, int], dict[str, Any]] = {}
    for ev in events:
        parsed = parse(ev.key)
        if parsed is None:
            continue
        zone, partition, _ = parsed
        report = out.setdefault(
            (zone, partition, ev.revision),
            {
                "kind": "assignments-written",
                "zone": zone,
                "partition": partition,
                "group": f"part-{partition}",
                "revision": ev.revision,
                "keys": {},
            },
        )
        old = ev.prev.value if ev.prev is not None else None
        new = ev.record.value if ev.record is not None else None
        report["keys"][ev.key] = {"old": old, "new": new}
    return list(out.values())
