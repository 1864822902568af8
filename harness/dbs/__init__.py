"""The databases faultline can test: what a system brings besides its `DB`.

A system is one module implementing `harness.db.DB` (install, start, stop,
kill, pause, resume, wait_healthy, status, groups, leaders, bootstrap,
urls, set_failpoint, audit_path, collect) plus a `System` entry: its image,
workloads, client workers, generators, phase source and final reads. The
runner and `faultline run` consult `harness.dbs.registry.SYSTEMS[plan.db]`
only; a third system is one module and one registry line (see
docs/adding-a-system.md).

`System` lives here, the entries in `registry`: the system modules import
workloads that import `harness.dbs.*` back, so this package stays light.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    from harness.backends.base import NodeHandle
    from harness.control import Control
    from harness.interpreter import Worker
    from harness.plan import Plan
    from workloads.generator import Generator, Op

D = TypeVar("D")

# Thread kinds -> thread ids, a worker per thread id, the clients to close.
Workers = tuple[dict[str, Any], dict[Any, "Worker"], list[Any]]


class PhaseSource(Protocol):
    """What feeds the phase-triggered nemesis: started, stopped, latest stage per group."""

    stages: dict[str, str]

    def start(self) -> None:
        """Begin observing; calls the on_phase callback per observation."""

    def stop(self) -> None:
        """Stop observing and release threads and channels."""


@dataclass(frozen=True, slots=True)
class System(Generic[D]):
    """Everything the runner and `faultline run` need that differs per system.

    `D` is the system's `harness.db.DB` implementation, so each entry's
    callables are type-checked against its own db class.
    """

    name: str
    # (nodes, db_settings, seed) -> the DB the runner installs and starts.
    make_db: Callable[[Sequence[NodeHandle], Mapping[str, Any], int], D]
    # log -> the docker image tag to run (built or found cached).
    image: Callable[[Callable[[str], None]], str]
    workloads: tuple[str, ...]
    traffic: tuple[str, ...]  # a plan has exactly one of these (the clients' traffic)
    supports_sim: bool  # `--backend sim` can play it
    default_phases: tuple[str, ...] | None  # nemesis phases when none are given
    # (plan, db) -> the membership-change generator of the `change-peers` workload.
    change_generator: Callable[[Plan, D], Generator]
    # (plan, db, the runner's generators) -> the generators to run.
    generators: Callable[[Plan, D, dict[str, Generator]], dict[str, Generator]]
    # (plan, db, control, nemesis worker or None) -> thread kinds, workers, clients.
    workers: Callable[[Plan, D, Control, Worker | None], Workers]
    # (db, control, node names, on_phase) -> the phase source.
    phase_watcher: Callable[[D, Control, list[str], Callable[[dict[str, Any]], None]], PhaseSource]
    final_reads: Callable[[Plan], list[Op]]  # one read per key, after healing
    # The plan (as stored in test.json) -> "<system> <version>" for reports.
    version: Callable[[Mapping[str, Any]], str]
    # What `faultline run` runs with no --workload; None: every workload.
    default_workloads: tuple[str, ...] | None = None
    # Workload -> the nemesis phases its changes reach (a plan aiming faults
    # at phases none of its workloads reach is refused: harness/honoured.py);
    # None: not declared, and the plan is trusted.
    phases_reached: Mapping[str, tuple[str, ...]] | None = None
    # The roles a kill, pause or isolating partition can aim at
    # (`nemesis.targets.ROLE_TARGETS`): a db without some has fewer.
    roles: tuple[str, ...] = ("group-leader", "meta-leader", "placement-driver", "primary")
    # (workloads, db settings) -> the roles a run of them has, where a plan's
    # workloads decide (ember: no metastore leader or placement driver without
    # the control plane, no primary without a zone); None: always `roles`.
    roles_in: Callable[[Sequence[str], Mapping[str, Any]], tuple[str, ...]] | None = None
    # The metastore traffic kinds it can send (workloads.meta_traffic.KINDS), and
    # those a plan that names none sends.
    meta_traffic: tuple[str, ...] = ()
    default_meta_traffic: tuple[str, ...] = ()
    # Whether `mix` also draws compact-kill (nemesis.generator) on its own;
    # elsewhere it is drawn only when the plan names it.
    maintenance_in_mix: bool = False
    # Where the database keeps its state and audit log on a node. A Docker node
    # gets a volume of its own there: the image's layered file system
    # (fuse-overlayfs on this machine) made each flushed audit line cost
    # 0.35 ms on the node's event loop, where a volume's costs 9 us.
    data_dir: str | None = None
    # The main phase's generators -> the ops that close what they left open,
    # run after the final reads (the metastore's watch chain: a record of
    # writes that stops at the time limit leaves the later revisions unchecked).
    closing: Callable[[Mapping[str, Generator]], dict[str, Generator]] = lambda _main_phase: {}

    def traffic_of(self, plan: Plan) -> frozenset[str]:
        """The metastore traffic kinds `plan` sends (workloads.meta_traffic)."""
        from workloads import meta_traffic

        return meta_traffic.parse(plan.options.get("meta_traffic"), self.default_meta_traffic)

    def plan_roles(self, plan: Plan) -> tuple[str, ...]:
        """The roles a run of `plan` can aim kills, pauses and isolating
        partitions at: aimed at a role the run cannot have, a fault would
        only ever come back not applied."""
        if self.roles_in is None:
            return self.roles
        have = self.roles_in(plan.workload, plan.db_settings)
        return tuple(r for r in self.roles if r in have)

    def phases_of(self, workload: Sequence[str]) -> tuple[str, ...] | None:
        """The nemesis phases a run of `workload` reaches (`phases_reached`); None
        where the db does not declare them (then every phase is trusted)."""
        if self.phases_reached is None:
            return None
        return phases_reached_by(self.phases_reached, workload)

    def roles_named(self, plan: Plan) -> str:
        """`plan.db`, or where its workloads leave roles out, the db with them
        (for the messages of `nemesis.generator.fit_targets`)."""
        if self.plan_roles(plan) == self.roles:
            return plan.db
        return f"{plan.db} running {'+'.join(plan.workload)}"

    def default_workload(self) -> tuple[str, ...]:
        """The workloads of a run that names none."""
        return self.workloads if self.default_workloads is None else self.default_workloads


def phases_reached_by(
    table: Mapping[str, tuple[str, ...]], workload: Sequence[str]
) -> tuple[str, ...]:
    """The phases `table` (a System's `phases_reached`) says `workload` reaches."""
    return tuple(dict.fromkeys(p for w in workload for p in table.get(w, ())))


def register_keys(plan: Plan) -> int:
    """The register workload's key count (`--keys`, else its default)."""
    from workloads.register import DEFAULT_KEYS

    return int(plan.options.get("keys", DEFAULT_KEYS))


def first_line(exc: BaseException) -> str:
    """An error as one line for the user."""
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
