"""The leader's change-peers context: jraft's stages as a transition table.

Theory of operation. A leader holds at most one `ChangeContext`. Its stage
moves only through `fire(event)`, which looks the (stage, event) pair up in
TRANSITIONS and refuses anything else, so an impossible move is a loud bug
rather than a silent corruption:

    NONE --start--> CATCHING_UP --caught-up--> JOINT --joint-committed--> STABLE
      ^                 |                                                   |
      +--catchup-failed-+          (any) --reset--> NONE                    |
      +-------------------------------stable-committed----------------------+

- CATCHING_UP: the new voters are replicated as non-voters. Each has a wait
  of one election timeout; a wait that times out is retried up to
  `max_retries` times, after which the change fails with ECATCHUP. A peer is
  caught up once it has acknowledged an append or snapshot and its match is
  within `margin` of the leader's last index.
- JOINT: the entry C(old, new) is in the log (in force on append); it commits
  only with a majority of old AND of new.
- STABLE: the entry C(new) is in the log; its commit ends the change.
- reset: the leader stepped down (status None, as in jraft).
- inherit-joint: a new leader found C(old, new) in force and finishes it.
- skip-joint exists only for the planted bug of the same name.

The node performs the side effects (appending entries, events, results);
this module only decides which stage comes next and tracks catch-up waits.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .facade import ChangeTicket
from .messages import ConfState, NodeId


class Stage(enum.Enum):
    """Where the leader's change is (the values are the events' `stage`)."""

    NONE = "none"
    CATCHING_UP = "catching-up"
    JOINT = "joint"
    STABLE = "stable"


class Event(enum.Enum):
    """What happened to the change; TRANSITIONS maps (stage, event) to a stage."""

    START = "start"
    CAUGHT_UP = "caught-up"
    CATCHUP_FAILED = "catchup-failed"
    JOINT_COMMITTED = "joint-committed"
    STABLE_COMMITTED = "stable-committed"
    RESET = "reset"
    INHERIT_JOINT = "inherit-joint"
    SKIP_JOINT = "skip-joint"  # planted bug only


TRANSITIONS: dict[tuple[Stage, Event], Stage] = {
    (Stage.NONE, Event.START): Stage.CATCHING_UP,
    (Stage.NONE, Event.INHERIT_JOINT): Stage.JOINT,
    (Stage.CATCHING_UP, Event.CAUGHT_UP): Stage.JOINT,
    (Stage.CATCHING_UP, Event.SKIP_JOINT): Stage.STABLE,
    (Stage.CATCHING_UP, Event.CATCHUP_FAILED): Stage.NONE,
    (Stage.CATCHING_UP, Event.RESET): Stage.NONE,
    (Stage.JOINT, Event.JOINT_COMMITTED): Stage.STABLE,
    (Stage.JOINT, Event.RESET): Stage.NONE,
    (Stage.STABLE, Event.STABLE_COMMITTED): Stage.NONE,
    (Stage.STABLE, Event.RESET): Stage.NONE,
}


class TransitionError(Exception):
    """An event that the current stage does not accept: a bug in the node."""


@dataclass
class CatchUpWait:
    """One new peer the leader waits for."""

    peer: NodeId
    remaining_ticks: int
    attempt: int = 1


@dataclass
class Timeout:
    """A catch-up wait that timed out; `exhausted` means no retry is left."""

    peer: NodeId
    attempt: int
    exhausted: bool


class ChangeContext:
    """The leader's single in-flight membership change."""

    def __init__(
        self,
        ticket: ChangeTicket | None,
        token: int,
        old: ConfState,
        target: ConfState,
        wait_ticks: int,
        max_retries: int,
    ) -> None:
        self.stage = Stage.NONE
        self.ticket = ticket
        self.token = token
        self.old = old
        self.target = target
        self.wait_ticks = wait_ticks
        self.max_retries = max_retries
        self.waiting: dict[NodeId, CatchUpWait] = {}
        self.entry_index = 0  # index of the config entry this stage waits on

    def fire(self, event: Event) -> Stage:
        """Move to the stage TRANSITIONS names for (stage, event)."""
        nxt = TRANSITIONS.get((self.stage, event))
        if nxt is None:
            raise TransitionError(f"change-peers: no transition from {self.stage} on {event}")
        self.stage = nxt
        return nxt

    def new_voters(self) -> list[NodeId]:
        """Voters of the target that are not voters now: they must catch up."""
        return sorted(set(self.target.peers) - set(self.old.peers))

    def start_waits(self, peers: list[NodeId]) -> None:
        """Arm one election-timeout wait per new peer."""
        for p in peers:
            self.waiting[p] = CatchUpWait(p, self.wait_ticks)

    def caught_up(self, peer: NodeId) -> bool:
        """`peer` is within the margin; whether it was being waited for."""
        return self.waiting.pop(peer, None) is not None

    def tick(self) -> list[Timeout]:
        """Count one tick down on every wait; re-arm the ones that retry."""
        out: list[Timeout] = []
        for w in list(self.waiting.values()):
            w.remaining_ticks -= 1
            if w.remaining_ticks > 0:
                continue
            exhausted = w.attempt > self.max_retries
            out.append(Timeout(w.peer, w.attempt, exhausted))
            if not exhausted:
                w.attempt += 1
                w.remaining_ticks = self.wait_ticks
        return out
