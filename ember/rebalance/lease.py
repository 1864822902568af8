"""The lengths of the primary-replica lease (ember.rebalance.agent keeps it,
ember.placement.driver waits it out), in one place both import, and the
watch a would-be taker keeps on a lease record it does not hold."""

from __future__ import annotations

import time
from typing import Any

# How long a renewal lets a primary act, counted from when it sent the renewal.
PRIMARY_LEASE_S = 3.0
RENEW_EVERY_S = PRIMARY_LEASE_S / 3
# Of a lease: how much sooner the holder stops than another may take over. It
# covers clock-rate differences between nodes and the holder's own delay
# between checking its lease and acting (the driver's own lease uses it too).
LEASE_MARGIN = 0.25


class RecordAges:
    """How long each watched lease record has stayed unchanged, as this node saw
    it: a taker may replace a record only once it is older than the holder's
    lease plus the margin (the holder counts from before it wrote it)."""

    def __init__(self) -> None:
        self._seen: dict[Any, tuple[int, float]] = {}  # name -> (mod revision, first seen)

    def unchanged_for(self, name: Any, mod_revision: int) -> float:
        """Seconds since `name` was first seen at `mod_revision` (0 when new)."""
        now = time.monotonic()
        seen = self._seen.get(name)
        if seen is None or seen[0] != mod_revision:
            self._seen[name] = (mod_revision, now)
            return 0.0
        return now - seen[1]

    def forget(self, name: Any) -> None:
        self._seen.pop(name, None)
