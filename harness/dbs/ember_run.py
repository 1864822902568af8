"""ember's registry entry: its image, register clients, change-peers and audit-log phases.

ember is faultline's own database (`harness.db.EmberDB`). Workloads:
`register` (get / put / cas per key over `ember.client.EmberClient`) and
`change-peers` (joint-consensus membership changes per Raft group). Phases
for the nemesis come from tailing every node's audit log
(`nemesis.phase.PhaseWatcher`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from harness import plan as plans
from harness.control import Control
from harness.db import DBError, EmberDB
from harness.dbs import PhaseSource, System, Workers, first_line, register_keys
from harness.interpreter import Worker
from workloads.generator import Generator, Op
from workloads.register import final_reads as register_final_reads

WORKLOADS = ("register", "change-peers")


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


def workers(
    plan: plans.Plan, db: EmberDB, control: Control, nemesis_worker: Worker | None
) -> Workers:
    """Register clients, an admin client for change-peers, and the nemesis worker."""
    from ember.client import EmberClient
    from workloads.change_peers import ChangePeersWorker
    from workloads.register import RegisterWorker

    urls = db.urls()
    node_of = {u: n for n, u in urls.items()}
    url_list = list(urls.values())
    clients = [EmberClient(url_list, partitions=db.partitions) for _ in range(plan.concurrency)]
    kinds: dict[str, Any] = {"client": list(range(plan.concurrency))}
    workers: dict[Any, Worker] = {i: RegisterWorker(c, node_of) for i, c in enumerate(clients)}
    if "change-peers" in plan.workload:
        admin_client = EmberClient(url_list, partitions=db.partitions, timeout_s=30.0)
        clients.append(admin_client)
        kinds["admin"] = [plan.concurrency]
        workers[plan.concurrency] = ChangePeersWorker(admin_client, node_of)
    if nemesis_worker is not None:
        kinds["nemesis"] = ["nemesis"]
        workers["nemesis"] = nemesis_worker
    return kinds, workers, clients


def change_generator(plan: plans.Plan, db: EmberDB) -> Generator:
    """Random add / remove / replace moves per Raft group."""
    from workloads.change_peers import ChangePeersGen

    names = [n.name for n in db.nodes]
    return ChangePeersGen(plan.rng("change-peers"), db.groups(), names, db.bootstrap())


def phase_watcher(
    db: EmberDB, control: Control, names: list[str], on_phase: Callable[[dict[str, Any]], None]
) -> PhaseSource:
    """Tails every node's audit log for membership-change phases."""
    from nemesis.phase import PhaseWatcher

    return PhaseWatcher(control, names, db.audit_path(), on_phase)


def _final_reads(plan: plans.Plan) -> list[Op]:
    return register_final_reads(register_keys(plan))


def _same(_plan: plans.Plan, _db: EmberDB, gens: dict[str, Generator]) -> dict[str, Generator]:
    return gens  # the runner's register, change-peers and nemesis generators are ember's


def version(plan: Mapping[str, Any]) -> str:
    """ "ember <version> (<git rev>)", as the run recorded it."""
    from reports.render import ember_version

    return f"ember {ember_version(dict(plan))}"


SYSTEM: System[EmberDB] = System(
    name="ember",
    make_db=EmberDB,
    image=image,
    workloads=WORKLOADS,
    traffic=("register",),
    supports_sim=True,
    default_phases=None,  # nemesis.generator.DEFAULT_PHASES
    change_generator=change_generator,
    generators=_same,
    workers=workers,
    phase_watcher=phase_watcher,
    final_reads=_final_reads,
    version=version,
)
