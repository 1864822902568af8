"""The user table: keys hashed to partitions, each partition a Raft group.

Every operation, reads included, is proposed to its partition's log on the
partition's leader and answered once applied: a read's entry is ordered
after every write committed before it, so reads are linearizable, and a
follower, a learner or a replica still catching up never answers one from
its own (possibly stale) state. A request that reaches a non-leader raises
NotLeader with the leader's id, which the API turns into the leader's
address for the client to retry there.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from typing import Any

from ember.kv.statemachine import Command, PartitionMachine, encode_command
from ember.runtime.group import StateMachine
from ember.runtime.node import NodeRuntime, partition_group

DEFAULT_PARTITIONS = 8


class NotProposed(Exception):  # noqa: N818 -- reads as the outcome it reports
    """The deadline passed before the command was proposed: it was certainly not applied."""


class ResultUnknown(Exception):  # noqa: N818 -- reads as the outcome it reports
    """The command was proposed but no result came in time: it may have been applied."""


def partition_of(key: str, partitions: int) -> int:
    """The partition of `key`: CRC-32 of its UTF-8 bytes, stable across processes."""
    return zlib.crc32(key.encode()) % partitions


def make_machines(partitions: int) -> dict[str, StateMachine]:
    """A fresh state machine for each partition group (`part-0` .. `part-N-1`)."""
    return {partition_group(i): PartitionMachine() for i in range(partitions)}


class KvTable:
    """Runs KV commands against the node's partition groups."""

    def __init__(self, runtime: NodeRuntime, partitions: int) -> None:
        self.runtime = runtime
        self.partitions = partitions

    def group_of(self, key: str) -> str:
        """The Raft group that holds `key`."""
        return partition_group(partition_of(key, self.partitions))

    async def execute(self, cmd: Command, timeout_s: float) -> Any:
        """Propose `cmd` on its partition and return its result once applied.

        Raises NotLeader (not proposed: retry at the leader), NotProposed,
        ResultUnknown (timeout after proposing), ProposalDropped (another
        entry took its index) or OutcomeUnknown.
        """
        deadline = time.monotonic() + timeout_s
        group = self.group_of(cmd.key)
        try:
            fut = await asyncio.wait_for(
                self.runtime.propose(group, encode_command(cmd)), timeout_s
            )
        except TimeoutError:
            # wait_for cancelled the queued call, and the loop skips cancelled
            # calls, so the command never reached the log.
            raise NotProposed(f"not proposed within {timeout_s:.3f}s (node busy)") from None
        remaining = max(0.0, deadline - time.monotonic())
        try:
            return await asyncio.wait_for(asyncio.shield(fut), remaining)
        except TimeoutError:
            raise ResultUnknown(
                f"proposed to {group} but not applied within {timeout_s:.3f}s"
            ) from None
