"""Errors the Raft core raises to its caller.

Every error is a `RaftError` whose message says what was wrong and why, so a
driver can translate it at one boundary (an HTTP status, a CLI message).
"""

from __future__ import annotations


class RaftError(Exception):
    """Base of every error the Raft core raises."""


class NotLeader(RaftError):  # noqa: N818 -- name fixed by docs/raft-api.md
    """The request needs the leader (or a leader not busy transferring)."""

    def __init__(self, reason: str, leader: str | None = None) -> None:
        super().__init__(reason)
        self.leader = leader


class ChangeBusy(RaftError):  # noqa: N818 -- name fixed by docs/raft-api.md
    """A membership change is already in flight in this group, or (`settling`)
    a new leader has not yet committed what a change must start from.

    A settling leader takes a change on its own within a heartbeat round or
    two, with nothing else to finish first, so a caller may send it again."""

    def __init__(self, reason: str, *, settling: bool = False) -> None:
        super().__init__(reason)
        self.settling = settling


class StaleToken(RaftError):  # noqa: N818 -- name fixed by docs/raft-api.md
    """The change request's token is older than the configuration in force."""


class WrongTerm(RaftError):  # noqa: N818 -- name fixed by docs/raft-api.md
    """The change request names a term other than the leader's current one."""


class InvalidConfig(RaftError):  # noqa: N818 -- name fixed by docs/raft-api.md
    """A requested configuration breaks a precondition (empty, duplicates, ...)."""


class LogError(RaftError):
    """An internal invariant of the log would break (a bug, never bad input)."""
