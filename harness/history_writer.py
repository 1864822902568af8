"""history.jsonl as it happens: one event a line, flushed as written.

A crashed harness (or a SIGKILL) leaves every event written so far on
disk, each line whole, so the history stays readable (`checkers.history`
treats an invoke left open at the end as `info`). Indexes count from 0 in
the order events are written; times are the interpreter's run clock.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import IO, Any

import msgspec

from checkers.history import Event

_encoder = msgspec.json.Encoder()


class HistoryWriter:
    """Appends `Event`s to one file; thread-safe; `close()` when done."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: IO[bytes] | None = open(path, "ab")  # noqa: SIM115 -- lives as long as the run
        self._lock = threading.Lock()
        self.count = 0

    def write(self, **fields: Any) -> Event:
        """Write one event (`index` is assigned here); returns it."""
        with self._lock:
            event = Event(index=self.count, **fields)
            if self._fh is None:
                raise ValueError(f"history {self.path} is closed")
            self._fh.write(_encoder.encode(event) + b"\n")
            # Flushed per event, not fsynced: a dead harness must leave a
            # readable history; a dead machine is out of scope.
            self._fh.flush()
            self.count += 1
            return event

    def close(self) -> None:
        """Flush, fsync once, close."""
        with self._lock:
            if self._fh is not None:
                self._fh.flush()
                os.fsync(self._fh.fileno())
                self._fh.close()
                self._fh = None

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
