"""Trace recording and hashing: the evidence that a seed replays bit-exactly.

Every event the driver handles is folded into a running SHA-256 as a
canonical msgpack record (time, kind, node, detail). Two runs of one seed
must end with the same hexdigest; the last `keep` records stay in memory so
a failure can show what led up to it.
"""

from __future__ import annotations

import hashlib
from collections import deque
from typing import Any

import msgspec

_encoder = msgspec.msgpack.Encoder(order="deterministic")


class Trace:
    """A running hash over every recorded event plus a short tail of them."""

    def __init__(self, keep: int = 200) -> None:
        self._hash = hashlib.sha256()
        self.count = 0
        self.tail: deque[tuple[int, str, str, Any]] = deque(maxlen=keep)

    def record(self, at_ns: int, kind: str, node: str, detail: Any = None) -> None:
        """Fold one event into the hash; `detail` is any msgspec-encodable value."""
        self._hash.update(_encoder.encode((at_ns, kind, node, detail)))
        self.count += 1
        self.tail.append((at_ns, kind, node, detail))

    def hexdigest(self) -> str:
        """The hash of everything recorded so far."""
        return self._hash.hexdigest()

    def format_tail(self, limit: int = 30) -> list[str]:
        """The last `limit` records, one readable line each."""
        lines = []
        for at_ns, kind, node, detail in list(self.tail)[-limit:]:
            lines.append(f"{at_ns / 1e9:10.4f}s {node:>4} {kind} {detail!r}"[:200])
        return lines
