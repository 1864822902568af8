"""NodeRuntime.stop_group / start_group on one in-process node: a stopped replica is
not hosted, refuses calls with NotLeader (nothing proposed), keeps its state, and
resumes where it stopped."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from ember.kv import make_machines
from ember.kv.statemachine import Command, encode_command
from ember.raft import NotLeader
from ember.runtime import NodeConfig, NodeRuntime, OutcomeUnknown, PeerAddr
from ember.runtime.group import Proposal
from tests.node.cluster import free_ports

WAIT_S = 20.0


async def _until(predicate: Callable[[], bool], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def _runtime(root: Path) -> NodeRuntime:
    raft, http = free_ports(2)
    cfg = NodeConfig(
        node_id="n1",
        data_dir=root,
        peers={"n1": PeerAddr("127.0.0.1", raft, http)},
        http_listen=("127.0.0.1", http),
        raft_listen=("127.0.0.1", raft),
        bootstrap=("n1",),
        partitions=2,
        tick_ms=10,
    )
    return NodeRuntime(cfg, make_machines(2))


def _proposal(group: str, data: bytes) -> Proposal:
    return Proposal(group, data, asyncio.get_running_loop().create_future())


async def _put(rt: NodeRuntime, key: str, value: int) -> None:
    proposal = _proposal("part-0", encode_command(Command(op="put", key=key, value=value)))
    rt.submit(proposal)
    await asyncio.wait_for(proposal.future, WAIT_S)


def test_a_stopped_replica_is_not_hosted_and_resumes(tmp_path: Path) -> None:
    async def run() -> None:
        rt = _runtime(tmp_path)
        await rt.start()
        try:
            await _until(lambda: rt.leader_of("part-0") == "n1", "a leader")
            await _put(rt, "a", 1)
            applied = rt.groups["part-0"].sm.applied
            assert rt.stop_group("part-0", "test")
            assert not rt.stop_group("part-0")  # already stopped
            st = rt.status()
            assert "part-0" not in st["groups"]
            assert "part-1" in st["groups"]
            assert st["stopped"] == ["part-0"]
            with pytest.raises(NotLeader):
                rt.submit(_proposal("part-0", b"x"))
            with pytest.raises(KeyError):
                rt.submit(_proposal("part-9", b"x"))
            await asyncio.sleep(0.2)  # ticks go by: a stopped group does not move
            assert rt.stopped["part-0"].sm.applied == applied
            assert rt.start_group("part-0", "test")
            assert not rt.start_group("part-0")
            await _until(lambda: rt.leader_of("part-0") == "n1", "the leader again")
            await _put(rt, "b", 2)
            assert rt.groups["part-0"].sm.applied > applied
        finally:
            await rt.stop()
        kinds = [e["kind"] for e in rt_events(tmp_path) if e.get("group") == "part-0"]
        assert kinds.index("replica-stopped") < kinds.index("replica-started")

    asyncio.run(run())


def test_stopping_fails_the_proposals_waiting_on_it_as_unknown(tmp_path: Path) -> None:
    async def run() -> None:
        rt = _runtime(tmp_path)
        await rt.start()
        try:
            await _until(lambda: rt.leader_of("part-0") == "n1", "a leader")

            def park(group: object) -> asyncio.Future[object]:
                # A waiter the loop has not answered yet (index far ahead).
                fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()
                rt.groups["part-0"].waiters[10**9] = (0, fut)
                return fut

            fut = await rt.call("part-0", park)
            rt.stop_group("part-0")
            with pytest.raises(OutcomeUnknown):
                await fut
        finally:
            await rt.stop()

    asyncio.run(run())


def rt_events(root: Path) -> list[dict[str, object]]:
    """The node's audit events."""
    lines = (root / "events.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]
