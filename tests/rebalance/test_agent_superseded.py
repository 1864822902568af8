"""A rebalance job whose pending was rewritten starts no change.

Sim seed 7125 of the cancel-race mix: the placement driver moved a
partition's primary lease while the old primary was cut off, so no revoke
reached it; its job went on re-submitting a rebalance that had since been
cancelled and replaced, and the group moved to peers no assignment named
any more. The job now reads pending before each changePeers.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ember.metastore.client import MetaUnavailable
from ember.rebalance.agent import Job, Lease, PrimaryAgent

OLD, NEW = ["n1", "n2", "n3"], ["n1", "n2", "n3", "n4", "n5"]


class _Meta:
    def __init__(self, pending_revision: int | None) -> None:
        self.pending_revision = pending_revision

    async def get(self, _key: str) -> dict[str, Any]:
        if self.pending_revision is None:
            raise MetaUnavailable("no leader", "not-applied")
        return {"value": NEW, "mod_revision": self.pending_revision}


class _Peers:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def leader_status(self, _group: str) -> tuple[str, dict[str, Any]]:
        return "n1", {"conf": {"peers": OLD, "joint": False}, "stage": "none"}

    async def call(self, _node: str, _method: str, path: str, *_: Any, **__: Any) -> Any:
        self.calls.append(path)
        return 202, {"id": 1}


def _run(tmp_path: Path, pending_revision: int | None) -> tuple[Job, list[str], list[dict]]:
    async def scenario() -> tuple[Job, list[str], list[dict]]:
        events: list[dict[str, Any]] = []
        audit = SimpleNamespace(record=lambda ev, group=None: events.append(ev))
        runtime = SimpleNamespace(cfg=SimpleNamespace(data_dir=tmp_path), audit=audit, id="n2")
        peers = _Peers()
        agent = PrimaryAgent(runtime, _Meta(pending_revision), peers)  # type: ignore[arg-type]

        async def ready(_job: Job) -> bool:
            return True

        agent._await_replicas = ready  # type: ignore[method-assign]
        job = Job("rebalance", "default", 2, 225, OLD, NEW, request_revision=227)
        agent.leases["default/2"] = Lease(revision=230, valid_until=float("inf"))
        with contextlib.suppress(TimeoutError):  # still waiting for the group: live
            await asyncio.wait_for(agent._rebalance(job), 0.2)
        return job, peers.calls, events

    return asyncio.run(scenario())


def test_a_job_whose_pending_was_replaced_stops_without_a_change(tmp_path: Path) -> None:
    job, calls, events = _run(tmp_path, pending_revision=288)
    assert calls == []
    assert job.state == "superseded"
    dropped = [e for e in events if e.get("direction") == "dropped"]
    assert [(e["request_revision"], e["reason"]) for e in dropped] == [(227, "pending replaced")]


def test_a_job_still_serving_pending_submits_its_change(tmp_path: Path) -> None:
    job, calls, _ = _run(tmp_path, pending_revision=225)
    assert calls == ["/admin/change-peers/submit"]
    assert job.state == "running"


def test_a_job_that_cannot_read_pending_waits_without_a_change(tmp_path: Path) -> None:
    job, calls, _ = _run(tmp_path, pending_revision=None)
    assert calls == []
    assert job.state == "running"
