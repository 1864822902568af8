"""The leader's view of one follower: match/next and flow control.

A follower is in one of three states (as in etcd):
- probe: we do not know where its log matches ours; send one append at a
  time and wait for the answer (or the next heartbeat) before another.
- replicate: it accepted our last probe; stream appends optimistically,
  advancing `next` as we send, with at most `max_inflight` unacknowledged.
- snapshot: the entries it needs are compacted; an InstallSnapshot is in
  flight and nothing else is sent until it answers.
Any message lost in replicate or snapshot state would stall the follower;
`stall_ticks` counts ticks without an acknowledgement while something is
outstanding, and the leader drops back to probe after an election timeout.
"""

from __future__ import annotations

from collections import deque
from typing import Literal

ProgressState = Literal["probe", "replicate", "snapshot"]


class Progress:
    """Replication state of one follower, kept by the leader."""

    def __init__(self, next_index: int, max_inflight: int) -> None:
        self.match = 0
        self.next = next_index
        self.state: ProgressState = "probe"
        self.probe_sent = False
        self.pending_snapshot = 0
        self.max_inflight = max_inflight
        self.inflight: deque[int] = deque()  # last index of each unacked append
        self.recent_active = False
        self.acked = False  # answered at least one append or snapshot successfully
        # Whether it holds the configuration from before the first entry (a
        # snapshot, or the bootstrap configuration sent as one at index 0).
        self.base_known = False
        self.stall_ticks = 0
        # An append or heartbeat went to it since the last heartbeat round: its
        # election timer was reset then, so that round may skip it if
        # `commit_sent` (the highest commit index a message told it, capped as
        # the message caps it) is as far as a heartbeat would tell it.
        self.sent_since_beat = False
        self.commit_sent = 0

    def __repr__(self) -> str:
        return f"Progress({self.state} match={self.match} next={self.next})"

    def become_probe(self) -> None:
        """Probe from just after what we know it has."""
        if self.state == "snapshot":
            self.next = max(self.match + 1, self.pending_snapshot + 1)
        else:
            self.next = self.match + 1
        self._reset("probe")

    def become_replicate(self) -> None:
        """Stream appends from just after its match."""
        self.next = self.match + 1
        self._reset("replicate")

    def become_snapshot(self, index: int) -> None:
        """Wait for the InstallSnapshot at `index` to answer."""
        self._reset("snapshot")
        self.pending_snapshot = index

    def _reset(self, state: ProgressState) -> None:
        self.state = state
        self.probe_sent = False
        self.pending_snapshot = 0
        self.inflight.clear()
        self.stall_ticks = 0

    def is_paused(self) -> bool:
        """Whether the leader must not send it more entries right now."""
        if self.state == "probe":
            return self.probe_sent
        if self.state == "replicate":
            return len(self.inflight) >= self.max_inflight
        return True

    def sent(self, last_index: int, count: int) -> None:
        """Record an append carrying `count` entries up to `last_index`."""
        if self.state == "replicate" and count:
            self.next = last_index + 1
            self.inflight.append(last_index)
        elif self.state == "probe":
            self.probe_sent = True

    def maybe_update(self, index: int) -> bool:
        """The follower matched up to `index`; whether that was news."""
        self.acked = True
        updated = index > self.match
        if index > 0:
            self.base_known = True  # it holds entries, so it got a base from a leader
        if updated:
            # Only progress proves the pipe works: a heartbeat's answer alone
            # must not hide appends lost in flight.
            self.stall_ticks = 0
            self.match = index
            self.probe_sent = False
        self.next = max(self.next, index + 1)
        while self.inflight and self.inflight[0] <= index:
            self.inflight.popleft()
        return updated

    def maybe_decrease(self, rejected: int, hint: int) -> bool:
        """The append after `rejected` failed; back `next` off. False if stale."""
        if self.state == "replicate":
            if rejected <= self.match:
                return False
            self.become_probe()
            return True
        if self.next - 1 != rejected:
            return False
        self.next = max(min(rejected, hint + 1), self.match + 1)
        self.probe_sent = False
        return True

    def has_outstanding(self) -> bool:
        """Whether something we sent still waits for an answer."""
        return bool(self.inflight) or self.state == "snapshot"
