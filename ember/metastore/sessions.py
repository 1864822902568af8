"""Client sessions: a metastore write sent again applies once.

Theory of operation. A client that hears no answer (a timeout, a leader that
lost its term after appending) cannot tell whether its command applied, so
`MetaClient` sends it again, perhaps to another node. Without help the log
then holds the command twice: a put applies twice, and a guarded invoke whose
first copy applied fails its own compare on the second and answers
`succeeded: false` for a write that took effect. The Raft thesis (Ongaro,
section 6.3) answers this with client sessions, as here:

- A write carries `session = {client, seq, lowest_open}`: the client's id
  (unique to one client process), the command's number (from 1, one per
  command, the same on every attempt) and the lowest number the client still
  awaits an answer for. Reads carry none: repeating one changes nothing.
- The state machine keeps, per client, the results of the commands it
  applied whose number is at least `lowest_open`. A copy of a remembered
  command is answered with the remembered result and applies nothing. A
  command below `lowest_open` is one the client no longer awaits (it was
  answered, or given up on): it applies nothing and answers `stale-request`,
  so a late copy cannot take effect after the client reported it.
- A client not seen for SESSION_RETAIN entries is forgotten (its process is
  gone: a restarted node is a new client). The sweep runs at fixed indexes,
  so every replica forgets the same sessions at the same entry. A repeat
  arrives within the client's deadline (seconds), far inside that bound.

Everything here is a pure function of the log, so sessions ride in the
machine's snapshot and every replica answers a repeat alike.
"""

from __future__ import annotations

from typing import Any, TypeGuard

import msgspec

from ember.metastore.state import MetastoreError

SESSION_RETAIN = 100_000  # entries since a client's last write before it is forgotten
SWEEP_EVERY = 1024  # entries between sweeps for forgotten clients
STALE = "stale-request"
READS = frozenset({"get", "range"})  # repeating one changes nothing: no session


class Request(msgspec.Struct, frozen=True):
    """One write's place in its client's session."""

    client: str
    seq: int
    lowest_open: int


class ClientSession(msgspec.Struct, array_like=True):
    """What the machine remembers of one client."""

    lowest_open: int
    last_index: int
    results: dict[int, Any]


def request_of(cmd: dict[str, Any]) -> Request | None:
    """The command's session fields, or None; MetastoreError if malformed."""
    raw = cmd.get("session")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise MetastoreError(f"session must be an object {{client, seq, lowest_open}}: {raw!r}")
    client, seq, lowest = raw.get("client"), raw.get("seq"), raw.get("lowest_open")
    if not isinstance(client, str) or not 0 < len(client) <= 200:
        raise MetastoreError(f"session client must be a string of 1 to 200 characters: {client!r}")
    if _count(seq) and _count(lowest) and lowest <= seq:
        return Request(client, seq, lowest)
    raise MetastoreError(
        f"session seq and lowest_open must be integers with 1 <= lowest_open <= seq: {raw!r}"
    )


def _count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


class Sessions(msgspec.Struct):
    """Every live client's session, keyed by client id (snapshotted whole)."""

    clients: dict[str, ClientSession] = msgspec.field(default_factory=dict)

    def answered(self, req: Request, index: int) -> tuple[bool, Any]:
        """(True, result) when `req` needs no applying: a repeat (its first
        result) or stale (an error result); (False, None) when it is new."""
        session = self.clients.get(req.client)
        if session is None:
            session = self.clients[req.client] = ClientSession(req.lowest_open, index, {})
        session.last_index = index
        if req.lowest_open > session.lowest_open:
            session.lowest_open = req.lowest_open
            session.results = {s: r for s, r in session.results.items() if s >= req.lowest_open}
        if req.seq in session.results:
            return True, session.results[req.seq]
        if req.seq < session.lowest_open:
            message = (
                f"command {req.seq} of client {req.client} is no longer awaited "
                f"(the client awaits {session.lowest_open} and above): not applied"
            )
            return True, {"error": message, "code": STALE}
        return False, None

    def remember(self, req: Request, result: Any) -> None:
        """Keep a new command's result for its repeats."""
        self.clients[req.client].results[req.seq] = result

    def sweep(self, index: int) -> None:
        """Forget clients idle for SESSION_RETAIN entries; runs every SWEEP_EVERY."""
        if index % SWEEP_EVERY:
            return
        idle = [c for c, s in self.clients.items() if s.last_index < index - SESSION_RETAIN]
        for client in idle:
            del self.clients[client]
