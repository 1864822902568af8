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


Ev = tuple[int, str, str, Any]  # revision, key, type, value


def watch_op(b: HistoryBuilder, start: int, events: list[Ev], **spec: Any) -> None:
    """A prefix watch from `start` that delivered `events` (ember's stream shape)."""
    responses = [{"revision": rev, "events": [{"key": k, "revision": rev, "type": t, "value": v}]}
                 for rev, k, t, v in events]  # fmt: skip
    b.op(9, "watch", value={"prefix": "m/", "from": start, **spec},
         result={"responses": responses, "unframed": True})  # fmt: skip


def foreign_writers_history(read_mod: int) -> HistoryBuilder:
    """Writes at 10 and 50 (other writers between), a read naming one of them."""
    b = HistoryBuilder()
    b.op(1, "put", key="m/0", value=1, result=10)
    b.op(1, "put", key="m/0", value=2, result=50)
    b.op(1, "get", key="m/0", result={"value": 2, "mod_revision": read_mod, "revision": 60})
    watch_op(b, 1, [(10, "m/0", "put", 1), (50, "m/0", "put", 2)])
    b.op(9, "watch", value={"prefix": "m/", "from": 51}, result={"responses": [
        {"revision": 70, "progress": True}]})  # fmt: skip
    return b
