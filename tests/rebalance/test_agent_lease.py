"""The primary keeps its lease itself and stops acting when it may have run out
(INVARIANTS M9): renewals guarded on the key's revision, every action checked
and audited first, a lease taken over or expired stops its jobs."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ember.rebalance import agent as agent_module
from ember.rebalance.agent import Job, LeaseLostError, PrimaryAgent
from ember.rebalance.listener import lease_key
from tests.rebalance.fakes import FakeMeta

KEY = lease_key("default", 0)


@pytest.fixture(autouse=True)
def _short_leases(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent_module, "PRIMARY_LEASE_S", 0.4)
    monkeypatch.setattr(agent_module, "RENEW_EVERY_S", 0.1)


def _agent(tmp_path: Path) -> tuple[PrimaryAgent, list[dict[str, Any]], FakeMeta]:
    events: list[dict[str, Any]] = []
    audit = SimpleNamespace(record=lambda ev, group=None: events.append({**ev, "node": "n1"}))
    runtime = SimpleNamespace(cfg=SimpleNamespace(data_dir=tmp_path), audit=audit, id="n1",
                              failpoints=SimpleNamespace(any_enabled=False))  # fmt: skip
    meta = FakeMeta()
    return PrimaryAgent(runtime, meta, peers=None), events, meta  # type: ignore[arg-type]


def _job() -> Job:
    return Job("rebalance", "default", 0, 50, ["n1"], ["n1", "n2"], request_revision=51)


def test_a_grant_takes_the_key_and_renewals_keep_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        agent, events, meta = _agent(tmp_path)
        granted = meta.put(KEY, {"holder": "n1"})
        assert await agent.grant("default", 0, granted, last_seen=granted - 1)
        assert meta.kv[KEY][1] > granted, "the grant did not write the key itself"
        assert agent.is_primary("default", 0)
        await asyncio.sleep(1.0)  # well past one lease: only renewals keep it
        assert agent.is_primary("default", 0)
        assert meta.invokes >= 5
        agent._acting(_job(), "change-peers")
        acting = [e for e in events if e["kind"] == "primary-acting"]
        assert acting[-1]["primary_lease"] == agent.leases["default/0"].revision
        assert acting[-1]["act"] == "change-peers"
        await agent.stop()

    asyncio.run(scenario())


def test_a_key_rewritten_by_the_driver_stops_the_job(tmp_path: Path) -> None:
    async def scenario() -> None:
        agent, events, meta = _agent(tmp_path)

        async def forever(_job: Any) -> None:
            await asyncio.sleep(3600)

        agent._rebalance = forever  # type: ignore[method-assign]
        assert await agent.grant("default", 0, meta.put(KEY, {"holder": "n1"}), last_seen=0)
        body = {"zone": "default", "partition": 0, "revision": 60, "pending_revision": 50,
                "old": ["n1"], "new": ["n1", "n2"]}  # fmt: skip
        assert agent.request("rebalance", body, ignore_last_seen=False) == {"state": "started"}
        task = agent.jobs["default/0"].task
        meta.put(KEY, {"holder": "n2"})  # the driver moved the lease away
        await asyncio.sleep(0.3)
        assert not agent.is_primary("default", 0)
        assert "default/0" not in agent.jobs
        assert task is not None
        assert task.cancelled()
        lost = [e for e in events if e["kind"] == "primary-lease-lost"]
        assert [e["reason"] for e in lost] == ["taken over"]
        await agent.stop()

    asyncio.run(scenario())


def test_a_primary_cut_off_from_the_metastore_stops_acting_in_time(tmp_path: Path) -> None:
    async def scenario() -> None:
        agent, events, meta = _agent(tmp_path)
        assert await agent.grant("default", 0, meta.put(KEY, {"holder": "n1"}), last_seen=0)
        valid_until = agent.leases["default/0"].valid_until
        meta.down = True
        agent._acting(_job(), "write-done")  # still within the lease
        await asyncio.sleep(0.4)
        assert asyncio.get_running_loop().time() >= valid_until
        with pytest.raises(LeaseLostError):
            agent._acting(_job(), "write-done")
        assert not agent.is_primary("default", 0)
        lost = [e for e in events if e["kind"] == "primary-lease-lost"]
        assert [e["reason"] for e in lost] == ["expired"]
        await agent.stop()

    asyncio.run(scenario())


def test_a_grant_of_a_key_rewritten_meanwhile_is_refused(tmp_path: Path) -> None:
    async def scenario() -> None:
        agent, _, meta = _agent(tmp_path)
        granted = meta.put(KEY, {"holder": "n1"})
        meta.put(KEY, {"holder": "n2"})  # another driver's write overtook the grant
        assert not await agent.grant("default", 0, granted, last_seen=0)
        assert not agent.is_primary("default", 0)

    asyncio.run(scenario())
