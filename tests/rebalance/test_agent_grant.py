"""A lease grant drops a running job started by a request from before it.

Seed 004: a new primary's last seen starts at the driver's current revision
- 1, so that requests of an inactive driver are skipped. A job one of them
started before the grant must not then finish as if applied: the soak's
seed 105 reported `stale-request-applied` for exactly that.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from checkers.assignments import check_assignments
from ember.rebalance.agent import PrimaryAgent
from ember.rebalance.listener import lease_key
from tests.rebalance.fakes import FakeMeta


class _Audit:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def record(self, event: dict[str, Any], group: str | None = None) -> None:
        self.events.append({**event, "node": "n1", "group": group})


def _agent(tmp_path: Path) -> tuple[PrimaryAgent, _Audit, FakeMeta]:
    audit = _Audit()
    runtime = SimpleNamespace(cfg=SimpleNamespace(data_dir=tmp_path), audit=audit, id="n1")
    meta = FakeMeta()
    return PrimaryAgent(runtime, meta=meta, peers=None), audit, meta  # type: ignore[arg-type]


def _driver_grants(meta: FakeMeta, revision: int) -> int:
    """The lease key as the driver writes it for n1, at `revision`."""
    return meta.put(lease_key("default", 0), {"holder": "n1"}, revision)


def _body(revision: int) -> dict[str, Any]:
    return {"zone": "default", "partition": 0, "revision": revision, "pending_revision": 60,
            "old": ["n1", "n2", "n3"], "new": ["n1", "n2", "n4"]}  # fmt: skip


def test_a_grant_past_a_running_jobs_request_drops_it(tmp_path: Path) -> None:
    async def scenario() -> tuple[PrimaryAgent, _Audit, bool]:
        agent, audit, meta = _agent(tmp_path)

        async def forever(_job: Any) -> None:
            await asyncio.sleep(3600)

        agent._rebalance = forever  # type: ignore[method-assign]
        assert await agent.grant("default", 0, _driver_grants(meta, 61), last_seen=60)
        assert agent.request("rebalance", _body(69), ignore_last_seen=False) == {"state": "started"}
        task = agent.jobs["default/0"].task
        # A new driver's grant (it found the lease stale and wrote it again).
        assert await agent.grant("default", 0, _driver_grants(meta, 79), last_seen=78)
        await asyncio.sleep(0)
        await agent.stop()
        return agent, audit, task is not None and task.cancelled()

    agent, audit, cancelled = asyncio.run(scenario())
    assert "default/0" not in agent.jobs
    assert cancelled
    assert agent.last_seen["default/0"] == 78
    dropped = [e for e in audit.events if e.get("direction") == "dropped"]
    assert [(e["request_revision"], e["last_seen_revision"]) for e in dropped] == [(69, 78)]
    anomalies, _figures = check_assignments({"n1": audit.events})
    assert anomalies == []


def test_a_grant_below_the_jobs_request_keeps_it(tmp_path: Path) -> None:
    async def scenario() -> PrimaryAgent:
        agent, _, meta = _agent(tmp_path)

        async def forever(_job: Any) -> None:
            await asyncio.sleep(3600)

        agent._rebalance = forever  # type: ignore[method-assign]
        revision = _driver_grants(meta, 61)
        assert await agent.grant("default", 0, revision, last_seen=60)
        agent.request("rebalance", _body(69), ignore_last_seen=False)
        # A failover's grant of the lease as it is (no write): nothing to drop.
        assert await agent.grant("default", 0, revision, last_seen=61)
        await agent.stop()
        job = agent.jobs["default/0"]
        assert job.task is not None
        job.task.cancel()
        return agent

    assert "default/0" in asyncio.run(scenario()).jobs
