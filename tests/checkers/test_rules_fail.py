"""Each catalog rule can fail: an input that breaks exactly that rule is reported
under that rule and no other (checkers/catalog.py maps anomaly kinds to rules).

The simulator-only rules and properties (R3, and the omniscient checker's
side of the others) are broken one by one in tests/sim/test_omniscient_rules.py.
"""

from __future__ import annotations

import pytest

from checkers.catalog import BY_ID, rule_of
from checkers.compose import REGISTRY, check
from checkers.history import Event
from tests.checkers.rule_cases import CASES, CLEAN, Case


def _judge(case: Case) -> tuple[set[str], list[tuple[str, str]]]:
    """(rules broken, every (checker, kind) reported) by the case's checkers."""
    events = [Event(**e) for e in case.history]
    result = check({}, events, case.options, audit=case.audit,
                   checkers={n: REGISTRY[n]() for n in case.checkers})  # fmt: skip
    kinds = [(name, a.kind) for name, r in result.checkers.items() for a in r.anomalies]
    undecided = {name: r.error for name, r in result.checkers.items() if r.valid == "unknown"}
    assert not undecided, undecided
    return {rule_of(c, k) or f"outside:{c}/{k}" for c, k in kinds}, kinds


@pytest.mark.parametrize("rule", sorted(CASES))
def test_breaking_one_rule_reports_that_rule_alone(rule: str) -> None:
    """The case breaks `rule`: some checker says so, and nothing else is reported."""
    broken, kinds = _judge(CASES[rule]())
    assert broken == {rule}, kinds
    assert {k for _, k in kinds} <= {k for ks in BY_ID[rule].kinds.values() for k in ks}


@pytest.mark.parametrize("name", sorted(CLEAN))
def test_the_same_input_with_the_rule_kept_is_valid(name: str) -> None:
    """The scaffolding of a case is clean: only the break is reported."""
    broken, kinds = _judge(CLEAN[name]())
    assert broken == set(), kinds


def test_every_rule_that_events_or_histories_can_show_has_a_case() -> None:
    """Every rule some checker other than the simulator's reports is broken here."""
    from_runs = {r.id for r in BY_ID.values() if set(r.kinds) - {"sim"}}
    assert from_runs == set(CASES)


def test_the_planted_cases_exercise_their_rule() -> None:
    """The clean twins of the core's planted bugs do meet the situation the rule is
    about: n2 ignores the RequestVote under its lease; n1 steps down as removed
    only after the stable entry commits."""
    clean = CLEAN["R10"]().audit
    assert clean is not None
    assert any(e["kind"] == "vote-ignored" and e["reason"] == "leader-lease" for e in clean["n2"])
    leaving = CLEAN["R12"]().audit
    assert leaving is not None
    kinds = [(e["kind"], e.get("stage") or e.get("reason")) for e in leaving["n1"]
             if e["kind"] in ("config-committed", "step-down")]  # fmt: skip
    assert kinds[-2:] == [("config-committed", "stable"), ("step-down", "removed")]


@pytest.mark.parametrize(("term", "leader"), [(3, "n4"), (2, "n4"), (4, "n1")])
def test_learning_any_other_leader_in_the_window_stays_an_l2_break(term: int, leader: str) -> None:
    """Only learning term 3's own leader (elected before the window) is a late
    follower; another node, an older term or a newer one is a change (and n2
    ending on another leader than the others breaks L1 as well)."""
    from tests.checkers.rule_cases import late_follower

    _, kinds = _judge(late_follower(term, leader))
    assert ("convergence", "leader-changed-in-quiet") in kinds, kinds


def test_a_late_follower_is_counted_not_hidden() -> None:
    from tests.checkers.rule_cases import late_follower

    case = late_follower()
    events = [Event(**e) for e in case.history]
    result = check({}, events, case.options, audit=case.audit,
                   checkers={n: REGISTRY[n]() for n in case.checkers})  # fmt: skip
    assert result.checkers["convergence"].figures["stability-late-followers"] == 1


def test_a_stale_leader_on_the_way_to_the_elected_one_is_a_late_follower() -> None:
    """Seen in CI (ember on Docker, seed 9091): after a partition healed, n1 got a
    6 s old frame of term 6's leader, then term 7's. Not a change of the group's
    leadership; without the second frame it stays an L2 break (test above)."""
    from tests.checkers.rule_cases import stale_then_late_follower

    case = stale_then_late_follower()
    events = [Event(**e) for e in case.history]
    result = check({}, events, case.options, audit=case.audit,
                   checkers={n: REGISTRY[n]() for n in case.checkers})  # fmt: skip
    convergence = result.checkers["convergence"]
    assert convergence.valid is True, convergence.anomalies
    assert convergence.figures["stability-late-followers"] == 3
