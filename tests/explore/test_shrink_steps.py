"""The shrinker's steps against a model of a run (no simulation): each step
keeps only candidates failing with the same rule, the searches past ddmin
find the smaller schedules ddmin cannot see, and the budget holds."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import msgspec
import pytest

from harness import plan as plans
from harness.explore import RunSummary
from harness.shrink import GOAL_FAULTS, Shrinker, small_subsets, time_candidates
from harness.shrink_inputs import ShrinkError, onset_of

TARGET = ("raft", "commit-without-quorum")
KINDS = ("partition", "kill", "pause", "slow")
Fails = Callable[[plans.Plan, list[int]], str | None]  # the rule a run fails with, if any


def _emitted(plan: plans.Plan) -> list[int]:
    """A model schedule: fault n is drawn at 2n s, so a time limit cuts it (as under mix)."""
    most = int(plan.time_limit_s / 2)
    keep = plan.options.get("nemesis_keep")
    numbers = sorted(keep) if keep is not None else range(1, 21)
    return [n for n in numbers if n <= most]


def _kind(plan: plans.Plan, n: int) -> str:
    only = plan.options.get("nemesis_kinds")
    return str(only[0]) if only else KINDS[n % len(KINDS)]


def _player(
    fails: Fails, played: list[plans.Plan], delay_s: float = 0.0
) -> Callable[[bytes, str], RunSummary]:
    def play(plan_bytes: bytes, store: str) -> RunSummary:
        time.sleep(delay_s)  # a run takes time: what a step's early stop saves
        plan = msgspec.json.decode(plan_bytes, type=plans.Plan)
        played.append(plan)
        emitted = _emitted(plan)
        rule = fails(plan, emitted)
        return RunSummary(
            seed=plan.seed, valid=rule is None, exit_code=0, run_dir="", sim_s=0.0, wall_s=0.0,
            ops=int(plan.rate_hz * plan.time_limit_s),
            failures=[] if rule is None else [(TARGET[0], rule)],
            fault_kinds=[_kind(plan, n) for n in emitted],
            fault_starts_s=[2.0 * n for n in emitted],
            faults_end_s=2.0 * max(emitted, default=0) + 1.0,
        )  # fmt: skip

    return play


def _shrink(
    fails: Fails, max_runs: int = 400, onset_s: float | None = None
) -> tuple[Shrinker, list[plans.Plan]]:
    base = plans.Plan(backend="sim", seed=9, time_limit_s=40.0)
    played: list[plans.Plan] = []
    player = _player(fails, played)
    start = player(plans.dump(base), "")
    assert TARGET in start.failures, "the model's base run must fail"
    played.clear()
    with ThreadPoolExecutor(2) as pool:
        shrinker = Shrinker(base, TARGET, pool, Path("/nonexistent"), start,
                            max_runs=max_runs, player=player, onset_s=onset_s)  # fmt: skip
        shrinker.shrink()
    return shrinker, played


def test_a_run_whose_plan_no_longer_fails_is_refused_after_one_run() -> None:
    """The base run failed, but its plan now passes (say the code changed): one run, not 300."""
    calls: list[int] = []

    def fails(plan: plans.Plan, e: list[int]) -> str | None:
        calls.append(1)
        return _rule(len(calls) == 1)  # only the failing run the shrink starts from

    with pytest.raises(ShrinkError, match="no longer fails with raft"):
        _shrink(fails)
    assert len(calls) == 2


def _rule(ok: bool) -> str | None:
    return TARGET[1] if ok else None


def test_subsets_find_two_faults_where_ddmin_stops_at_five() -> None:
    """Removing any one of faults 1-5 loses the failure (as when each removal moves
    the later faults), yet faults 2 and 4 alone fail: only the subset search sees it."""
    shrinker, _ = _shrink(lambda p, e: _rule({1, 2, 3, 4, 5} <= set(e) or e == [2, 4]))
    assert shrinker.keep == [2, 4]
    steps = [s.name for s in shrinker.steps if s.kept]
    assert steps[0] == "faults"
    assert "subsets" in steps
    assert shrinker.log()["faults"] == 2


def test_no_small_subset_is_said_so_and_the_ddmin_result_stays() -> None:
    shrinker, played = _shrink(lambda p, e: _rule({1, 2, 3, 4, 5} <= set(e)))
    assert shrinker.keep == [1, 2, 3, 4, 5]
    assert len(shrinker.keep) > GOAL_FAULTS
    subsets = next(s for s in shrinker.steps if s.name == "subsets")
    assert not subsets.kept
    assert "all 25 subsets" in subsets.note
    tried = {tuple(_emitted(p)) for p in played}
    assert all(c in tried for g in small_subsets([1, 2, 3, 4, 5], 3) for c in map(tuple, g))


def test_earlier_faults_can_need_fewer_of_them() -> None:
    """With the gaps halved, faults 1 and 3 suffice; at the plan's own gaps all of 1-5 do."""

    def fails(plan: plans.Plan, e: list[int]) -> str | None:
        if plan.options.get("nemesis_gap_s") == 3.0:
            return _rule({1, 3} <= set(e))
        return _rule({1, 2, 3, 4, 5} <= set(e))

    shrinker, _ = _shrink(fails)
    assert shrinker.plan.options["nemesis_gap_s"] == 3.0
    assert shrinker.keep == [1, 3]


def test_one_simpler_kind_redraws_a_smaller_schedule() -> None:
    def fails(plan: plans.Plan, e: list[int]) -> str | None:
        if plan.options.get("nemesis_kinds") == ["kill"]:
            return _rule(7 in e)
        if plan.options.get("nemesis_kinds") is None:
            return _rule({1, 2, 3, 4, 5} <= set(e))
        return None

    shrinker, _ = _shrink(fails)
    assert shrinker.plan.options["nemesis_kinds"] == ["kill"]
    assert shrinker.keep == [7]
    assert shrinker.now.fault_kinds == ["kill"]


def test_a_candidate_failing_with_another_rule_is_never_kept() -> None:
    """Any single fault fails, but with another rule; the target needs faults 2 and 3."""

    def fails(plan: plans.Plan, e: list[int]) -> str | None:
        if {2, 3} <= set(e):
            return TARGET[1]
        return "lost-write" if e else None

    shrinker, _ = _shrink(fails)
    assert shrinker.keep == [2, 3]


def test_time_and_op_mix_shrink_only_while_the_failure_stays() -> None:
    """Fails while the run lasts 23 s or more at 10 Hz or more, with fault 4."""

    def fails(plan: plans.Plan, e: list[int]) -> str | None:
        return _rule(plan.time_limit_s >= 23 and plan.rate_hz >= 10 and 4 in e)

    shrinker, played = _shrink(fails)
    assert shrinker.keep == [4]
    assert 23 <= shrinker.plan.time_limit_s < 40
    assert shrinker.plan.rate_hz == 12.5  # 50 -> 25 -> 12.5; 6.25 passes
    assert shrinker.plan.concurrency == 1
    assert any(p.rate_hz == 6.25 for p in played)
    assert TARGET in shrinker.now.failures
    assert shrinker.now.ops < 50 * 40


def test_the_run_budget_bounds_the_search() -> None:
    shrinker, played = _shrink(lambda p, e: _rule({1, 2, 3, 4, 5} <= set(e)), max_runs=8)
    assert shrinker.runs <= 8
    assert len(played) == shrinker.runs
    assert {1, 2, 3, 4, 5} <= set(shrinker.keep)  # whatever it kept still fails


def test_onset_cuts_the_faults_and_time_after_the_anomaly_in_one_round() -> None:
    """The anomaly at 11 s: faults 1-5 began before it (fault n at 2n s); 2 and 4 are needed."""
    fails: Fails = lambda p, e: _rule({2, 4} <= set(e) and p.time_limit_s >= 9)  # noqa: E731
    shrinker, _ = _shrink(fails, onset_s=11.0)
    onset = shrinker.steps[1]  # after `replay`
    assert (onset.name, onset.kept, onset.candidates) == ("onset", True, 2)  # one parallel round
    assert "after 5 of 20 faults" in onset.note
    assert "13 s" in onset.note
    assert shrinker.keep == [2, 4]
    wrong, _ = _shrink(lambda p, e: _rule({2, 15} <= set(e)), onset_s=11.0)
    assert not wrong.steps[1].kept  # a hint that loses the failure is not taken
    assert wrong.keep == [2, 15]


def test_a_step_stops_at_its_first_failing_candidate_in_order() -> None:
    """Candidates 3 and 5 fail: 3 wins whichever ends first, and the ones after
    it that had not started are not played."""
    base = plans.Plan(backend="sim", seed=9, time_limit_s=40.0)
    played: list[plans.Plan] = []
    player = _player(lambda p, e: _rule(e in ([3], [5])), played, delay_s=0.2)
    start = player(plans.dump(base), "")
    played.clear()
    with ThreadPoolExecutor(1) as pool:
        shrinker = Shrinker(base, TARGET, pool, Path("/nonexistent"), start, player=player)
        cands = [shrinker.with_faults(base, [n]) for n in range(1, 9)]
        assert shrinker.first_failing(cands) == 3 - 1
        assert shrinker.first_failing(cands[3:]) == 5 - 4
        shrinker._harvest(wait=True)
    assert len(played) <= 6  # 1-3, then 4 and 5 (one more may have started before a cancel)
    assert shrinker.runs == len(played)


@pytest.mark.parametrize(("low", "high", "want"), [
    (5.0, 40.0, [5.0, 22.5]), (20.2, 21.0, [20.5]), (30.0, 30.0, []), (10.0, 10.6, [10.0]),
])  # fmt: skip
def test_time_candidates_lie_below_the_failing_limit(
    low: float, high: float, want: list[float]
) -> None:
    assert time_candidates(low, high) == want


def _run_dir(tmp_path: Path, anomalies: list[dict[str, object]], shared: bool = True) -> Path:
    results = {"valid": False, "checkers": {"raft": {"valid": False, "anomalies": anomalies}}}
    (tmp_path / "results.json").write_text(json.dumps(results))
    timeline = {"history_zero_wall": 1.7e9, "history_zero_mono_ns": 1_000_000_000,
                "shared_monotonic": shared}  # fmt: skip
    (tmp_path / "timeline.json").write_text(json.dumps(timeline))
    return tmp_path


def _placed(history_s: float, mono_ns: int) -> dict[str, object]:
    """An audit event as the checkers leave it in results.json: `wall` placed on
    the harness's clock (history zero at 1.7e9), the node's own reading kept."""
    return {"mono_ns": mono_ns, "wall": 1.7e9 + history_s, "node_wall": 1.7e9 + history_s + 0.25}


def test_the_onset_is_read_from_the_events_an_anomaly_cites(tmp_path: Path) -> None:
    cited = {"kind": "commit-without-quorum",
             "events": [_placed(3.0, 4_000_000_000), _placed(4.5, 5_500_000_000)]}  # fmt: skip
    other = {"kind": "joint-skipped", "events": [_placed(1.0, 2_000_000_000)]}
    sim_time = {"kind": "commit-without-quorum", "time": 9.25}  # simulated seconds
    run = _run_dir(tmp_path, [other, sim_time, cited])
    assert onset_of(run, TARGET) == 4.5  # the earlier of 8.25 and 4.5; not the other rule's
    assert onset_of(run, ("raft", "leader-kept-without-quorum")) is None
    assert onset_of(_run_dir(tmp_path, [cited], shared=False), TARGET) is None


def test_a_restarted_nodes_event_is_placed_by_the_harness_clock_not_its_mono(
    tmp_path: Path,
) -> None:
    """mono_ns counts from the process's start: n3 restarted at 58 s writes 9 s
    at 67 s of history (sim seed 15, election_timeout_ticks=3)."""
    restarted = {"kind": "commit-without-quorum", "events": [_placed(66.5, 9_250_000_000)]}
    assert onset_of(_run_dir(tmp_path, [restarted]), TARGET) == 66.5


def test_an_anomaly_citing_events_from_before_the_history_is_at_its_start(
    tmp_path: Path,
) -> None:
    early = {"kind": "commit-without-quorum", "events": [_placed(-0.001, 999_000_000)]}
    assert onset_of(_run_dir(tmp_path, [early]), TARGET) == 0.0  # not -0.001 ("-0.0 s")
