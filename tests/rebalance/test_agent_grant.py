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


class _Audit:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def record(self, event: dict[str, Any], group: str | None = None) -> None:
        self.events.append({**event, "node": "n1", "group": group})


def _agent(tmp_path: Path) -> tuple[PrimaryAgent, _Audit]:
    audit = _Audit()
    runtime = SimpleNamespace(cfg=SimpleNamespace(data_dir=tmp_path), audit=audit, id="n1")
    return PrimaryAgent(runtime, meta=None, peers=None), audit  # type: ignore[arg-type]


def _body(revision: int) -> dict[str, Any]:
    return {"zone": "default", "partition": 0, "revision": revision, "pending_revision": 60,
            "old": ["n1", "n2", "n3"], "new": ["n1", "n2", "n4"]}  # fmt: skip


def test_a_grant_past_a_running_jobs_request_drops_it(tmp_path: Path) -> None:
    async def scenario() -> tuple[PrimaryAgent, _Audit, bool]:
        agent, audit = _agent(tmp_path)

        async def forever(_job: Any) -> None:
            await asyncio.sleep(3600)

        agent._rebalance = forever  # type: ignore[method-assign]
        agent.grant("default", 0, lease_revision=61, last_seen=60)
        assert agent.request("rebalance", _body(69), ignore_last_seen=False) == {"state": "started"}
        task = agent.jobs["default/0"].task
        agent.grant("default", 0, lease_revision=79, last_seen=78)  # a new driver's grant
        await asyncio.sleep(0)
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
        agent, _ = _agent(tmp_path)

        async def forever(_job: Any) -> None:
            await asyncio.sleep(3600)

        agent._rebalance = forever  # type: ignore[method-assign]
        agent.grant("default", 0, lease_revision=61, last_seen=60)
        agent.request("rebalance", _body(69), ignore_last_seen=False)
        agent.grant("default", 0, lease_revision=62, last_seen=61)  # e.g. a renewal
        job = agent.jobs["default/0"]
        assert job.task is not None
        job.task.cancel()
        return agent

    assert "default/0" in asyncio.run(scenario()).jobs
