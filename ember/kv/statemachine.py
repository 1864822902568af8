"""One KV partition's replicated state machine.

Each normal log entry is a msgpack-encoded `Command`. Applying it is
deterministic, so every replica that applies the same entries holds the same
map. The KV table serves reads by ReadIndex (no entry), but a `get` in the
log is still applied as a read, so logs written that way replay the same.
Every applied entry (normal,
config or noop) folds into a running SHA-256, the log digest: replicas that
applied the same entries agree on it. What they hold is compared apart:
`content_digest` hashes the map itself (keys and values, in key order; a
KV key has no revision), computed only when asked (the `applied` audit
event's `state`, every `DIGEST_EVERY` entries and at shutdown, never per
apply), so a replica that applied the same log into another state (a
nondeterministic apply, a bad snapshot restore) shows (docs/events.md).

The planted defect `kv.apply-diverge` (a failpoint; `KvTable` sets `skew`)
makes a replica apply a put's value altered while its log, and so its log
digest, stays the same as everyone's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, Literal

import msgspec

from ember.raft import Entry

Op = Literal["get", "put", "cas", "delete"]


class Command(msgspec.Struct, frozen=True, kw_only=True, array_like=True):
    """A client operation as it travels through the log."""

    op: Op
    key: str
    value: Any = None
    expected: Any = None


class KvState(msgspec.Struct, kw_only=True):
    """What a snapshot carries."""

    applied: int = 0
    digest: str = hashlib.sha256(b"").hexdigest()
    data: dict[str, Any] = msgspec.field(default_factory=dict)


_cmd_encoder = msgspec.msgpack.Encoder()
_cmd_decoder = msgspec.msgpack.Decoder(Command)
_state_decoder = msgspec.msgpack.Decoder(KvState)
_content_encoder = msgspec.msgpack.Encoder()


def content_digest(data: dict[str, Any]) -> str:
    """SHA-256 of a partition's map: its (key, value) pairs in key order."""
    return hashlib.sha256(_content_encoder.encode(sorted(data.items()))).hexdigest()


def skewed(value: Any) -> Any:
    """What `kv.apply-diverge` stores instead of a put's value."""
    return {"diverged": value}


def encode_command(cmd: Command) -> bytes:
    """The bytes proposed to Raft for `cmd`."""
    return _cmd_encoder.encode(cmd)


def decode_command(entry: Entry) -> Command | None:
    """The command a normal entry carries; None if it carries none (or is garbled)."""
    if entry.kind != "normal" or not entry.data:
        return None
    try:
        return _cmd_decoder.decode(entry.data)
    except msgspec.DecodeError:
        return None


def apply_command(data: dict[str, Any], cmd: Command) -> Any:
    """Apply `cmd` to `data` and return its result.

    get -> the value or None; put -> None; delete -> whether the key existed;
    cas -> [ok, value before] (ok when the current value equals `expected`,
    None standing for an absent key).
    """
    if cmd.op == "get":
        return data.get(cmd.key)
    if cmd.op == "put":
        data[cmd.key] = cmd.value
        return None
    if cmd.op == "delete":
        return data.pop(cmd.key, None) is not None
    current = data.get(cmd.key)
    if current == cmd.expected:
        data[cmd.key] = cmd.value
        return [True, current]
    return [False, current]


class PartitionMachine:
    """Applies committed entries in order; snapshots to and from bytes."""

    def __init__(self) -> None:
        self.state = KvState()
        # The planted defect's hook: asked per put, True stores `skewed(value)`.
        self.skew: Callable[[], bool] | None = None

    @property
    def applied(self) -> int:
        """Index of the last applied entry."""
        return self.state.applied

    @property
    def digest(self) -> str:
        """Running hash of every applied entry."""
        return self.state.digest

    def content_digest(self) -> str:
        """Hash of the map as it is now (see the module doc)."""
        return content_digest(self.state.data)

    def apply(self, entry: Entry) -> Any:
        """Apply the next entry and return the command's result (None otherwise).

        An entry whose data does not decode is skipped with result None: only
        the API proposes, so this is a bug, and skipping keeps every replica
        identical rather than stopping one.
        """
        if entry.index != self.state.applied + 1:
            raise ValueError(f"apply out of order: {entry.index} after {self.state.applied}")
        result: Any = None
        cmd = decode_command(entry)
        if cmd is not None:
            if cmd.op == "put" and self.skew is not None and self.skew():
                cmd = msgspec.structs.replace(cmd, value=skewed(cmd.value))
            result = apply_command(self.state.data, cmd)
        h = hashlib.sha256(self.state.digest.encode())
        h.update(f"{entry.index}:{entry.kind}:".encode())
        h.update(entry.data)
        self.state.digest = h.hexdigest()
        self.state.applied = entry.index
        return result

    def snapshot(self) -> bytes:
        """The whole state as bytes."""
        return msgspec.msgpack.encode(self.state)

    def restore(self, data: bytes, index: int) -> None:
        """Replace the state with a snapshot taken at `index`."""
        state = _state_decoder.decode(data) if data else KvState(applied=index)
        if state.applied != index:
            raise ValueError(f"snapshot data is at {state.applied}, its meta says {index}")
        self.state = state
