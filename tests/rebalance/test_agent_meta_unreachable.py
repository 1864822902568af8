"""A rebalance job rides out a metastore it cannot reach, as it must a partition.

Docker mix (seed 9091, 2026-12-07): n1's job for default/0 finished its
change, then the read before the done write timed out under a partition;
the job died with an ERROR and a traceback (`logs` failed the run) and the
keys waited for the driver to ask again. Its writes already retried; its
reads now do too, for as long as its primary lease lasts.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ember.rebalance import agent as agent_module
from ember.rebalance.agent import Job, Lease, PrimaryAgent
from ember.rebalance.keys import key
from tests.rebalance.fakes import FakeMeta

OLD, NEW = ["n1", "n2", "n3"], ["n1", "n2", "n3", "n4"]


@pytest.fixture(autouse=True)
def _no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    real_sleep = asyncio.sleep  # the agent's module shares asyncio: patching it patches this

    async def instant(_s: float) -> None:
        await real_sleep(0)

    monkeypatch.setattr(agent_module.asyncio, "sleep", instant)


def _finish(tmp_path: Path, meta: FakeMeta, valid_until: float) -> tuple[Job, list[dict]]:
    async def scenario() -> tuple[Job, list[dict]]:
        events: list[dict[str, Any]] = []
        audit = SimpleNamespace(record=lambda ev, group=None: events.append(ev))
        runtime = SimpleNamespace(cfg=SimpleNamespace(data_dir=tmp_path), audit=audit, id="n1",
                                  failpoints=SimpleNamespace(any_enabled=False))  # fmt: skip
        agent = PrimaryAgent(runtime, meta, peers=None)  # type: ignore[arg-type]
        agent.leases["default/0"] = Lease(revision=1, valid_until=valid_until)
        job = Job("rebalance", "default", 0, meta.kv[key("default", 0, "pending")][1], OLD,
                  NEW, request_revision=9)  # fmt: skip
        await agent._guard(job, lambda j: agent._finish(j, NEW))
        return job, events

    return asyncio.run(scenario())


def _meta() -> FakeMeta:
    meta = FakeMeta()
    meta.put(key("default", 0, "stable"), OLD)
    meta.put(key("default", 0, "pending"), NEW)
    return meta


def test_reads_that_time_out_are_retried_and_the_job_finishes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    meta = _meta()
    meta.down_for = 3
    job, events = _finish(tmp_path, meta, valid_until=float("inf"))
    assert job.state == "done"
    assert meta.kv[key("default", 0, "stable")][0] == sorted(NEW)
    assert key("default", 0, "pending") not in meta.kv
    assert [e["direction"] for e in events if e["kind"] == "rebalance-request"] == ["applied"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_job_still_cut_off_when_its_lease_runs_out_stops_quietly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    meta = _meta()
    meta.down = True
    job, events = _finish(tmp_path, meta, valid_until=0.0)  # already past
    assert job.state == "lease-lost"
    assert meta.kv[key("default", 0, "pending")][0] == NEW  # nothing written
    assert not [e for e in events if e["kind"] == "primary-acting"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
