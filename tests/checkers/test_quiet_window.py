"""L2's window is the last half of the quiet period the runner slept, not of the
time since the heal: on Docker the runner first waits for the cluster to recover
(every group led, every rebalance done), which the full mix stretched to 20 s."""

from __future__ import annotations

from typing import Any

import pytest

from checkers.api import CheckContext, CheckerResult
from checkers.convergence import ConvergenceChecker
from checkers.history import Event, pair
from tests.checkers.helpers import HistoryBuilder
from tests.checkers.rule_cases import NEW, ZERO, S, _quiet

Q = 10.0


def _judge(extra: list[dict[str, Any]], recovery_s: float) -> CheckerResult:
    """part-0 settled under n1 (term 3); a fault healed at 2 s, `recovery_s` of
    recovery, Q of quiet, then the final read; `extra` are n2's events (wall: s)."""
    audit = _quiet({"n2": extra}).audit
    assert audit is not None
    h = HistoryBuilder()
    h.op("nemesis", "partition", type_="info", dt=S // 2).op("nemesis", "heal", dt=S // 2)
    h.add(0, "invoke", "read", dt=int((recovery_s + Q) * S), key="k1")
    h.add(0, "ok", "read", dt=S // 100, key="k1")
    events = [Event(**e) for e in h.events]
    ctx = CheckContext(events=events, operations=pair(events), audit=audit,
                       options={"history_zero_wall": ZERO, "quiet_s": Q})  # fmt: skip
    return ConvergenceChecker().check(ctx)


def _term(wall: float) -> list[dict[str, Any]]:
    return [{"kind": "term", "group": "part-0", "term": 4, "wall": wall}]


@pytest.mark.parametrize(
    ("wall", "flagged"),
    [
        (8.0, False),  # 6 s after the heal: recovering, the quiet period not begun
        (14.0, False),  # in the quiet period's first half
        (19.0, True),  # in its last half
    ],
)
def test_a_new_term_is_judged_only_in_the_last_half_of_the_slept_quiet_period(
    wall: float, flagged: bool
) -> None:
    # Healed at 2 s, recovered at 12 s, quiet until the read at 22 s.
    result = _judge(_term(wall), recovery_s=10.0)
    kinds = {a.kind for a in result.anomalies}
    assert ("leader-changed-in-quiet" in kinds) is flagged, result.anomalies


def test_without_a_recovery_the_window_is_as_before() -> None:
    """Final read Q after the heal: the last half starts Q/2 after it (7 s)."""
    assert {a.kind for a in _judge(_term(8.0), recovery_s=0.0).anomalies} == {
        "leader-changed-in-quiet"
    }


def test_a_voter_that_loses_sight_of_its_leader_and_hears_it_again_is_no_change() -> None:
    """n2's election timer fires before n1's heartbeat is read (a node stalled half
    a second): `leader` null then n1 again, term 3 throughout. Counted, not flagged."""
    blip = [
        {"kind": "leader", "group": "part-0", "leader": leader, "term": 3, "wall": wall}
        for leader, wall in ((None, 19.0), ("n1", 19.001))
    ]
    result = _judge(blip, recovery_s=10.0)
    assert result.valid is True, result.anomalies
    assert result.figures["stability-late-followers"] == 2


def test_a_voter_that_loses_its_leader_for_good_is_flagged() -> None:
    lost = [{"kind": "leader", "group": "part-0", "leader": None, "term": 3, "wall": 19.0}]
    kinds = {a.kind for a in _judge(lost, recovery_s=10.0).anomalies}
    assert "leader-changed-in-quiet" in kinds


@pytest.mark.parametrize(("change_wall", "judged"), [(6.0, True), (15.0, False)])
def test_a_group_whose_membership_changed_only_in_the_recovery_is_judged(
    change_wall: float, judged: bool
) -> None:
    """A configuration entry at 6 s (recovering) leaves part-0 judged, so a new term
    in the quiet period's last half is flagged; one at 15 s (inside Q) leaves the
    group to L1, as a rebalance still finishing."""
    conf = {"kind": "config-committed", "group": "part-0", "stage": "stable", "peers": NEW,
            "old_peers": None, "index": 41, "wall": change_wall}  # fmt: skip
    result = _judge([conf, *_term(19.0)], recovery_s=10.0)
    kinds = {a.kind for a in result.anomalies}
    assert ("leader-changed-in-quiet" in kinds) is judged, result.anomalies
    assert result.figures["stability-groups"] == (1 if judged else 0)


def _early_heal(final: str) -> CheckerResult:
    """A kill healed at 1 s, long before the time limit: the workload runs on to
    8 s (a watch to the node still starting refused at 1.02 s), then the main
    phase's heal-all (nothing left to heal), Q, and the final read."""
    audit = _quiet().audit
    assert audit is not None
    h = HistoryBuilder()
    h.op("nemesis", "kill", type_="info", dt=S // 2).op("nemesis", "start", dt=S // 2)
    refused = "watch cut off: connection refused"
    h.add(0, "invoke", "watch", dt=S // 50).add(0, "info", "watch", dt=S // 1000, error=refused)
    for _ in range(7):
        h.op(1, "read", dt=S // 2, key="k1")
    h.op("nemesis", "heal-all", dt=S // 2)
    h.add(2, "invoke", "read", dt=int(Q * S), key="k1").add(2, final, "read", dt=S // 100, key="k1")
    events = [Event(**e) for e in h.events]
    ctx = CheckContext(events=events, operations=pair(events), audit=audit,
                       options={"history_zero_wall": ZERO, "quiet_s": Q})  # fmt: skip
    return ConvergenceChecker().check(ctx)


def test_l3_judges_the_final_reads_not_the_workload_running_on_after_an_early_heal() -> None:
    """Sim seed 1017 (explore): 'watch invoked 0.02s into the quiet period got no
    answer' for a watch the workload sent to a node restarted 0.02 s before."""
    result = _early_heal("ok")
    assert result.valid is True, result.anomalies
    assert result.figures["ops-after-heal"] == 1  # the final read alone


def test_l3_still_flags_a_final_read_without_an_answer() -> None:
    result = _early_heal("info")
    assert [a.kind for a in result.anomalies] == ["unavailable-after-heal"]
    assert "read k1 invoked 10.00s into the quiet period got no answer" in (
        result.anomalies[0].message
    )
