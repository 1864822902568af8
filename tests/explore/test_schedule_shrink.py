"""The pieces of explore and shrink that need no simulation: a kept fault is
the same fault, ddmin returns a 1-minimal failing subset, budgets parse,
coverage cells come from applied faults only, steering prefers unhit cells."""

from __future__ import annotations

import random

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness import plan as plans
from harness.cli import CliError
from harness.commands_explore import parse_budget
from harness.coverage import Coverage, cell_of, universe
from harness.explore import KNOBS, choose, draw_swarm, explored_plan
from harness.shrink import ddmin
from nemesis.generator import PRIMITIVES, NemesisSchedule
from workloads.generator import drain


def _faults(keep: list[int] | None, only: list[str] | None = None) -> list[dict[str, object]]:
    gen = NemesisSchedule(random.Random(7), ["mix"], mode="periodic", end_s=120.0,
                          keep=keep, only=only)  # fmt: skip
    ops = drain(gen, ["nemesis"], step_ns=50_000_000)
    return [dict(op.value) for op in ops if op.f in PRIMITIVES]


def test_a_kept_fault_is_the_fault_the_full_schedule_had() -> None:
    full = _faults(None)
    assert len(full) >= 6
    kept = _faults([2, 5])
    assert kept == [full[1], full[4]]
    assert _faults([]) == []


def test_swarm_kinds_restrict_what_the_mix_draws() -> None:
    faults = _faults(None, only=["pause"])
    assert faults
    assert {f["kind"] for f in faults} == {"pause"}
    with pytest.raises(ValueError, match="unknown fault kind 'nap'"):
        _faults(None, only=["nap"])


@given(st.sets(st.integers(0, 15), min_size=1, max_size=4), st.integers(1, 16))
def test_ddmin_returns_a_one_minimal_failing_subset(needed: set[int], size: int) -> None:
    """Fails when every `needed` item is present: the result is exactly `needed`."""
    items = list(range(max(size, max(needed) + 1)))
    calls = []

    def fails(candidates: list[list[int]]) -> int | None:
        calls.append(len(candidates))
        return next((i for i, c in enumerate(candidates) if needed <= set(c)), None)

    got = ddmin(items, fails)
    assert set(got) == needed
    assert got == sorted(got)


def test_ddmin_gives_the_empty_schedule_when_the_failure_needs_no_fault() -> None:
    assert ddmin([1, 2, 3], lambda cands: 0 if cands == [[]] else None) == []


@pytest.mark.parametrize(("text", "want"), [
    ("10m", (600.0, None)), ("90s", (90.0, None)), ("1h", (3600.0, None)),
    ("1000 runs", (None, 1000)), ("12", (None, 12)), ("1run", (None, 1)),
])  # fmt: skip
def test_budgets_parse(text: str, want: tuple[float | None, int | None]) -> None:
    assert parse_budget(text) == want


@pytest.mark.parametrize("text", ["", "ten minutes", "0", "-3m", "1.5 runs"])
def test_bad_budgets_are_refused_in_one_line(text: str) -> None:
    with pytest.raises(CliError, match="--budget"):
        parse_budget(text)


def test_cells_count_applied_faults_by_phase_and_role() -> None:
    trig = {"stage": "joint", "group": "part-1"}
    assert cell_of({"kind": "kill", "target": "primary", "trigger": trig}) == \
        ("kill", "joint", "primary")  # fmt: skip
    assert cell_of({"kind": "partition", "grouping": "isolate-leader"}) == \
        ("partition", "timer", "group-leader")  # fmt: skip
    assert cell_of({"kind": "partition", "grouping": "isolate", "target": "meta-leader"}) == \
        ("partition", "timer", "meta-leader")  # fmt: skip
    assert cell_of({"kind": "slow", "target": "joining"}) == ("slow", "timer", "joining")
    # A primitive kill's `leader` is mix's `group-leader`: one cell of the table.
    assert cell_of({"kind": "kill", "target": "leader"}) == ("kill", "timer", "group-leader")
    # An older table's `leader` cell joins its kind and phase's row, not a row of its own
    # (five roles a timed kill can land on, joining not among them, plus the old cell).
    rows = Coverage({("kill", "timer", "leader"): 1}).table()
    assert [r for r in rows if r[:2] == ("kill", "timer")] == [("kill", "timer", 1, 6)]
    assert cell_of({"kind": "heal-partition"}) is None
    cov = Coverage()
    assert cov.total == len(universe())
    assert cov.add([("kill", "joint", "primary"), ("kill", "joint", "primary")]) == 1
    assert cov.hit == 1


def test_a_fault_aimed_at_no_joining_peer_counts_where_it_landed() -> None:
    """A timed fault (or one at `done`) aimed at the joining peer has none to
    aim at and lands on a random node: sim seed 108's pauses at `joining`
    were counted as joining-peer cells. The cell is `random`, as the fault
    was, and no run can fill a joining cell of a phase that names no peer."""
    fell_back = {"kind": "pause", "target": "joining", "resolved": "random node"}
    assert cell_of(fell_back) == ("pause", "timer", "random")
    slow = {"kind": "slow", "target": "joining", "resolved": "random node",
            "trigger": {"stage": "done"}}  # fmt: skip
    assert cell_of(slow) == ("slow", "done", "random")
    isolate = {"kind": "partition", "grouping": "isolate-joining", "resolved": "random node"}
    assert cell_of(isolate) == ("partition", "timer", "random")
    joined = {"kind": "pause", "target": "joining", "resolved": "joining peer",
              "trigger": {"stage": "catching-up"}}  # fmt: skip
    assert cell_of(joined) == ("pause", "catching-up", "joining")
    cells = set(universe())
    for kind in ("kill", "pause", "slow", "partition"):
        assert (kind, "timer", "joining") not in cells
        assert (kind, "done", "joining") not in cells
        assert (kind, "timer", "random") in cells
        assert (kind, "pending-open", "joining") in cells


def test_steering_picks_the_selection_reaching_the_least_hit_cells() -> None:
    base = plans.Plan(backend="sim")
    empty = Coverage()
    # Every cell but the pause ones hit many times: a steered seed wants pauses.
    saturated = Coverage({c: 100 for c in universe() if c[0] != "pause"})
    steered = [choose(s, base, "register", saturated) for s in range(20)]
    unsteered = [choose(s, base, "register", None) for s in range(20)]
    assert sum("pause" in s.kinds for s in steered) > sum("pause" in s.kinds for s in unsteered)
    assert choose(3, base, "register", empty) == choose(3, base, "register", empty)
    swarm = draw_swarm(random.Random(1), base, "register")
    assert swarm.workload[0] == "register"
    assert set(swarm.workload) <= set(base.workload)


def test_the_swarm_moves_learners_in_some_seeds_unless_the_plan_says() -> None:
    base = plans.Plan(backend="sim")
    chosen = [explored_plan(base, s, choose(s, base, "register", None)) for s in range(20)]
    learners = [p.options["change_learners"] for p in chosen]
    # A defect that miscounts learners needs runs whose changes name some.
    assert 0 < sum(learners) < len(learners)
    fixed = msgspec.structs.replace(base, options={**base.options, "change_learners": False})
    assert not any(
        explored_plan(fixed, s, choose(s, fixed, "register", None)).options["change_learners"]
        for s in range(20)
    )


def test_the_swarm_turns_replication_knobs_in_some_seeds_unless_the_plan_sets_them() -> None:
    base = plans.Plan(backend="sim")
    chosen = [explored_plan(base, s, choose(s, base, "register", None)) for s in range(20)]
    turned = [p.db_settings for p in chosen if p.db_settings]
    assert 0 < len(turned) < len(chosen)
    assert all(set(t) == set(KNOBS) for t in turned)
    assert all(t[k] in KNOBS[k] for t in turned for k in t)
    fixed = msgspec.structs.replace(base, db_settings={"max_inflight_appends": 3})
    for s in range(20):
        plan = explored_plan(fixed, s, choose(s, fixed, "register", None))
        assert plan.db_settings["max_inflight_appends"] == 3
