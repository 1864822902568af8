"""etcd's registry entry: what a run against etcd needs beyond the `DB`.

The runner (`harness.runner`) reaches this module through `SYSTEM`
(`harness.dbs.registry`): image, generators, workers, phase watcher.
Workloads on etcd: `register` (the ember register workload's generator
and worker, over `EtcdClient`), `metastore` (revisioned get / put / txn
plus watch streams, from `workloads.etcd_metastore`) and `change-peers`
(etcd's member add as learner / promote / remove / replace,
`workloads.etcd_membership`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

from harness import plan as plans
from harness.control import Control
from harness.dbs import PhaseSource, System, Workers, register_keys
from harness.dbs.etcd import EtcdDB
from harness.dbs.etcd_client import EtcdClient
from harness.dbs.etcd_phase import MemberWatcher
from harness.interpreter import Worker
from workloads import etcd_metastore as meta
from workloads import meta_traffic
from workloads.etcd_membership import MembershipGen, MembershipWorker
from workloads.generator import Generator, Op, Stagger, TimeLimit
from workloads.register import RegisterWorker
from workloads.register import final_reads as register_final_reads

WORKLOADS = ("register", "metastore", "change-peers")
ADMIN_TIMEOUT_S = 15.0


def _client(db: EtcdDB, rng: random.Random, timeout_s: float = 5.0) -> EtcdClient:
    return EtcdClient(db.member_urls, rng=random.Random(rng.getrandbits(64)), timeout_s=timeout_s)


def workers(
    plan: plans.Plan, db: EtcdDB, control: Control, nemesis_worker: Worker | None
) -> Workers:
    """Thread kinds, a worker per thread and the clients to close (runner's `_workers`)."""
    node_of = {u: n for n, u in db.urls().items()}
    rng = plan.rng("etcd-clients")
    n = plan.concurrency
    clients = [_client(db, rng) for _ in range(n)]
    kinds: dict[str, Any] = {"client": list(range(n))}
    if "metastore" in plan.workload:
        workers: dict[Any, Worker] = {
            i: meta.MetastoreWorker(c, node_of) for i, c in enumerate(clients)
        }
    else:
        # RegisterWorker is annotated with EmberClient; EtcdClient has the same
        # get / put / cas -> Outcome shapes (a Protocol there would drop this ignore).
        workers = {i: RegisterWorker(c, node_of) for i, c in enumerate(clients)}  # type: ignore[arg-type]
    if "metastore" in plan.workload:
        watcher = _client(db, rng)
        clients.append(watcher)
        kinds["watch"] = [n + 1]
        workers[n + 1] = meta.WatchWorker(watcher, node_of, db.member_urls)
    if "change-peers" in plan.workload:
        admin = _client(db, rng, ADMIN_TIMEOUT_S)
        clients.append(admin)
        kinds["admin"] = [n]
        workers[n] = MembershipWorker(admin, db, control, node_of)
    if "metastore" in plan.workload and meta_traffic.probing(SYSTEM.traffic_of(plan)):
        prober = _client(db, rng)
        clients.append(prober)
        kinds["probe"] = [n + 2]
        workers[n + 2] = meta.WatchWorker(prober, node_of, db.member_urls)
    if nemesis_worker is not None:
        kinds["nemesis"] = ["nemesis"]
        workers["nemesis"] = nemesis_worker
    return kinds, workers, clients


def generators(plan: plans.Plan, db: EtcdDB, gens: dict[str, Generator]) -> dict[str, Generator]:
    """The runner's generators, with etcd's metastore client and watch ones swapped in."""
    t = plan.time_limit_s
    out = dict(gens)
    if "metastore" in plan.workload:
        keys = int(plan.options.get("keys", meta.DEFAULT_KEYS))
        traffic = SYSTEM.traffic_of(plan)
        mix = [*meta.BASIC_MIX, *((f, w) for f, w in meta.FULL_MIX
                                  if f in traffic and f not in dict(meta.BASIC_MIX))]  # fmt: skip
        streams = meta.metastore_streams(plan.rng, keys, mix, traffic)
        out["client"] = TimeLimit(t, Stagger(1.0 / plan.rate_hz, streams.ops,
                                             plan.rng("register-timing")))  # fmt: skip
        out["watch"] = TimeLimit(t, streams.watch)
        if streams.probes is not None:
            out["probe"] = TimeLimit(t, streams.probes)
    return out


def change_generator(plan: plans.Plan, db: EtcdDB) -> Generator:
    """etcd's membership moves: add as learner, promote, remove, replace."""
    names = [n.name for n in db.nodes]
    return MembershipGen(plan.rng("change-peers"), names, db.bootstrap())


def final_reads(plan: plans.Plan) -> list[Op]:
    """One read per key of the workload's keys."""
    if "metastore" in plan.workload:
        return meta.final_reads(int(plan.options.get("keys", meta.DEFAULT_KEYS)))
    return register_final_reads(register_keys(plan))


def phase_watcher(
    db: EtcdDB, _control: Control, _names: list[str], on_phase: Callable[[dict[str, Any]], None]
) -> PhaseSource:
    """The member-list poller that feeds the phase-triggered nemesis."""
    return MemberWatcher(db, on_phase)


def image(log: Callable[[str], None]) -> str:
    """The etcd image (Debian's etcd on the shared base and deps layers)."""
    from harness.images_etcd import LATEST, build_etcd_image

    log("building the etcd image (cached layers are reused)")
    log(f"image {build_etcd_image(log=log)} (run as {LATEST})")
    return LATEST


def version(_plan: Mapping[str, Any]) -> str:
    """The etcd the image installs (checked against the .debs at build time)."""
    from harness.images_etcd import ETCD_VERSION

    return f"etcd {ETCD_VERSION} (Debian package)"


SYSTEM: System[EtcdDB] = System(
    name="etcd",
    make_db=EtcdDB,
    data_dir=EtcdDB.root,
    image=image,
    workloads=WORKLOADS,
    traffic=("register", "metastore"),
    supports_sim=False,  # the simulator runs ember's Raft only
    # etcd changes membership in one step: no joint phase.
    default_phases=("catching-up", "stable"),
    change_generator=change_generator,
    generators=generators,
    workers=workers,
    phase_watcher=phase_watcher,
    final_reads=final_reads,
    closing=meta.closing_watch,
    version=version,
    # A learner added (catching-up), promoted or removed (stable): etcd_phase.py.
    phases_reached={"change-peers": ("catching-up", "stable")},
    # One traffic workload per run (register or metastore): register by default.
    default_workloads=("register", "change-peers"),
    # One group, no placement driver, no primaries: its leader is the one role.
    roles=("group-leader",),
    # Nothing but the workload writes etcd: every kind can be judged, and is sent.
    meta_traffic=meta_traffic.ETCD_KINDS,
    default_meta_traffic=meta_traffic.ETCD_KINDS,
    # Crashes during compaction and defragmentation: where etcd's robustness
    # tests found their bugs, so its default plan has them.
    maintenance_in_mix=True,
)
