"""`faultline explore`'s engine: many simulated seeds of a plan, swarmed and steered.

Theory of operation. Each explored seed is the base plan with a new root
seed and a swarm configuration (Groce et al., "Swarm Testing", ISSTA 2012):
which fault kinds the mix nemesis may draw, which protocol phases aim its
faults, which roles its kills and pauses aim at, and which workloads run
beside the clients' traffic, and whether change-peers also moves learners
(a learner-counting defect is invisible to a run whose changes name none),
and, as FoundationDB's simulator randomizes its knobs, some of ember's
replication knobs (`KNOBS`: appends carrying few entries, one append in
flight), written into the plan's `db_settings`: a leader whose followers
ack its log piecemeal is where a commit of an old term's entries shows.
Leaving features out is the point: a run
without kills spends its whole fault budget on partitions and pauses, and a
run without rebalance aims every fault at change-peers' phases, so rare
combinations get their turn. The configuration is written into the plan's
options (`nemesis_kinds`, `nemesis_phases`, `nemesis_targets`,
`change_learners`, the workload tuple), so `faultline replay` of an explored run needs nothing but
its test.json.

Steering: with a coverage table (`harness.coverage`), a seed draws several
candidate configurations from its own stream and takes the one whose
reachable cells are the least hit so far (each cell weighs 1 / (1 + hits)).
Unsteered, it takes the first. The choice depends only on the seed and the
table, and the plan records what was chosen.

Runs play in worker processes (`play`: one simulated run, returns a
`RunSummary`), each into a scratch store of its own; a run that is not
valid moves into the real store as a normal run dir with its report.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from harness import plan as plans
from harness.coverage import (
    NONE,
    TIMER,
    Cell,
    Coverage,
    cells_of_history,
    landing,
    role_of,
)
from harness.dbs import phases_reached_by
from nemesis.generator import HEAL_OF, MIX_TARGETS, PHASES, aims
from nemesis.targets import ROLE_TARGETS

CANDIDATES = 8  # swarm configurations a steered seed chooses among
# ember's replication knobs a seed may turn (half the seeds keep the defaults).
KNOBS: dict[str, tuple[int, ...]] = {
    "max_entries_per_append": (2, 8, 64),
    "max_inflight_appends": (1, 2, 4),
}


@dataclass(frozen=True)
class Swarm:
    """One seed's feature selection (see the module doc)."""

    kinds: tuple[str, ...]
    phases: tuple[str, ...]
    targets: tuple[str, ...]
    workload: tuple[str, ...]
    learners: bool = False  # change-peers names learners (plan option change_learners)
    knobs: tuple[tuple[str, int], ...] = ()  # ember settings this seed turns (KNOBS)


@dataclass(frozen=True)
class Space:
    """What a base plan lets the swarm draw from: each seed's selection is a
    subset of it, so an explore of `--nemesis partition` draws partitions
    only and `--nemesis-phases joint` aims at joint only. It also knows which
    coverage cells a selection can hit (only the roles and phases the db
    has: etcd has no placement driver, and no joint phase), which the
    steering and the summary's denominator use, and nightly's for a night.
    """

    kinds: tuple[str, ...]  # the fault kinds the base plan's nemesis draws
    phases: tuple[str, ...]
    targets: tuple[str, ...]  # what kills, pauses and clock faults may aim at
    partition_roles: tuple[str, ...]  # the roles its partitions' groupings name
    timer: bool  # faults on the timer (nemesis mode periodic or both)
    phased: bool  # faults at phases (mode phase or both)
    # The db's workload -> phases table (System.phases_reached), for a seed's
    # own workloads; None: not declared, every phase counts.
    phases_reached: Mapping[str, tuple[str, ...]] | None = None

    @classmethod
    def of(cls, base: plans.Plan, swarmed: bool = True) -> Space:
        """What explore's swarm may draw for `base`; with `swarmed` False,
        what a plain run of `base` draws (`faultline run`, a nightly cell):
        then `mix` also mixes in clock faults where clocks move and a db's
        maintenance kills where it asks. Both read the schedule's own filling
        in of a plan's options (`nemesis.generator.aims`); the swarm differs
        only in drawing from every phase and target the plan leaves open."""
        from harness.dbs.registry import SYSTEMS  # the registry imports the runners
        from harness.runner import clocks_movable

        system = SYSTEMS.get(base.db)
        roles = system.plan_roles(base) if system is not None else ROLE_TARGETS
        opts = base.options
        maintenance = getattr(system and system.make_db, "maintenance", ())
        if swarmed:
            # The swarm writes each seed's kinds, phases and targets into its
            # plan (`draw_swarm`), from every one the schedule knows unless the
            # base plan names some; clock faults only where it names them.
            drawn = aims(base.nemesis, phases=opts.get("nemesis_phases") or PHASES,
                         targets=opts.get("nemesis_targets") or MIX_TARGETS,
                         groupings=opts.get("nemesis_groupings"), roles=roles,
                         maintenance=maintenance)  # fmt: skip
        else:  # what a run of the plan itself draws
            drawn = aims(base.nemesis, phases=opts.get("nemesis_phases"),
                         targets=opts.get("nemesis_targets"),
                         groupings=opts.get("nemesis_groupings"), only=opts.get("nemesis_kinds"),
                         roles=roles, clocks=clocks_movable(base), maintenance=maintenance,
                         mix_maintenance=bool(system and system.maintenance_in_mix))  # fmt: skip
        # Phases no workload of the plan reaches (a zone's pending without
        # rebalance or cancel-race) are no cells to count, nor to steer toward.
        reached = system.phases_of(base.workload) if system is not None else None
        phases = tuple(p for p in drawn.phases if reached is None or p in reached)
        isolated = {"isolate-leader": ("group-leader",), "isolate-joining": ("joining",),
                    "isolate": drawn.roles}  # fmt: skip
        isolating = (r for g in drawn.groupings for r in isolated.get(g, (NONE,)))
        mode = opts.get("nemesis_mode", "both")
        return cls(
            kinds=drawn.drawable,
            phases=phases,
            phases_reached=system.phases_reached if system is not None else None,
            targets=drawn.targets,
            partition_roles=tuple(dict.fromkeys(isolating)),
            timer=mode != "phase",
            phased=mode != "periodic",
        )

    def reachable(self, swarm: Swarm) -> list[Cell]:
        """The coverage cells a run with this selection can hit: a seed that drew
        `pending` but not the workloads that rebalance reaches no pending cell."""
        at = swarm.phases
        if swarm.workload and self.phases_reached is not None:
            reached = phases_reached_by(self.phases_reached, swarm.workload)
            at = tuple(p for p in at if p in reached)
        phases = (*(at if self.phased else ()), *((TIMER,) if self.timer else ()))
        out = []
        for kind in swarm.kinds:
            if kind == "partition":
                roles = self.partition_roles
            elif kind == "slow":
                roles = ("joining",)
            else:  # a kill, pause or clock fault names the target it drew
                roles = tuple(dict.fromkeys(role_of(t) for t in swarm.targets))
            out += [(kind, phase, landed) for phase in phases for role in roles
                    for landed in landing(role, phase)]  # fmt: skip
        return list(dict.fromkeys(out))

    def cells(self) -> list[Cell]:
        """Every cell some selection within this space can hit."""
        return self.reachable(Swarm(self.kinds, self.phases, self.targets, ()))


def _subset(rng: random.Random, items: Sequence[str], keep: float = 0.5) -> tuple[str, ...]:
    if not items:
        return ()
    chosen = tuple(i for i in items if rng.random() < keep)
    return chosen or (rng.choice(list(items)),)


def draw_swarm(
    rng: random.Random, base: plans.Plan, traffic: str, space: Space | None = None
) -> Swarm:
    """A random feature selection within what the base plan allows (`space`,
    which is `Space.of(base)`: given when drawing many)."""
    space = space or Space.of(base)
    extra = [w for w in base.workload if w != traffic]
    workload = _with_control_plane(base, (traffic, *(w for w in extra if rng.random() < 0.5)))
    kinds, phases = _subset(rng, space.kinds), _subset(rng, space.phases)
    workload, targets = _with_roles(base, workload, _subset(rng, space.targets))
    return Swarm(
        kinds=kinds,
        phases=phases,
        targets=targets,
        workload=workload,
        # Drawn last, so the other features of a seed's draws stay as they were.
        learners=rng.random() < 0.5,
        knobs=_knobs(rng),
    )


def _with_control_plane(base: plans.Plan, workload: tuple[str, ...]) -> tuple[str, ...]:
    """`workload`, plus the base plan's first control-plane workload when the
    base names compact-kill and the draw left none: without one ember runs no
    metastore to compact, and the runner refuses the plan
    (`runner.compact_kill_refusal`), which stopped the whole explore. No
    random draw is spent, so every other seed's selection is as it was."""
    from harness.db import CONTROL_PLANE_WORKLOADS
    from harness.dbs.registry import SYSTEMS
    from harness.runner import compact_kill_refusal

    system = SYSTEMS.get(base.db)
    if "compact-kill" not in base.nemesis or system is None:
        return workload
    if not compact_kill_refusal(msgspec.structs.replace(base, workload=workload), system):
        return workload
    added = next((w for w in base.workload if w in CONTROL_PLANE_WORKLOADS), None)
    if added is None:  # the base itself is refused, with the runner's message
        return workload
    return (workload[0], *(w for w in base.workload if w in workload[1:] or w == added))


def _with_roles(
    base: plans.Plan, workload: tuple[str, ...], targets: tuple[str, ...]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(workload, targets) with the role targets the drawn workloads leave no
    holder of taken out (a draw without rebalance or cancel-race has no zone,
    so no primary): aimed at them, every kill or pause would come back not
    applied, and the steering would count cells the seed cannot hit. When
    none would be left, the first of the base plan's other workloads that
    brings one back is added instead, as `_with_control_plane` adds a
    metastore. No random draw is spent."""
    from harness.dbs.registry import SYSTEMS

    system = SYSTEMS.get(base.db)
    if system is None:
        return workload, targets

    def aimable(draw: tuple[str, ...]) -> tuple[str, ...]:
        have = system.plan_roles(msgspec.structs.replace(base, workload=draw))
        return tuple(t for t in targets if t in have or t not in ROLE_TARGETS)

    draws = [workload] + [
        (workload[0], *(w for w in base.workload if w in workload[1:] or w == added))
        for added in base.workload if added not in workload
    ]  # fmt: skip
    for draw in draws:
        if kept := aimable(draw):
            return draw, kept
    return workload, targets  # the base itself has no holder: the runner says so


def _knobs(rng: random.Random) -> tuple[tuple[str, int], ...]:
    if rng.random() < 0.5:
        return ()
    return tuple((name, rng.choice(choices)) for name, choices in KNOBS.items())


def choose(seed: int, base: plans.Plan, traffic: str, coverage: Coverage | None) -> Swarm:
    """The seed's swarm selection: the first draw, or (steered) the least-covered one."""
    rng = random.Random(f"{seed}/swarm")
    space = Space.of(base)
    draws = [draw_swarm(rng, base, traffic, space) for _ in range(CANDIDATES if coverage else 1)]
    if coverage is None:
        return draws[0]

    def novelty(s: Swarm) -> float:
        return sum(1.0 / (1 + coverage.hits.get(c, 0)) for c in space.reachable(s))

    return max(draws, key=novelty)  # max keeps the first of equals: still seed-determined


def explored_plan(base: plans.Plan, seed: int, swarm: Swarm | None) -> plans.Plan:
    """`base` with root seed `seed` and, if given, the swarm selection in its options."""
    if swarm is None:
        return msgspec.structs.replace(base, seed=seed)
    options = {
        **base.options,
        "nemesis_phases": list(swarm.phases),
        "nemesis_targets": list(swarm.targets),
    }
    if swarm.kinds:  # none when the base plan draws no faults (--nemesis none)
        options["nemesis_kinds"] = list(swarm.kinds)
    # A base plan that says whether changes name learners keeps its word, and
    # so does one that sets a knob.
    options.setdefault("change_learners", swarm.learners)
    settings = {**dict(swarm.knobs), **base.db_settings}
    return msgspec.structs.replace(base, seed=seed, workload=swarm.workload, options=options,
                                   db_settings=settings)  # fmt: skip


@dataclass
class RunSummary:
    """What a worker sends back about one run."""

    seed: int
    valid: bool | str
    exit_code: int
    run_dir: str
    sim_s: float
    wall_s: float
    ops: int
    cells: list[Cell] = field(default_factory=list)
    failures: list[tuple[str, str]] = field(default_factory=list)  # (checker, rule)
    error: str | None = None
    fault_kinds: list[str] = field(default_factory=list)  # of each fault the schedule emitted
    fault_starts_s: list[float] = field(default_factory=list)  # when each was invoked
    faults_end_s: float = 0.0  # when the last fault's heal completed (history time)


def faults_in_history(path: Path) -> tuple[list[str], list[float], float]:
    """The kinds of the faults a history's schedule emitted, in order, when
    each was invoked (history s), and when the last of them was healed: what
    shrink counts as a schedule's length, and where it may cut it."""
    kinds: list[str] = []
    starts: list[float] = []
    end_ns = 0
    heals = set(HEAL_OF.values())
    with path.open("rb") as fh:
        for line in fh:
            if b'"process":"nemesis"' not in line:
                continue
            try:
                op = msgspec.json.decode(line)
            except msgspec.DecodeError:
                continue  # a torn last line
            f, at = op.get("f"), int(op.get("time") or 0)
            if f in HEAL_OF and op.get("type") == "invoke":
                kinds.append(str(f))
                starts.append(at / 1e9)
            if f in HEAL_OF or f in heals:
                end_ns = max(end_ns, at)
    return kinds, starts, end_ns / 1e9


def failures_of(results: dict[str, Any]) -> list[tuple[str, str]]:
    """(checker, rule) of every invalid checker's anomalies, first-seen order, no repeats."""
    out: dict[tuple[str, str], None] = {}
    for name, checker in (results.get("checkers") or {}).items():
        if checker.get("valid") is not False:
            continue
        kinds = [str(a.get("kind") or "invalid") for a in checker.get("anomalies") or []]
        for kind in kinds or ["invalid"]:
            out[(name, kind)] = None
    return list(out)


def play(plan_bytes: bytes, store: str, keep_valid: bool = False) -> RunSummary:
    """Run one simulated plan (in a worker process); keep its run dir if it is not valid."""
    from harness.runner import run  # the worker imports the runner, not the parent's caller

    plan = msgspec.json.decode(plan_bytes, type=plans.Plan)
    scratch = Path(tempfile.mkdtemp(prefix=f"faultline-explore-{plan.seed}-"))
    started = time.monotonic()
    try:
        outcome = run(plan, scratch)
        wall = time.monotonic() - started
        path = outcome.run.path
        results = msgspec.to_builtins(outcome.result)  # what results.json holds, not re-read
        sim_s = next(
            (float(n.split()[1]) for n in outcome.notes if n.startswith("simulated ")), 0.0
        )
        history = path / "history.jsonl"
        cells = cells_of_history(history) if history.is_file() else []
        fault_kinds, fault_starts_s, faults_end_s = (
            faults_in_history(history) if history.is_file() else ([], [], 0.0)
        )
        kept = ""
        if keep_valid or outcome.result.valid is not True:
            dest = Path(store) / path.parent.name / path.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(path), dest)
            kept = str(dest)
        return RunSummary(
            seed=plan.seed,
            valid=outcome.result.valid,
            exit_code=outcome.exit_code,
            run_dir=kept,
            sim_s=sim_s,
            wall_s=wall,
            ops=outcome.result.ops,
            cells=cells,
            failures=failures_of(results),
            error=outcome.error,
            fault_kinds=fault_kinds,
            fault_starts_s=fault_starts_s,
            faults_end_s=faults_end_s,
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
