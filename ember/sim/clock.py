"""Virtual time and the simulator's event queue.

Theory of operation: nothing in the simulator reads a real clock. Time is an
integer count of nanoseconds that only moves when the driver pops the next
event from a heap ordered by (time, sequence number). The sequence number is
the insertion order, so two events due at the same instant always run in the
order they were scheduled: with seeded randomness everywhere else, this makes
a run a pure function of its seed.
"""

from __future__ import annotations

import heapq
from typing import Any, NamedTuple

NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000


class Event(NamedTuple):
    """One scheduled event: `kind` names the handler, `payload` its argument.

    A tuple so the heap compares in C; `seq` is unique, so the comparison never
    reaches `kind` or `payload`.
    """

    at_ns: int
    seq: int
    kind: str
    payload: Any = None


class VirtualClock:
    """A monotonic virtual clock with a queue of future events."""

    def __init__(self) -> None:
        self.now_ns = 0
        self._seq = 0
        self._queue: list[Event] = []

    def schedule(self, at_ns: int, kind: str, payload: Any = None) -> Event:
        """Queue `kind` to run at `at_ns` (never earlier than now)."""
        event = Event(max(at_ns, self.now_ns), self._seq, kind, payload)
        self._seq += 1
        heapq.heappush(self._queue, event)
        return event

    def after(self, delay_ns: int, kind: str, payload: Any = None) -> Event:
        """Queue `kind` to run `delay_ns` from now."""
        return self.schedule(self.now_ns + delay_ns, kind, payload)

    def pop(self, until_ns: int) -> Event | None:
        """Advance to and return the next event due at or before `until_ns`.

        Returns None (and advances the clock to `until_ns`) when nothing is due.
        """
        if self._queue and self._queue[0].at_ns <= until_ns:
            event = heapq.heappop(self._queue)
            self.now_ns = event.at_ns
            return event
        self.now_ns = max(self.now_ns, until_ns)
        return None

    def __len__(self) -> int:
        return len(self._queue)
