"""explore's swarm stays within what the base plan's own flags draw, and its
summary counts the coverage cells that plan can reach."""

from __future__ import annotations

import random

import msgspec
import pytest

from harness import plan as plans
from harness.coverage import universe
from harness.explore import Space, choose, explored_plan
from nemesis.generator import DEFAULT_PHASES, EXTRA_KINDS, PRIMITIVES, NemesisSchedule
from nemesis.targets import ROLE_TARGETS
from workloads.generator import drain

SEEDS = range(30)


def _base(**options: object) -> plans.Plan:
    nemesis = options.pop("nemesis", ("mix",))
    base = plans.Plan(backend="sim")
    return msgspec.structs.replace(base, nemesis=nemesis, options={**base.options, **options})


def _explored(base: plans.Plan, seed: int) -> plans.Plan:
    return explored_plan(base, seed, choose(seed, base, "register", None))


def _faults(plan: plans.Plan) -> list[str]:
    """The fault kinds the explored plan's schedule draws, built as the runner builds it."""
    gen = NemesisSchedule(
        random.Random(plan.seed), list(plan.nemesis), mode="periodic", end_s=60.0,
        phases=plan.options.get("nemesis_phases"), only=plan.options.get("nemesis_kinds"),
        targets=plan.options.get("nemesis_targets"),
    )  # fmt: skip
    return [op.f for op in drain(gen, ["nemesis"], step_ns=50_000_000) if op.f in PRIMITIVES]


@pytest.mark.parametrize("nemesis", [("partition",), ("kill", "pause"), ("slow",)])
def test_every_seed_draws_faults_of_the_named_kinds_only(nemesis: tuple[str, ...]) -> None:
    """A swarm subset outside the named kinds left the schedule empty: a run with no fault."""
    base = _base(nemesis=nemesis)
    for seed in SEEDS:
        plan = _explored(base, seed)
        assert set(plan.options["nemesis_kinds"]) <= set(nemesis)
        drawn = _faults(plan)
        assert drawn, f"seed {seed}: {plan.options['nemesis_kinds']} drew no fault"
        assert set(drawn) <= set(nemesis)


def test_a_mix_explore_draws_every_primitive_and_clocks_only_where_named() -> None:
    kinds = {k for s in SEEDS for k in _explored(_base(), s).options["nemesis_kinds"]}
    assert kinds == set(PRIMITIVES)
    named = {k for s in SEEDS for k in _explored(_base(nemesis=("mix", "clock")), s)
             .options["nemesis_kinds"]}  # fmt: skip
    assert named == {*PRIMITIVES, "clock"}


def test_no_nemesis_explores_without_a_kind_list() -> None:
    plan = _explored(_base(nemesis=()), 1)
    assert "nemesis_kinds" not in plan.options


def test_named_phases_and_targets_bound_the_swarm() -> None:
    base = _base(nemesis_phases=["joint", "pending"], nemesis_targets=["primary", "random"])
    plans_ = [_explored(base, s) for s in SEEDS]
    assert {p for plan in plans_ for p in plan.options["nemesis_phases"]} == {"joint", "pending"}
    assert {t for plan in plans_ for t in plan.options["nemesis_targets"]} == {"primary", "random"}


def test_an_etcd_plan_s_space_has_etcd_s_phases_and_roles_only() -> None:
    base = msgspec.structs.replace(_base(nemesis_phases=["catching-up", "stable"]), db="etcd")
    space = Space.of(base)
    assert space.phases == ("catching-up", "stable")
    assert not set(space.targets) & set(ROLE_TARGETS) - {"group-leader"}
    assert {role for _, _, role in space.cells()} <= {"group-leader", "joining", "random", "none"}


def test_the_reachable_cells_of_a_mix_are_the_table_s_primitive_cells() -> None:
    """Space and the table agree: a mix reaches every cell of its kinds, no other."""
    assert set(Space.of(_base()).cells()) == {c for c in universe() if c[0] in PRIMITIVES}
    with_extras = Space.of(_base(nemesis=("mix", *EXTRA_KINDS))).cells()
    assert set(with_extras) == set(universe())
    assert len(with_extras) == len(set(with_extras))


def test_the_nemesis_mode_decides_timer_and_phase_cells() -> None:
    periodic = Space.of(_base(nemesis_mode="periodic")).cells()
    assert periodic
    assert {phase for _, phase, _ in periodic} == {"timer"}
    phased = Space.of(_base(nemesis_mode="phase")).cells()
    assert phased
    assert "timer" not in {phase for _, phase, _ in phased}


def test_a_mix_naming_the_default_phases_waits_for_those_only() -> None:
    """Named phases are honoured even when they are the three a plan naming none gets."""
    assert NemesisSchedule(random.Random(1), ["mix"], phases=DEFAULT_PHASES).phases == list(
        DEFAULT_PHASES
    )
    assert len(NemesisSchedule(random.Random(1), ["mix"]).phases) > len(DEFAULT_PHASES)
    assert NemesisSchedule(random.Random(1), ["kill"]).phases == list(DEFAULT_PHASES)


def test_a_plain_run_s_space_is_what_its_schedule_draws() -> None:
    """Nightly counts a night's plain runs by this: a mix mixes clocks in where
    they move and etcd's compactions where it asks; a primitive waits for the
    default phases and aims at leader, random or joining."""
    docker = msgspec.structs.replace(_base(), backend="docker")
    assert "clock" in Space.of(docker, swarmed=False).kinds
    assert "clock" not in Space.of(docker).kinds
    etcd = msgspec.structs.replace(docker, db="etcd")
    assert Space.of(etcd, swarmed=False).kinds == (*PRIMITIVES, "compact-kill")
    kill = Space.of(_base(nemesis=("kill",)), swarmed=False)
    assert kill.phases == DEFAULT_PHASES
    assert kill.targets == ("leader", "random", "joining")
    assert {role for _, _, role in kill.cells()} == {"group-leader", "random", "joining"}
    assert set(kill.cells()) <= set(universe())
    narrowed = _base(nemesis=("mix",), nemesis_kinds=["pause"])
    assert Space.of(narrowed, swarmed=False).kinds == ("pause",)


_NEMESES = [("mix",), ("mix", "clock"), ("partition",), ("kill", "pause"), ("clock",)]
_OPTIONS: list[dict[str, object]] = [
    {},
    {"nemesis_phases": ["joint", "pending"]},
    {"nemesis_targets": ["primary", "random"]},
    {"nemesis_kinds": ["pause"]},
    {"nemesis_groupings": ["ring", "isolate"]},
]
_PLAN_GRID = [
    (db, backend, nemesis, options)
    for db, backend in [("ember", "sim"), ("ember", "docker"), ("etcd", "docker")]
    for nemesis in _NEMESES
    for options in _OPTIONS
]


@pytest.mark.parametrize(("db", "backend", "nemesis", "options"), _PLAN_GRID)
def test_a_plain_run_s_space_is_the_schedule_the_runner_builds(
    db: str, backend: str, nemesis: tuple[str, ...], options: dict[str, object]
) -> None:
    """Space reads the schedule's own resolution of a plan (nemesis.generator.aims):
    its kinds, phases and targets are the built schedule's, so nightly's
    denominator cannot drift from what runs draw."""
    from harness.dbs.registry import SYSTEMS
    from harness.runner import clocks_movable

    plan = msgspec.structs.replace(_base(nemesis=nemesis, **options), db=db, backend=backend)
    system = SYSTEMS[db]
    gen = NemesisSchedule(
        random.Random(1), list(plan.nemesis), phases=plan.options.get("nemesis_phases"),
        only=plan.options.get("nemesis_kinds"), targets=plan.options.get("nemesis_targets"),
        groupings=plan.options.get("nemesis_groupings"), roles=system.plan_roles(plan),
        clocks=clocks_movable(plan), maintenance=getattr(system.make_db, "maintenance", ()),
        mix_maintenance=system.maintenance_in_mix,
    )  # fmt: skip
    mixed = {"clock"} if gen.clock_share else set()
    mixed |= {"compact-kill"} if gen.maintenance_share else set()
    space = Space.of(plan, swarmed=False)
    assert set(space.kinds) == set(gen.kinds) | mixed
    reached = system.phases_of(plan.workload)  # a phase no workload reaches is no cell
    assert list(space.phases) == [p for p in gen.phases if reached is None or p in reached]
    assert space.targets == gen.targets


def test_the_summary_names_the_reachable_cells_never_hit() -> None:
    """explore's last line names what its plan could reach but no run hit, the
    first few in the table's order, and says nothing once every one is hit."""
    from harness.commands_explore import _Tally
    from harness.coverage import Coverage

    reachable = Space.of(plans.Plan(nemesis=("partition",), backend="sim")).cells()
    assert len(reachable) > 3
    coverage = Coverage(dict.fromkeys(reachable[2:], 1))
    line = _Tally(coverage, reachable).never_hit()
    assert line == "explore: never hit (kind/phase/role): " + ", ".join(
        "/".join(c) for c in reachable[:2]
    )
    assert (
        _Tally(Coverage(), reachable).never_hit(most=3).endswith(f" and {len(reachable) - 3} more")
    )
    assert _Tally(Coverage(dict.fromkeys(reachable, 1)), reachable).never_hit() is None


def test_a_compact_kill_explore_keeps_a_metastore_in_every_draw() -> None:
    """compact-kill on ember needs a workload that starts the control plane;
    a draw without one made the runner refuse the plan and stopped the
    explore (about one seed in eight of the full mix). Draws that had one are
    untouched, and so are the other seeds' selections."""
    from harness.dbs.registry import SYSTEMS
    from harness.runner import compact_kill_refusal, nemesis_fit

    full = ("register", "change-peers", "rebalance", "cancel-race", "metastore")
    base = msgspec.structs.replace(_base(nemesis=("mix", "compact-kill")), workload=full)
    plain = msgspec.structs.replace(base, nemesis=("mix",))
    repaired = 0
    for seed in range(60):
        plan = _explored(base, seed)
        assert compact_kill_refusal(plan, SYSTEMS["ember"]) is None, (seed, plan.workload)
        nemesis_fit(plan)  # the runner's own check: raises PlanError on a refused plan
        drawn = _explored(plain, seed).workload  # the same draw, with nothing to repair
        assert [w for w in plan.workload if w != "rebalance"] == [
            w for w in drawn if w != "rebalance"
        ]
        repaired += plan.workload != drawn
    assert repaired >= 3


def test_a_draw_aims_only_at_roles_its_workloads_start() -> None:
    """A seed whose draw leaves out rebalance and cancel-race has no zone,
    so no primary: its targets drop `primary` (aimed at it, a kill came back
    not applied, and the steering counted cells it could not hit). A base
    that aims at primaries only keeps a zone workload in every draw instead."""
    from harness.dbs.registry import SYSTEMS
    from harness.runner import nemesis_fit

    full = ("register", "change-peers", "rebalance", "cancel-race", "metastore")
    base = msgspec.structs.replace(_base(), workload=full)
    zoneless = 0
    for seed in range(60):
        plan = _explored(base, seed)
        roles = SYSTEMS["ember"].plan_roles(plan)
        targets = plan.options["nemesis_targets"]
        assert targets, seed
        assert all(t in roles or t not in ROLE_TARGETS for t in targets), (seed, plan)
        zoneless += "primary" not in roles
        assert not [n for n in nemesis_fit(plan) if "dropped" in n]
    assert zoneless >= 5
    primaries = msgspec.structs.replace(_base(nemesis_targets=["primary"]), workload=full)
    for seed in range(30):
        plan = _explored(primaries, seed)
        assert {"rebalance", "cancel-race"} & set(plan.workload), (seed, plan.workload)
        assert plan.options["nemesis_targets"] == ["primary"]
        nemesis_fit(plan)  # not refused


def test_phases_no_workload_reaches_are_no_cells() -> None:
    """Without rebalance or cancel-race there is no zone, so no pending phase:
    explore of register,change-peers,metastore counted 92 of 137 cells, the
    pending and pending-open ones among the 45 it could never hit."""
    from harness.explore import Swarm

    base = msgspec.structs.replace(_base(), workload=("register", "change-peers", "metastore"))
    space = Space.of(base)
    assert not {"pending", "pending-open"} & set(space.phases)
    assert {phase for _, phase, _ in space.cells()} == {"catching-up", "joint", "stable",
                                                        "done", "timer"}  # fmt: skip
    full = Space.of(_base())
    assert {"pending", "pending-open"} <= set(full.phases)
    # A seed of the full mix that drew pending but not the workloads reaching it.
    seed = Swarm(kinds=("kill",), phases=("joint", "pending"), targets=("random",),
                 workload=("register", "change-peers"))  # fmt: skip
    assert {phase for _, phase, _ in full.reachable(seed)} == {"joint", "timer"}
