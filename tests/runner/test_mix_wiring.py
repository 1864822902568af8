"""How ember's registry entry wires the control-plane workloads (no cluster needed)."""

from __future__ import annotations

import asyncio
import tomllib
from typing import Any

from harness.backends.base import NodeHandle, SshTarget
from harness.db import FREE_PARTITIONS, ZONE_PARTITIONS, EmberDB
from harness.dbs import ember_run
from harness.interpreter import Reply
from harness.plan import Plan
from workloads.generator import Op

NODES = ("n1", "n2", "n3", "n4", "n5")
FULL = ("register", "change-peers", "rebalance", "cancel-race", "metastore")


def _db(settings: dict[str, Any] | None = None) -> EmberDB:
    nodes = [NodeHandle(name=n, ip=f"10.0.0.{i}", ssh=SshTarget(host=f"10.0.0.{i}"))
             for i, n in enumerate(NODES)]  # fmt: skip
    return EmberDB(nodes, settings or {}, seed=1)


def test_control_plane_workloads_turn_the_metastore_on_with_room_for_change_peers() -> None:
    """meta_nodes = auto in the node config; the zone's groups plus two free ones."""
    db = _db()
    db.configure(FULL)
    config = tomllib.loads(db._config(db.nodes[0]))
    assert config["meta_nodes"] == "auto"
    assert config["partitions"] == ZONE_PARTITIONS + FREE_PARTITIONS
    db.zone_partitions = ZONE_PARTITIONS  # what setup records once the zone exists
    assert db.free_groups() == ["part-4", "part-5"]
    plain = _db()
    plain.configure(("register", "change-peers"))
    assert "meta_nodes" not in tomllib.loads(plain._config(plain.nodes[0]))
    assert plain.free_groups() == plain.groups()


def test_the_full_mix_has_a_thread_kind_and_generator_per_workload() -> None:
    """Distinct process ids per kind; every kind with a worker has a generator."""
    plan = Plan(seed=3, nodes=NODES, workload=FULL, concurrency=4, nemesis=())
    db = _db()
    db.configure(plan.workload)
    db.zone_partitions = ZONE_PARTITIONS
    kinds, workers, clients = ember_run.workers(plan, db, None, None)  # type: ignore[arg-type]
    try:
        assert set(kinds) == {"client", "admin", "rebalance", "cancel", "meta", "watch"}
        ids = [t for ts in kinds.values() for t in ts]
        assert len(ids) == len(set(ids)) == len(workers)
        gens = ember_run.generators(plan, db, {"client": object(), "admin": object()})  # type: ignore[dict-item]
        assert set(gens) == set(kinds)
        finals = ember_run.SYSTEM.final_reads(plan)
        assert any((op.key or "").startswith("m/") for op in finals)
    finally:
        asyncio.run(_close(clients))


async def _close(clients: list[Any]) -> None:
    for c in clients:
        await c.close()


def test_client_threads_route_metastore_keys_to_the_metastore_worker() -> None:
    """A final read of m/0 goes to the metastore, one of k0 to the register table."""

    class Seen:
        def __init__(self, name: str) -> None:
            self.name, self.ops = name, list[str]()

        async def invoke(self, op: Op) -> Reply:
            self.ops.append(op.key or "")
            return Reply(type="ok", value=self.name)

    reg, meta = Seen("register"), Seen("meta")
    routed = ember_run._Routed(reg, meta)
    assert asyncio.run(routed.invoke(Op(f="get", key="m/0"))).value == "meta"
    assert asyncio.run(routed.invoke(Op(f="get", key="k0"))).value == "register"
    assert (reg.ops, meta.ops) == (["k0"], ["m/0"])
