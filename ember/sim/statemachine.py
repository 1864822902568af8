"""The simulator's replicated state machine: an append-only KV with a digest.

Each normal entry's data is `key=value`; applying it appends the value to the
key's list (a client read's entry, `?key#n`, changes nothing). Every applied
entry (normal, config or noop) folds
(index, kind, data) into a running SHA-256, so two replicas that applied the
same entries in the same order hold the same digest, and convergence after a
heal is one comparison.
"""

from __future__ import annotations

import hashlib

import msgspec

from ember.raft import Entry
from ember.sim.clients import READ_PREFIX


class KvState(msgspec.Struct, kw_only=True):
    """What a snapshot carries: the applied index, the digest and the data."""

    applied: int = 0
    digest: str = hashlib.sha256(b"").hexdigest()
    data: dict[str, list[str]] = msgspec.field(default_factory=dict)


class StateMachine:
    """Applies committed entries in order; snapshots to and from bytes."""

    def __init__(self) -> None:
        self.state = KvState()

    @property
    def applied(self) -> int:
        return self.state.applied

    @property
    def digest(self) -> str:
        return self.state.digest

    def apply(self, entry: Entry) -> None:
        """Apply the next entry; entries must arrive in index order."""
        if entry.index != self.state.applied + 1:
            raise ValueError(
                f"apply out of order: entry {entry.index} after applied {self.state.applied}"
            )
        if entry.kind == "normal" and entry.data and not entry.data.startswith(READ_PREFIX):
            key, _, value = entry.data.decode().partition("=")
            self.state.data.setdefault(key, []).append(value)
        h = hashlib.sha256(self.state.digest.encode())
        h.update(f"{entry.index}:{entry.kind}:".encode())
        h.update(entry.data)
        self.state.digest = h.hexdigest()
        self.state.applied = entry.index

    def snapshot(self) -> bytes:
        """The whole state as bytes (what `RawNode.compact` is handed)."""
        return msgspec.msgpack.encode(self.state)

    def restore(self, data: bytes, index: int) -> None:
        """Replace the state with a snapshot taken at `index`."""
        state = msgspec.msgpack.decode(data, type=KvState) if data else KvState()
        if state.applied != index:
            raise ValueError(f"snapshot data is at {state.applied}, its meta says {index}")
        self.state = state

    def values(self, key: str) -> list[str]:
        """The values appended to `key`, in order."""
        return list(self.state.data.get(key, []))
