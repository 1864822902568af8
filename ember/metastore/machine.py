"""The metastore group's replicated state machine: commands through the log.

Every command, reads included, is one msgpack-encoded log entry, so a read's
answer reflects every write committed before it (linearizable, as the KV
table does). Applying is deterministic, and so is automatic compaction (at
fixed revision distances), so every replica holds the same state and the
same watchable history. Every applied entry folds into a running SHA-256
(the `applied` audit event's `digest`: the log as applied); `content_digest`
hashes what the store holds (its revision and compaction point, then every
key with its value, create and mod revision and version, in key order),
computed only when asked (the `applied` event's `state`), never per apply.

Commands (dicts): `{op: get, key}`, `{op: range, key|prefix, revision?}`,
`{op: put, key, value}`, `{op: delete, key}`, `{op: invoke, spec}`,
`{op: compact, revision}`. A malformed command applies as an error result
(`{"error": message}`) on every replica alike, never an exception. A write
may carry `session` (ember.metastore.sessions): a repeat of one already
applied answers its first result and applies nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import msgspec

from ember.metastore.sessions import Sessions, request_of
from ember.metastore.state import Event, MetaState, MetastoreError
from ember.raft import Entry

# Automatic compaction keeps at least this many revisions of history.
DEFAULT_RETAIN = 5000


class _Snapshot(msgspec.Struct, kw_only=True):
    applied: int
    digest: str
    state: MetaState
    sessions: Sessions = msgspec.field(default_factory=Sessions)


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder()
_snap_decoder = msgspec.msgpack.Decoder(_Snapshot)


def encode(cmd: dict[str, Any]) -> bytes:
    """The bytes proposed to Raft for a command."""
    return _encoder.encode(cmd)


def execute(state: MetaState, cmd: Any) -> Any:
    """Apply one decoded command to `state`; MetastoreError if it is malformed."""
    if not isinstance(cmd, dict):
        raise MetastoreError(f"a command must be an object, got {cmd!r}")
    op = cmd.get("op")
    if op == "get":
        return state.get(_str(cmd, "key"))
    if op == "range":
        rev = cmd.get("revision")
        if rev is not None and not isinstance(rev, int):
            raise MetastoreError("range revision must be an integer")
        return state.range(key=cmd.get("key"), prefix=cmd.get("prefix"), revision=rev)
    if op == "put":
        if "value" not in cmd:
            raise MetastoreError("put needs a value")
        return {"revision": state.put(_str(cmd, "key"), cmd["value"])}
    if op == "delete":
        key = _str(cmd, "key")
        deleted = int(key in state.kv)  # etcd's count: a client can tell a no-op delete
        return {"revision": state.delete(key), "deleted": deleted}
    if op == "invoke":
        spec = cmd.get("spec")
        if not isinstance(spec, dict):
            raise MetastoreError(f"invoke needs a spec object, got {spec!r}")
        return state.invoke(spec)
    if op == "compact":
        rev = cmd.get("revision")
        if not isinstance(rev, int):
            raise MetastoreError("compact needs an integer revision")
        return {"compact_revision": state.compact(rev), "revision": state.revision}
    raise MetastoreError(f"unknown metastore op {op!r}")


def _str(cmd: dict[str, Any], field: str) -> str:
    value = cmd.get(field)
    if not isinstance(value, str) or not value:
        raise MetastoreError(f"{cmd.get('op')} needs a non-empty string {field}")
    return value


class MetastoreMachine:
    """The `meta` group's state machine (ember.runtime.StateMachine)."""

    def __init__(self, retain: int = DEFAULT_RETAIN) -> None:
        self.state = MetaState()
        self.sessions = Sessions()
        self.retain = retain
        self._applied = 0
        self._digest = hashlib.sha256(b"").hexdigest()
        # Called with the new events after each apply (watch hubs wake on it).
        self.listeners: list[Callable[[list[Event]], None]] = []

    @property
    def applied(self) -> int:
        """Index of the last applied entry."""
        return self._applied

    @property
    def digest(self) -> str:
        """Running hash of every applied entry."""
        return self._digest

    def content_digest(self) -> str:
        """Hash of the store's content now (see the module doc)."""
        st = self.state
        body = (st.revision, st.compact_revision, sorted(st.kv.items()))
        return hashlib.sha256(_encoder.encode(body)).hexdigest()

    def apply(self, entry: Entry) -> Any:
        """Apply the next entry; the command's result (None for non-commands)."""
        if entry.index != self._applied + 1:
            raise ValueError(f"apply out of order: {entry.index} after {self._applied}")
        result: Any = None
        before = len(self.state.events)
        new: list[Event] = []
        if entry.kind == "normal" and entry.data:
            result = self._command(entry)
            new = self.state.events[before:]
            self._maybe_compact()
        self.sessions.sweep(entry.index)
        h = hashlib.sha256(self._digest.encode())
        h.update(f"{entry.index}:{entry.kind}:".encode())
        h.update(entry.data)
        self._digest = h.hexdigest()
        self._applied = entry.index
        if new and self.listeners:
            for listener in self.listeners:
                listener(new)
        return result

    def _command(self, entry: Entry) -> Any:
        try:
            cmd = _decoder.decode(entry.data)
            req = request_of(cmd) if isinstance(cmd, dict) else None
        except (MetastoreError, msgspec.DecodeError) as err:
            return {"error": str(err)}
        if req is not None:
            done, answer = self.sessions.answered(req, entry.index)
            if done:
                return answer
        try:
            result = execute(self.state, cmd)
        except MetastoreError as err:
            result = {"error": str(err)}
        if req is not None:
            self.sessions.remember(req, result)
        return result

    def _maybe_compact(self) -> None:
        # Deterministic: the same revisions on every replica.
        st = self.state
        if self.retain and st.revision - st.compact_revision >= 2 * self.retain:
            st.compact(st.revision - self.retain)

    def snapshot(self) -> bytes:
        """The whole state as bytes."""
        snap = _Snapshot(
            applied=self._applied, digest=self._digest, state=self.state, sessions=self.sessions
        )
        return _encoder.encode(snap)

    def restore(self, data: bytes, index: int) -> None:
        """Replace the state with a snapshot taken at `index`."""
        if not data:
            self.state, self.sessions, self._applied = MetaState(), Sessions(), index
            return
        snap = _snap_decoder.decode(data)
        if snap.applied != index:
            raise ValueError(f"snapshot data is at {snap.applied}, its meta says {index}")
        self.state, self._applied, self._digest = snap.state, snap.applied, snap.digest
        self.sessions = snap.sessions
