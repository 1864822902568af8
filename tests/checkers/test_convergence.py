"""Convergence of a healed, quiet cluster."""

from __future__ import annotations

from typing import Any

import pytest

from checkers.api import CheckContext, CheckerResult
from checkers.convergence import ConvergenceChecker
from checkers.history import Event, pair
from tests.checkers.helpers import HistoryBuilder

S = 1_000_000_000
NEW = ["n1", "n2", "n4"]


def _audit() -> dict[str, list[dict[str, Any]]]:
    """A partition moved to NEW: keys settled, one leader, voters agree."""
    write = {"kind": "assignments-written", "zone": 1, "partition": 0, "revision": 4,
             "keys": {"stable": {"old": ["n1", "n2", "n3"], "new": NEW},
                      "pending": {"old": NEW, "new": None}}}  # fmt: skip
    audit: dict[str, list[dict[str, Any]]] = {}
    for n in NEW:
        audit[n] = [
            {"kind": "config-applied", "group": "part-0", "peers": NEW, "old_peers": None},
            {"kind": "config-committed", "group": "part-0", "stage": "stable", "peers": NEW,
             "old_peers": None, "index": 7},
            {"kind": "role", "group": "part-0", "role": "leader" if n == "n1" else "follower",
             "term": 3},
            {"kind": "applied", "group": "part-0", "index": 40, "digest": "abc"},
        ]  # fmt: skip
        for ev in audit[n]:
            ev["node"] = n
    audit["n1"].append({**write, "node": "n1"})
    return audit


def _check(
    audit: Any, quiet_after_s: float = 10.0, restores: tuple[str, ...] = (), **options: Any
) -> CheckerResult:
    """`restores`: the types the rebalance workload's closing restores completed with."""
    h = HistoryBuilder()
    h.op("nemesis", "partition", type_="info").op("nemesis", "heal", type_="info")
    for type_ in restores:
        error = None if type_ == "ok" else "connection refused"
        h.op("rebalance", "alter-zone", type_=type_, value={"partitions": 3, "filter": ["*"]},
             error=error)  # fmt: skip
    h.add(0, "invoke", "read", dt=int(quiet_after_s * S)).add(0, "ok", "read", dt=0)
    events = [Event(**e) for e in h.events]
    ctx = CheckContext(events=events, operations=pair(events), audit=audit, options=options)
    return ConvergenceChecker().check(ctx)


def test_converged_cluster_passes() -> None:
    """Settled keys, one leader whose voters equal stable, equal digests: valid."""
    result = _check(_audit())
    assert result.valid is True, result.anomalies
    assert result.figures == {"groups": 1, "partitions": 1, "stability-groups": -1,
                              "stability-late-followers": 0, "replicas-unobserved": 0,
                              "unobserved": [], "groups-judged-at-collection": 0,
                              "ops-after-heal": 1, "unavailable-after-heal": 0}  # fmt: skip


def test_too_short_quiet_period_is_unknown() -> None:
    """A history ending right after the heal gave the cluster no time: unknown."""
    result = _check(_audit(), quiet_after_s=1.0)
    assert result.valid == "unknown"
    assert "1.0s of quiet" in str(result.error)
    assert _check(_audit(), quiet_after_s=1.0, quiet_s=0.5).valid is True


def _break(kind: str, audit: dict[str, list[dict[str, Any]]]) -> None:
    if kind == "rebalance-not-finished":
        audit["n1"][-1]["keys"]["pending"]["new"] = ["n1", "n4", "n5"]
    elif kind == "stable-not-target":
        audit["n1"][-1]["keys"]["planned"] = {"old": None, "new": ["n3", "n4", "n5"]}
        audit["n1"][-1]["keys"]["pending"]["new"] = ["n3", "n4", "n5"]
    elif kind == "leader-count":
        audit["n2"][2]["role"] = "leader"
    elif kind == "voters-not-stable":
        audit["n1"][0]["peers"] = ["n1", "n2", "n3"]
    elif kind == "joint-at-end":
        audit["n1"][0]["old_peers"] = ["n1", "n2", "n3"]
    elif kind == "replicas-diverge":
        audit["n4"][3]["index"] = 39
    elif kind == "digest-mismatch":
        audit["n4"][3]["digest"] = "abd"


@pytest.mark.parametrize(
    "kind",
    ["rebalance-not-finished", "stable-not-target", "leader-count", "voters-not-stable",
     "joint-at-end", "replicas-diverge", "digest-mismatch"],
)  # fmt: skip
def test_each_unconverged_end_state_is_flagged(kind: str) -> None:
    """Each way of failing to converge is reported under its kind."""
    audit = _audit()
    _break(kind, audit)
    result = _check(audit)
    assert result.valid is False
    assert kind in {a.kind for a in result.anomalies}, result.anomalies


def test_a_group_ending_leaderless_names_the_term_its_replicas_reached() -> None:
    """Sim seed 61 (raft.message.drop on to the end) said "part-4 ends with 0
    leaders in term 0: []", a term no replica was in."""
    audit = _audit()
    audit["n1"][2]["role"] = "follower"
    messages = [a.message for a in _check(audit).anomalies if a.kind == "leader-count"]
    assert messages == ["part-0 ends with no leader (the highest term its replicas reached: 3)"]
    two = _audit()
    two["n2"][2]["role"] = "leader"
    assert "part-0 ends with 2 leaders in term 3: ['n1', 'n2']" in [
        a.message for a in _check(two).anomalies
    ]


def test_no_audit_events_is_unknown() -> None:
    """Without audit logs convergence cannot be judged."""
    assert _check(None).valid == "unknown"


@pytest.mark.parametrize(
    ("n3_reports", "last_wall", "diverges"),
    [
        ([(3950, 95.0), (4000, 97.8)], 99.8, False),  # one report behind, group still written
        ([(3900, 90.0), (3950, 95.0)], 99.8, True),  # two reports behind: not catching up
        ([(3950, 95.0), (4000, 97.8)], 110.0, True),  # the furthest report is long past: quiet
    ],
)
def test_a_group_written_to_the_end_may_be_one_report_behind(
    n3_reports: list[tuple[int, float]], last_wall: float, diverges: bool
) -> None:
    """Sim sweep seed 18: the metastore's group takes writes until the logs are
    collected; n3 had reported 4000 when n1 and n2 reported 4050."""
    audit = _audit()
    for n in NEW:
        audit[n] = [e for e in audit[n] if e["kind"] != "applied"]
    reports = {"n1": [(4000, 97.8), (4050, 99.7)], "n2": [(4000, 97.8), (4050, 99.7)],
               "n4": n3_reports}  # fmt: skip
    for node, seq in reports.items():
        for index, wall in seq:
            audit[node].append({"kind": "applied", "group": "part-0", "index": index,
                                "digest": f"d{index}", "wall": wall, "node": node})  # fmt: skip
    audit["n1"].append({"kind": "lease", "wall": last_wall, "node": "n1"})
    kinds = {a.kind for a in _check(audit).anomalies}
    assert ("replicas-diverge" in kinds) is diverges


@pytest.mark.parametrize(("snapshot_at", "diverges"), [(35, True), (40, False), (None, True)])
def test_a_voter_a_snapshot_took_past_the_last_report_is_unobserved_not_diverged(
    snapshot_at: int | None, diverges: bool
) -> None:
    """Sim property seed 162737: n4 joined by a snapshot past the group's last
    digest report and the group never reached the next, so n4 has no report
    to compare. At or past the report it cannot have made one: counted, not
    flagged. Below it, or with no snapshot, it should have: behind."""
    audit = _audit()
    audit["n4"] = [e for e in audit["n4"] if e["kind"] != "applied"]
    if snapshot_at is not None:
        audit["n4"].insert(0, {"kind": "snapshot-installed", "group": "part-0",
                               "index": snapshot_at, "node": "n4"})  # fmt: skip
    result = _check(audit)
    kinds = {a.kind for a in result.anomalies}
    assert ("replicas-diverge" in kinds) is diverges, result.anomalies
    assert result.figures["replicas-unobserved"] == (0 if diverges else 1)
    if not diverges:
        assert result.figures["unobserved"] == [
            "n4 in part-0: snapshot at 40, past the last digest report at 40"
        ]


def _collected(audit: dict[str, list[dict[str, Any]]], at: dict[str, tuple[int, str, float]]
               ) -> None:  # fmt: skip
    """Appends each node's report at collection: (index, digest, idle_s)."""
    for node, (index, digest, idle) in at.items():
        audit[node].append({"kind": "applied", "group": "part-0", "index": index,
                            "digest": digest, "reason": "collect", "idle_s": idle,
                            "node": node})  # fmt: skip


def test_voters_equal_at_collection_are_judged_there() -> None:
    """Past the last periodic report (40) every voter reports 57 alike: judged
    there, and the figure says so."""
    audit = _audit()
    _collected(audit, dict.fromkeys(NEW, (57, "d57", 6.0)))
    result = _check(audit)
    assert result.valid is True, result.anomalies
    assert result.figures["groups-judged-at-collection"] == 1


@pytest.mark.parametrize(
    ("n4_report", "idle_s", "kinds"),
    [
        ((57, "dXX"), 6.0, {"replicas-diverge", "digest-mismatch"}),  # same index, other entries
        ((52, "d52"), 6.0, {"replicas-diverge"}),  # behind in a group quiet for 6 s
        ((52, "d52"), 0.3, set()),  # behind in a group still written: reports a moment apart
        ((38, "d38"), 0.3, {"replicas-diverge"}),  # written, but two periodic reports behind
    ],
)
def test_voters_that_differ_at_collection_diverge_unless_still_written(
    n4_report: tuple[int, str], idle_s: float, kinds: set[str]
) -> None:
    audit = _audit()
    for n in NEW:  # periodic reports at 0 and 40: the floor is 0 + one report
        audit[n].insert(3, {"kind": "applied", "group": "part-0", "index": 0, "digest": "d0",
                            "node": n})  # fmt: skip
    audit["n4"] = [e for e in audit["n4"] if e.get("index") != 40 or e["kind"] != "applied"]
    audit["n4"].append({"kind": "applied", "group": "part-0", "index": 40, "digest": "abc",
                        "node": "n4"})  # fmt: skip
    _collected(audit, {"n1": (57, "d57", idle_s), "n2": (57, "d57", idle_s),
                       "n4": (*n4_report, idle_s)})  # fmt: skip
    if n4_report[0] == 38:
        for n in ("n1", "n2"):
            audit[n].insert(4, {"kind": "applied", "group": "part-0", "index": 50,
                                "digest": "d50", "node": n})  # fmt: skip
    result = _check(audit)
    assert {a.kind for a in result.anomalies} == kinds, result.anomalies


def test_a_voter_without_a_report_at_collection_falls_back_to_the_periodic_ones() -> None:
    """n4 did not answer at collection: the periodic reports (equal at 40) judge."""
    audit = _audit()
    _collected(audit, {"n1": (57, "d57", 6.0), "n2": (57, "d57", 6.0)})
    result = _check(audit)
    assert result.valid is True, result.anomalies
    assert result.figures["groups-judged-at-collection"] == 0


def test_a_voter_a_snapshot_took_past_the_periodic_reports_is_compared_at_collection() -> None:
    """Seed 162737's case with the collection reports: n4 is judged, not unobserved."""
    audit = _audit()
    audit["n4"] = [e for e in audit["n4"] if e["kind"] != "applied"]
    audit["n4"].insert(0, {"kind": "snapshot-installed", "group": "part-0", "index": 45,
                           "node": "n4"})  # fmt: skip
    _collected(audit, dict.fromkeys(NEW, (57, "d57", 6.0)))
    result = _check(audit)
    assert result.valid is True, result.anomalies
    assert result.figures["replicas-unobserved"] == 0
    _collected(audit, {"n4": (57, "other", 6.0)})  # a later report at collection wins
    assert "replicas-diverge" in {a.kind for a in _check(audit).anomalies}


def test_a_heal_all_that_did_not_complete_ok_leaves_convergence_unknown() -> None:
    """A fault may have outlived the heal (a failpoint a busy node never confirmed
    off), so the quiet period was not seen: no verdict either way."""
    h = HistoryBuilder()
    h.op("nemesis", "slow", type_="info").op("nemesis", "heal-all", type_="info")
    h.add(0, "invoke", "read", dt=10 * S).add(0, "ok", "read", dt=0)
    events = [Event(**e) for e in h.events]
    ctx = CheckContext(events=events, operations=pair(events), audit=_audit(), options={})
    result = ConvergenceChecker().check(ctx)
    assert result.valid == "unknown"
    assert "heal-all did not complete ok" in str(result.error)


def test_a_restore_that_never_applied_is_named_where_a_rebalance_did_not_finish() -> None:
    """The verdict stands (nothing cleared pending), and the reader learns the
    harness's restore of the zone, which would have driven it, failed."""
    audit = _audit()
    _break("rebalance-not-finished", audit)
    failed = _check(audit, restores=("fail", "info"))
    assert failed.valid is False
    (message,) = [a.message for a in failed.anomalies if a.kind == "rebalance-not-finished"]
    assert "closing restore of the zone never applied: 2 tries, the last info" in message
    assert "connection refused" in message
    for restores in ((), ("fail", "ok")):
        quiet = _check(audit, restores=restores)
        (message,) = [a.message for a in quiet.anomalies if a.kind == "rebalance-not-finished"]
        assert "restore" not in message
