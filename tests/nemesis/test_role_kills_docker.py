"""Kills aimed at the placement driver and a primary during rebalances hit the role holder.

A 5-node docker cluster of ember with the control plane on (metastore on
n1-n3) and the zone created; an admin thread alters the zone's replica count
so partitions rebalance, and the phase-triggered nemesis kills the
placement driver or a partition's primary at `pending`, `pending-open` and
`joint`. Each kill's completion names the node and when it was applied; the
nodes' own audit events (`placement-driver`, `lease-granted`) say who held
the role then. Marked docker.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import statistics
import time
from pathlib import Path
from typing import Any

import pytest

from checkers.history import load_history, pair
from harness.backends.docker import DockerBackend
from harness.backends.lifecycle import managed_cluster
from harness.control import Control
from harness.db import EmberDB
from harness.dbs.registry import SYSTEMS
from harness.history_writer import HistoryWriter
from harness.interpreter import Interpreter, Reply
from harness.nodehttp import http_json
from nemesis.generator import NemesisSchedule
from nemesis.phase import PhaseWatcher
from nemesis.schedule import NemesisWorker
from tests.harness.cluster_fixtures import require_docker
from workloads.generator import Fn, Once, Op, Stagger, TimeLimit

pytestmark = pytest.mark.docker

RUN_S = 45.0
SETTINGS = {"meta_nodes": "auto", "partitions": 2}


class AlterZone:
    """Alters the zone `default` (a rebalance per partition whose peers change)."""

    def __init__(self, db: EmberDB) -> None:
        self.urls = list(db.urls().values())

    async def invoke(self, op: Op) -> Reply:
        for url in self.urls:
            got = await asyncio.to_thread(http_json, f"{url}/admin/zones/default", "POST",
                                          op.value, 10.0)  # fmt: skip
            if got is not None and "revision" in got:
                return Reply(type="ok", value={**op.value, "revision": got["revision"]})
        return Reply(type="info", value=op.value, error="no node accepted the alter")


def _create_zone(db: EmberDB) -> None:
    for _ in range(60):
        for url in db.urls().values():
            got = http_json(f"{url}/admin/zones/default", "POST", {"replicas": 3}, 10.0)
            if got is not None and isinstance(got.get("zone"), dict):
                return
        time.sleep(1)
    raise AssertionError("no node created the zone")


async def _drive(db: EmberDB, control: Control, names: list[str], history: Path) -> None:
    nemesis = NemesisWorker(control, db.nodes, db)
    with HistoryWriter(history) as writer:
        interp = Interpreter({"admin": [0], "nemesis": ["nemesis"]},
                             {0: AlterZone(db), "nemesis": nemesis}, writer)  # fmt: skip
        watcher = PhaseWatcher(control, names, db.audit_path(),
                               lambda obs: interp.observe("phase", obs))  # fmt: skip
        watcher.start()
        rng = random.Random(404)

        def alter(r: random.Random) -> Op:
            return Op(f="alter-zone", value={"replicas": r.choice([3, 4, 5])})

        try:
            await interp.run({
                "admin": TimeLimit(RUN_S, Stagger(2.5, Fn(alter, rng), rng)),
                "nemesis": NemesisSchedule(random.Random(2), ["kill"], mode="phase",
                                           phases=["pending", "pending-open", "joint"],
                                           targets=["placement-driver", "primary"],
                                           duration_s=(1.0, 2.0), end_s=RUN_S),
            })  # fmt: skip
            await interp.run({"nemesis": Once(Op(f="heal-all"))})
        finally:
            watcher.stop()


def _events(root: Path, names: list[str]) -> list[dict[str, Any]]:
    events = []
    for name in names:
        for line in (root / f"{name}.jsonl").read_text().splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                continue  # a line cut by kill -9
    return sorted(events, key=lambda e: e.get("wall", 0))


def _driver_at(events: list[dict[str, Any]], wall: float) -> str | None:
    holder = None
    for e in events:
        if e.get("wall", 0) > wall:
            break
        if e.get("kind") == "placement-driver":
            if e.get("active"):
                holder = e["node"]
            elif holder == e["node"]:
                holder = None
    return holder


def _primary_at(events: list[dict[str, Any]], partition: int, wall: float) -> str | None:
    grants = [e for e in events if e.get("kind") == "lease-granted"
              and e.get("partition") == partition and e.get("wall", 0) <= wall]  # fmt: skip
    return grants[-1]["holder"] if grants else None


def test_driver_and_primary_kills_hit_the_node_holding_the_role(tmp_path: Path) -> None:
    """Each ok kill of the driver or a primary names the node the audit log says held it."""
    require_docker()
    image = SYSTEMS["ember"].image(print)
    backend = DockerBackend(f"roles{os.getpid()}", size=5, image=image)
    with managed_cluster(backend) as (nodes, control):
        names = [n.name for n in nodes]
        db = EmberDB(nodes, SETTINGS, seed=404)
        db.install(control)
        db.start(control, names)
        db.wait_healthy(names, 90)
        _create_zone(db)
        asyncio.run(_drive(db, control, names, tmp_path / "history.jsonl"))
        for name in names:
            control.fetch(name, db.audit_path(), tmp_path / f"{name}.jsonl")
    events = _events(tmp_path, names)
    kills = [op for op in pair(load_history(tmp_path / "history.jsonl"))
             if op.f == "kill" and op.type == "ok"]  # fmt: skip
    unresolved = [op.result for op in pair(load_history(tmp_path / "history.jsonl"))
                  if op.f == "kill" and op.type == "info"]  # fmt: skip
    reactions = [k.result["reaction_ms"] for k in kills if "reaction_ms" in k.result]
    print(f"kills {len(kills)}, unresolved {len(unresolved)}, reaction ms {sorted(reactions)}"
          f" median {statistics.median(reactions) if reactions else None}")  # fmt: skip
    checked = {"placement-driver": 0, "primary": 0}
    for kill in kills:
        value, node = kill.result, kill.result["node"]
        assert value["trigger"]["stage"] in ("pending", "pending-open", "joint")
        if value["target"] == "placement-driver":
            assert _driver_at(events, value["applied_wall"]) == node, value
        else:
            partition = int(value["resolved"].split("partition ")[1].split()[0])
            assert _primary_at(events, partition, value["applied_wall"]) == node, value
        checked[value["target"]] += 1
    assert checked["placement-driver"] >= 1, (checked, unresolved)
    assert checked["primary"] >= 1, (checked, unresolved)
