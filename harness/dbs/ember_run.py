"""ember's registry entry: its image, workloads, workers and audit-log phases.

ember is faultline's own database (`harness.db.EmberDB`). Workloads, each
on its own thread kind (process ids in this order, after the clients):

- `register` ("client"): get / put / cas per key over `EmberClient`;
- `change-peers` ("admin", 1 thread): joint-consensus membership changes,
  only of the groups outside the zone when a zone exists (part-4, part-5:
  see `harness.db.ZONE_PARTITIONS`), so the placement driver and this
  workload never move the same group;
- `rebalance` ("rebalance", 1 thread): zone alters in loops
  (`workloads.rebalance`), ending with a restore before the quiet period,
  and now and then a stale Rebalance request (`workloads.stale_request`);
- `cancel-race` ("cancel", 1 thread): a trigger alter, then a cancel at a
  seeded phase (`workloads.cancel_race`);
- `metastore` ("meta", META_THREADS threads, "watch", 1 thread, and
  "probe", 1 thread when the traffic sends probe watches): revisioned
  reads, invokes, deletes, past reads and watch streams
  (`workloads.metastore`, the generator etcd's workload shares).

The last three turn on ember's control plane (`EmberDB.configure`). Client
threads route metastore keys (`workloads.metastore.PREFIX`) to a metastore
worker, so the final reads (one per register key, one per metastore key)
all run on the client threads. Phases for the nemesis come from tailing
every node's audit log (`nemesis.phase.PhaseWatcher`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from harness import plan as plans
from harness.control import Control
from harness.db import EmberDB
from harness.dbs import PhaseSource, System, Workers, first_line, register_keys
from harness.interpreter import Reply, Worker
from harness.process_db import DBError
from workloads import meta_traffic
from workloads.generator import Generator, Op, Stagger, TimeLimit
from workloads.register import final_reads as register_final_reads

WORKLOADS = ("register", "change-peers", "rebalance", "cancel-race", "metastore")
META_THREADS = 3
NS_PER_S = 1_000_000_000


def image(log: Callable[[str], None]) -> str:
    """The image to run: built (or found cached) from the current source."""
    import docker.errors

    from harness.backends.docker import DEFAULT_IMAGE
    from harness.backends.engine import connect_docker
    from harness.images import ImageBuildError, build_image

    log("building the ember image (cached layers are reused)")
    try:
        tag = build_image(log=log).tag
    except ImageBuildError as exc:
        raise DBError(f"image build failed: {first_line(exc)}") from exc
    except docker.errors.NotFound as exc:
        # Another build from this tree pruned our fresh tag between its build
        # and its lookup; `latest` then holds that other, newer build.
        try:
            connect_docker().images.get(DEFAULT_IMAGE)
        except docker.errors.DockerException:
            raise DBError(f"image build failed: {first_line(exc)}") from exc
        log(f"our image tag was pruned by a concurrent build; using {DEFAULT_IMAGE}")
        return DEFAULT_IMAGE
    # Run `latest` rather than the hash tag: a concurrent build from this
    # tree may prune the hash tag before the containers start; `latest` is
    # this build or a newer one of the same tree, and is never pruned.
    log(f"image {tag} (run as {DEFAULT_IMAGE})")
    return DEFAULT_IMAGE


class _Routed:
    """A client thread's worker: metastore keys to the metastore worker, the rest
    to the register worker (so final reads of both run on client threads)."""

    def __init__(self, register: Worker, meta: Worker | None) -> None:
        self.register, self.meta = register, meta

    async def invoke(self, op: Op) -> Reply:
        """Route by the op's key."""
        from workloads.metastore import PREFIX

        if self.meta is not None and (op.key or "").startswith(PREFIX):
            return await self.meta.invoke(op)
        return await self.register.invoke(op)


def workers(
    plan: plans.Plan, db: EmberDB, control: Control, nemesis_worker: Worker | None
) -> Workers:
    """A worker per thread of each workload's kind (module doc), and the nemesis."""
    from ember.client import EmberClient
    from workloads.cancel_race import CancelWorker
    from workloads.change_peers import ChangePeersWorker
    from workloads.metastore import EmberMetaWorker, EmberWatchWorker
    from workloads.rebalance import RebalanceWorker
    from workloads.register import RegisterWorker

    urls = db.urls()
    node_of = {u: n for n, u in urls.items()}
    url_list = list(urls.values())
    n = plan.concurrency
    meta_on = "metastore" in plan.workload
    clients: list[Any] = [EmberClient(url_list, partitions=db.partitions) for _ in range(n)]
    kinds: dict[str, Any] = {"client": list(range(n))}
    workers: dict[Any, Worker] = {
        i: _Routed(RegisterWorker(c, node_of), EmberMetaWorker(c, node_of) if meta_on else None)
        for i, c in enumerate(clients)
    }

    def admin(kind: str, thread: int, make: Callable[[EmberClient], Worker]) -> None:
        client = EmberClient(url_list, partitions=db.partitions, timeout_s=30.0)
        clients.append(client)
        kinds[kind] = [thread]
        workers[thread] = make(client)

    if "change-peers" in plan.workload:
        admin("admin", n, lambda c: ChangePeersWorker(c, node_of))
    if "rebalance" in plan.workload:
        admin("rebalance", n + 1, lambda c: RebalanceWorker(c, node_of))
    if "cancel-race" in plan.workload:
        admin("cancel", n + 2, lambda c: CancelWorker(c, node_of))
    if meta_on:
        threads = list(range(n + 3, n + 3 + META_THREADS))
        kinds["meta"] = threads
        sessions = _meta_sessions(plan)
        for t in threads:
            clients.append(EmberClient(url_list, partitions=db.partitions))
            workers[t] = EmberMetaWorker(clients[-1], node_of, sessions(t))
        meta_urls = [urls[m] for m in db.meta_voters()]
        watcher = EmberWatchWorker(meta_urls, node_of, plan.rng("watch-nodes"))
        clients.append(watcher)
        kinds["watch"] = [n + 3 + META_THREADS]
        workers[n + 3 + META_THREADS] = watcher
        if meta_traffic.probing(SYSTEM.traffic_of(plan)):
            prober = EmberWatchWorker(meta_urls, node_of, plan.rng("probe-nodes"))
            clients.append(prober)
            kinds["probe"] = [n + 4 + META_THREADS]
            workers[n + 4 + META_THREADS] = prober
    if nemesis_worker is not None:
        kinds["nemesis"] = ["nemesis"]
        workers["nemesis"] = nemesis_worker
    return kinds, workers, clients


def _meta_sessions(plan: plans.Plan) -> Callable[[int], str | None]:
    """Each metastore thread's client session when the plan resends writes
    (traffic `resend`), else None. The cluster's data is wiped at setup, so a
    run's ids only need to differ from each other; the seeded part keeps a
    simulated run replayable."""
    if "resend" not in SYSTEM.traffic_of(plan):
        return lambda _thread: None
    run = plan.rng("meta-sessions").getrandbits(32)
    return lambda thread: f"faultline-{run:08x}-t{thread}"


def change_generator(plan: plans.Plan, db: EmberDB) -> Generator:
    """Random add / remove / replace moves per Raft group (learners too: option
    `change_learners`)."""
    from workloads.change_peers import ChangePeersGen

    names = [n.name for n in db.nodes]
    return ChangePeersGen(plan.rng("change-peers"), db.free_groups(), names, db.bootstrap(),
                          learners=bool(plan.options.get("change_learners", False)))  # fmt: skip


def phase_watcher(
    db: EmberDB, control: Control, names: list[str], on_phase: Callable[[dict[str, Any]], None]
) -> PhaseSource:
    """Tails every node's audit log for membership-change phases."""
    from nemesis.phase import PhaseWatcher

    return PhaseWatcher(control, names, db.audit_path(), on_phase)


def _final_reads(plan: plans.Plan) -> list[Op]:
    from workloads import metastore

    reads = register_final_reads(register_keys(plan))
    if "metastore" in plan.workload:
        reads += metastore.final_reads(int(plan.options.get("meta_keys", metastore.DEFAULT_KEYS)))
    return reads


def _closing(main_phase: Mapping[str, Generator]) -> dict[str, Generator]:
    from workloads import metastore

    return metastore.closing_watch(main_phase)


def generators(plan: plans.Plan, db: EmberDB, gens: dict[str, Generator]) -> dict[str, Generator]:
    """The runner's register, change-peers and nemesis generators, plus the
    control-plane workloads'; alters and cancels stop at the time limit, the
    rebalance workload with its restoring alter (workloads.rebalance)."""
    from workloads import metastore
    from workloads.cancel_race import CancelRaceGen
    from workloads.rebalance import RebalanceGen
    from workloads.stale_request import StaleRequests

    t, out = plan.time_limit_s, dict(gens)
    stop_ns = int(t * NS_PER_S)
    parts = db.zone_partitions or db.partitions
    if "rebalance" in plan.workload:
        out["rebalance"] = RebalanceGen(
            plan.rng("rebalance"), [n.name for n in db.nodes], max_partitions=parts,
            stop_ns=stop_ns, gap_s=float(plan.options.get("rebalance_interval_s", 4.0)),
            stale=StaleRequests(plan.rng("stale-request"), stop_ns=stop_ns),
        )  # fmt: skip
    if "cancel-race" in plan.workload:
        out["cancel"] = CancelRaceGen(
            plan.rng("cancel-race"), partitions=parts, stop_ns=stop_ns,
            gap_s=float(plan.options.get("cancel_interval_s", 3.0)),
        )  # fmt: skip
    if "metastore" in plan.workload:
        keys = int(plan.options.get("meta_keys", metastore.DEFAULT_KEYS))
        traffic = SYSTEM.traffic_of(plan)
        mix = [(f, w) for f, w in metastore.FULL_MIX if f not in meta_traffic.KINDS or f in traffic]
        streams = metastore.metastore_streams(plan.rng, keys, mix, traffic)
        rate = float(plan.options.get("meta_rate_hz", 10.0))
        out["meta"] = TimeLimit(t, Stagger(1.0 / rate, streams.ops, plan.rng("metastore-timing")))
        out["watch"] = TimeLimit(t, streams.watch)
        if streams.probes is not None:
            out["probe"] = TimeLimit(t, streams.probes)
    return out


def version(plan: Mapping[str, Any]) -> str:
    """ "ember <version> (<git rev>)", as the run recorded it."""
    from reports.render import ember_version

    return f"ember {ember_version(dict(plan))}"


SYSTEM: System[EmberDB] = System(
    name="ember",
    make_db=EmberDB,
    data_dir=EmberDB.root,
    image=image,
    workloads=WORKLOADS,
    traffic=("register",),
    supports_sim=True,
    default_phases=None,  # nemesis.generator.DEFAULT_PHASES
    change_generator=change_generator,
    generators=generators,
    workers=workers,
    phase_watcher=phase_watcher,
    final_reads=_final_reads,
    closing=_closing,
    version=version,
    roles_in=EmberDB.roles_in,
    # change-stage / change-done and the assignment keys (nemesis/phase.py);
    # a rebalance or cancel race changes peers too.
    meta_traffic=meta_traffic.EMBER_KINDS,
    default_meta_traffic=meta_traffic.EMBER_DEFAULT,
    phases_reached={
        "change-peers": ("catching-up", "joint", "stable", "done"),
        "rebalance": ("catching-up", "joint", "stable", "done", "pending", "pending-open"),
        "cancel-race": ("catching-up", "joint", "stable", "done", "pending", "pending-open"),
    },
)
