"""The user table: keys hashed to partitions, each partition a Raft group.

Every write is proposed to its partition's log on the partition's leader
and answered once applied. A read goes through ReadIndex instead of the log
(ember.raft._read): the leader takes its commit index, confirms with one
heartbeat round that a quorum still follows it, and answers from its state
machine once that index is applied, so a read sees every write acknowledged
before it began, and costs no log entry and no fsync. Only the leader reads:
a follower, a learner or a replica still catching up never answers one from
its own (possibly stale) state. A request that reaches a non-leader raises
NotLeader with the leader's id, which the API turns into the leader's
address for the client to retry there.

The planted defect `kv.ack-before-commit` (a failpoint, off unless switched
on) breaks exactly that: the leader answers a command from its own log as
soon as the entry is appended, without waiting for a quorum, and answers
reads from that log too. A leader cut off from the majority then
acknowledges writes the next leader never sees and serves reads that miss
the majority's writes: the linearizability checker must find it.

The planted defect `kv.apply-diverge` (`_skews`) makes every follower apply
a put with another value than its leader: the logs, and so the log digests,
stay equal, only the replicas' states differ; the convergence checker must
find it by the `applied` events' content digests (`state`).
"""

from __future__ import annotations

import asyncio
import zlib
from functools import partial
from typing import Any

from ember.failpoints import Failpoints
from ember.kv.statemachine import (
    Command,
    PartitionMachine,
    apply_command,
    decode_command,
    encode_command,
)
from ember.raft import NotLeader
from ember.runtime.group import Group, PendingRead, Proposal, StateMachine
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
        for group in [*runtime.groups.values(), *runtime.stopped.values()]:
            if isinstance(group.sm, PartitionMachine):
                group.sm.skew = partial(_skews, runtime.failpoints, group)

    def group_of(self, key: str) -> str:
        """The Raft group that holds `key`."""
        return partition_group(partition_of(key, self.partitions))

    async def execute(self, cmd: Command, timeout_s: float) -> Any:
        """Propose `cmd` on its partition and return its result once applied.

        Raises NotLeader (not proposed: retry at the leader), NotProposed,
        ResultUnknown (timeout after proposing), ProposalDropped (another
        entry took its index) or OutcomeUnknown.
        """
        group = self.group_of(cmd.key)
        if self.runtime.failpoints.any_enabled and self.runtime.failpoints.hit(
            "kv.ack-before-commit"
        ):
            try:
                return await asyncio.wait_for(
                    self.runtime.call(group, lambda g: _answer_from_log(g, cmd)), timeout_s
                )
            except TimeoutError:
                raise ResultUnknown(f"{group} did not answer within {timeout_s:.3f}s") from None
        loop = asyncio.get_running_loop()
        if cmd.op == "get":
            read = PendingRead(group, partial(_read_key, cmd.key), loop.create_future())
            self.runtime.submit(read)
            try:
                async with asyncio.timeout(timeout_s):
                    return await read.future
            except TimeoutError:
                # A read changes nothing: not served is as good as not sent.
                raise NotProposed(f"read not served within {timeout_s:.3f}s") from None
        proposal = Proposal(group, encode_command(cmd), loop.create_future())
        self.runtime.submit(proposal)
        try:
            async with asyncio.timeout(timeout_s):
                return await proposal.future
        except TimeoutError:
            if proposal.proposed:
                raise ResultUnknown(
                    f"proposed to {group} but not applied within {timeout_s:.3f}s"
                ) from None
            # The timeout cancelled the future, and the loop skips a cancelled
            # proposal, so the command never reached the log.
            raise NotProposed(f"not proposed within {timeout_s:.3f}s (node busy)") from None


def _skews(failpoints: Failpoints, group: Group) -> bool:
    """The planted defect `kv.apply-diverge`: a follower applies a put with
    another value than its leader did (the log is the same: only the state
    differs). Asked per put; costs one check while no failpoint is on."""
    return (failpoints.any_enabled and group.raw.role != "leader"
            and failpoints.hit("kv.apply-diverge") is not None)  # fmt: skip


def _read_key(key: str, sm: StateMachine) -> Any:
    """A get, run in the node loop once the read index is applied."""
    if not isinstance(sm, PartitionMachine):
        raise TypeError("not a KV partition")
    return sm.state.data.get(key)


def _answer_from_log(group: Group, cmd: Command) -> Any:
    """The planted defect: run `cmd` against the leader's whole log, committed
    or not, appending it first unless it is a read; no quorum is awaited.

    Raises NotLeader on a non-leader (as a proposal would), so followers
    still redirect. Only a `PartitionMachine` group is answered this way.
    """
    raw, sm = group.raw, group.sm
    if raw.role != "leader":
        raise NotLeader("not the leader", raw.leader)
    if not isinstance(sm, PartitionMachine):
        raise TypeError(f"{group.id} is not a KV partition")
    upto = raw.log.last_index
    if cmd.op != "get":
        upto = raw.propose(encode_command(cmd)) - 1
    view = dict(sm.state.data)  # values are replaced, never mutated: shallow will do
    for entry in raw.log.slice(sm.applied + 1, upto + 1):
        logged = decode_command(entry)
        if logged is not None:
            apply_command(view, logged)
    return apply_command(view, cmd)
