"""The node's audit log: `events.jsonl`, one event per line (docs/events.md).

The Raft core emits events without the envelope; `AuditLog.record` adds
`node`, `mono_ns` (monotonic ns since this process started) and `wall`
(Unix seconds, by the node's clock: a clock fault's offset included, and
then also given as `clock_offset_s`), and on the first event a process writes `mono_origin_ns`
(the monotonic clock's reading at that start: a harness sharing the clock,
on one kernel or in the simulator, places events by it even while a clock
fault moves the node's wall clock) and `boot_id` (the kernel's boot id,
which says whose monotonic clock that is: readers give it to every event of
the process), writes the line and flushes it, so readers (the
phase-triggered nemesis, the checkers) see events as they happen. The
runtime records a round's Raft events after that round's fsync, so a
`kill -9` can lose the events of the round being written while its entries
are already durable (docs/events.md says how the checkers allow for it).
Flushed, not fsynced: audit events are evidence for checkers, not state the
node recovers from.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, ClassVar

import msgspec

from ember import clock

_encoder = msgspec.json.Encoder()
BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"


def kernel_boot_id() -> str:
    """This kernel's boot id ("" where there is none to read). Monotonic clocks
    are comparable only between processes with the same one. The simulator
    gives every simulated process, harness included, one of its own."""
    try:
        with open(BOOT_ID_FILE, encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return ""


class AuditLog:
    """Appends enveloped events to one file; `close()` when the node stops.

    `taps` (empty in the daemon) are called with every enveloped event as it
    is written: the simulator's phase trigger reads events there, at the
    instant they happen, instead of tailing the file.
    """

    taps: ClassVar[list[Callable[[dict[str, Any]], None]]] = []

    def __init__(self, path: str | Path, node_id: str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.node_id = node_id
        self._start_ns = time.monotonic_ns()
        self._boot_id = kernel_boot_id()
        self._fh: IO[bytes] | None = open(self.path, "ab")  # noqa: SIM115 -- lives as long as the node
        self.count = 0

    def record(self, event: dict[str, Any], group: str | None = None) -> None:
        """Add the envelope to `event` and append it, flushed."""
        if self._fh is None:
            return
        full = dict(event)
        full["node"] = self.node_id
        if group is not None:
            full["group"] = group
        full["mono_ns"] = time.monotonic_ns() - self._start_ns
        full["wall"] = clock.wall()
        fault = clock.offset()
        if fault:  # what a clock fault added to `wall`: readers off one kernel take it off
            full["clock_offset_s"] = fault
        if self.count == 0:
            full["mono_origin_ns"] = self._start_ns
            full["boot_id"] = self._boot_id
        self._fh.write(_encoder.encode(full) + b"\n")
        self._fh.flush()
        self.count += 1
        for tap in self.taps:
            tap(full)

    def close(self) -> None:
        """Flush and close; later records are dropped."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None
