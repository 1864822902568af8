"""Reading nodes' audit logs (docs/events.md) from a run directory.

Audit events stay plain dicts: their fields vary by kind and new kinds
appear as ember grows, so checkers read the fields they need and ignore the
rest. Each event gains no fields here; a node's list keeps file order, which
is the order the node emitted them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec

from checkers.history import HistoryError

_DECODER = msgspec.json.Decoder(dict[str, Any])


def read_events(path: str | os.PathLike[str], node: str | None = None) -> list[dict[str, Any]]:
    """Reads one events.jsonl; fills in `node` where a line lacks it.

    Raises HistoryError naming the line of a malformed event (not JSON, not an
    object, or without a string `kind`).
    """
    source = os.fspath(path)
    out: list[dict[str, Any]] = []
    with open(source, "rb") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                ev = _DECODER.decode(line)
            except msgspec.DecodeError as exc:
                raise HistoryError(f"{source}: line {lineno}: {exc}") from None
            if not isinstance(ev.get("kind"), str):
                raise HistoryError(f"{source}: line {lineno}: event has no string 'kind'")
            if node is not None:
                ev.setdefault("node", node)
            out.append(ev)
    return out


def load_audit(run_dir: str | os.PathLike[str]) -> dict[str, list[dict[str, Any]]] | None:
    """Loads nodes/<node>/events.jsonl for every node; None if there are none."""
    nodes = Path(run_dir) / "nodes"
    if not nodes.is_dir():
        return None
    audit: dict[str, list[dict[str, Any]]] = {}
    for node_dir in sorted(nodes.iterdir()):
        path = node_dir / "events.jsonl"
        if path.is_file():
            audit[node_dir.name] = read_events(path, node_dir.name)
    return audit or None


def by_group(audit: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """All nodes' events per Raft group, each node's order kept, nodes in name order."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for node in sorted(audit):
        for ev in audit[node]:
            group = ev.get("group")
            if isinstance(group, str):
                groups.setdefault(group, []).append(ev)
    return groups
