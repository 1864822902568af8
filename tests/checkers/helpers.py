"""Builders of synthetic histories and run dirs for the checker tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec


class HistoryBuilder:
    """Appends history events with increasing index and time."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.time = 0

    def add(self, process: Any, type_: str, f: str, dt: int = 10, **fields: Any) -> HistoryBuilder:
        """Appends one event `dt` ns after the previous one."""
        self.time += dt
        ev = {"index": len(self.events), "time": self.time, "process": process, "type": type_}
        ev["f"] = f
        ev.update({k: v for k, v in fields.items() if v is not None})
        self.events.append(ev)
        return self

    def op(
        self, process: Any, f: str, type_: str = "ok", dt: int = 10, **fields: Any
    ) -> HistoryBuilder:
        """Appends an invoke and its completion."""
        result = fields.pop("result", fields.get("value"))
        self.add(process, "invoke", f, dt, **fields)
        fields["value"] = result
        return self.add(process, type_, f, dt, **fields)

    def lines(self) -> bytes:
        """The history as history.jsonl bytes."""
        return b"".join(msgspec.json.encode(e) + b"\n" for e in self.events)


def write_run(
    root: Path,
    history: bytes,
    plan: dict[str, Any] | None = None,
    audit: dict[str, list[dict[str, Any]]] | None = None,
) -> Path:
    """Lays out a run dir as DESIGN.md's store does."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "history.jsonl").write_bytes(history)
    if plan is not None:
        (root / "test.json").write_bytes(msgspec.json.encode(plan))
    for node, events in (audit or {}).items():
        d = root / "nodes" / node
        d.mkdir(parents=True)
        (d / "events.jsonl").write_bytes(b"".join(msgspec.json.encode(e) + b"\n" for e in events))
    return root
