"""Rebalance invariants over assignments-written and request audit events."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given

from checkers.assignments import check_assignments
from tests.checkers.strategies import REBALANCE_BUGS, RebalanceScript, rebalance_scripts

OLD, NEW, OTHER = ["n1", "n2", "n3"], ["n1", "n2", "n4"], ["n1", "n4", "n5"]


def _write(rev: int, wall: float, **keys: Any) -> dict[str, Any]:
    return {
        "kind": "assignments-written",
        "zone": 1,
        "partition": 0,
        "revision": rev,
        "wall": wall,
        "keys": {f"zone.1.assignments.{k}": v for k, v in keys.items()},
    }


def _commit(peers: list[str], wall: float) -> dict[str, Any]:
    return {
        "kind": "config-committed",
        "group": "part-0",
        "stage": "stable",
        "index": int(wall * 10),  # one log index per commit, as in a real log
        "peers": peers,
        "old_peers": None,
        "wall": wall,
    }


def _request(kind: str, req: int, last: int, **more: Any) -> dict[str, Any]:
    return {
        "kind": kind,
        "partition": 0,
        "request_revision": req,
        "last_seen_revision": last,
        "peers": NEW,
        **more,
    }


def _clean() -> dict[str, list[dict[str, Any]]]:
    """A rebalance OLD -> NEW with a planned OTHER queued behind it, done right."""
    return {
        "n1": [
            _write(1, 1.0, stable={"old": None, "new": OLD}),
            _write(2, 2.0, pending={"old": None, "new": NEW}, change={"old": None, "new": 10}),
            _request("rebalance-request", 2, 1, direction="applied"),
            _write(3, 3.0, planned={"old": None, "new": OTHER}, change={"old": 10, "new": 11}),
            _write(
                4,
                5.0,
                stable={"old": OLD, "new": NEW},
                pending={"old": NEW, "new": OTHER},
                planned={"old": OTHER, "new": None},
            ),
            _write(
                5,
                6.0,
                cancel={"old": None, "new": {"old": NEW, "new": OTHER, "pending_revision": 4}},
            ),
        ],
        "n2": [
            _commit(NEW, 4.0),
            _write(
                4,
                5.1,
                stable={"old": OLD, "new": NEW},
                pending={"old": NEW, "new": OTHER},
                planned={"old": OTHER, "new": None},
            ),
        ],
    }


def test_clean_rebalance_passes() -> None:
    """pending -> stable after the commit, planned behind pending, a matching cancel."""
    anomalies, figures = check_assignments(_clean())
    assert anomalies == []
    assert figures == {"partitions": 1, "writes": 5, "requests": 1,
                       "stable-switches-placed": 1, "containment-checks": 1,
                       "driver-actions": 0, "primary-actions": 0}  # fmt: skip


def _mutate(kind: str, audit: dict[str, list[dict[str, Any]]]) -> None:
    n1 = audit["n1"]
    if kind == "planned-without-pending":
        n1[1]["keys"]["zone.1.assignments.pending"]["new"] = None
    elif kind == "change-trigger-not-increasing":
        n1[3]["keys"]["zone.1.assignments.change"]["new"] = 9
    elif kind == "stable-before-commit":
        audit["n2"][0]["wall"] = 5.5
    elif kind == "cancel-wrong-pending":
        n1[5]["keys"]["zone.1.assignments.cancel"]["new"]["pending_revision"] = 2
    elif kind == "assignment-chain-broken":
        n1[4]["keys"]["zone.1.assignments.pending"]["old"] = OTHER
    elif kind == "assignment-revision-went-back":
        n1[3], n1[4] = n1[4], n1[3]
    elif kind == "assignment-write-conflict":
        audit["n2"][1]["keys"]["zone.1.assignments.stable"]["new"] = OTHER
    elif kind == "stale-request-applied":
        n1.append(_request("rebalance-request", 2, 4, direction="applied"))
    elif kind == "last-seen-went-back":
        n1.append(_request("rebalance-request", 4, 0, direction="ignored"))
    elif kind == "cancel-reverted-new-config":
        n1.append(
            _request("cancel-request", 5, 5, direction="received", outcome="cancelled", wall=7.0)
        )


@pytest.mark.parametrize(
    "kind",
    [
        "planned-without-pending",
        "change-trigger-not-increasing",
        "stable-before-commit",
        "cancel-wrong-pending",
        "assignment-chain-broken",
        "assignment-revision-went-back",
        "assignment-write-conflict",
        "stale-request-applied",
        "last-seen-went-back",
        "cancel-reverted-new-config",
    ],
)
def test_each_planted_rebalance_anomaly_is_flagged(kind: str) -> None:
    """Breaking one rule of the rebalance protocol is reported under its kind."""
    audit = _clean()
    _mutate(kind, audit)
    anomalies, _ = check_assignments(audit)
    assert kind in {a.kind for a in anomalies}, anomalies


def test_cancel_before_the_new_config_committed_is_fine() -> None:
    """Cancelling a change whose new configuration never committed reverts nothing."""
    audit = _clean()
    audit["n1"].append(_request("cancel-request", 5, 5, outcome="cancelled", wall=3.5, peers=OTHER))
    assert check_assignments(audit)[0] == []


CANCEL_NEW = {"old": OLD, "new": NEW, "pending_revision": 6}


def _round_trip_then_cancel() -> dict[str, list[dict[str, Any]]]:
    """OLD -> NEW done, NEW -> OLD done, then NEW pending again and cancelled while
    catching up: the group committed NEW only in the first, finished change."""
    return {
        "n1": [
            _write(1, 1.0, stable={"old": None, "new": OLD}),
            _write(2, 2.0, pending={"old": None, "new": NEW}),
            _commit(NEW, 3.0),
            _write(3, 4.0, stable={"old": OLD, "new": NEW}, pending={"old": NEW, "new": None}),
            _write(4, 5.0, pending={"old": None, "new": OLD}),
            _commit(OLD, 6.0),
            _write(5, 7.0, stable={"old": NEW, "new": OLD}, pending={"old": OLD, "new": None}),
            _write(6, 8.0, pending={"old": None, "new": NEW}),
            _write(7, 9.0, cancel={"old": None, "new": CANCEL_NEW}),
        ],
    }


@pytest.mark.parametrize("named", [True, False])
def test_a_cancel_is_not_blamed_for_an_earlier_commit_of_its_new_peers(named: bool) -> None:
    """Regression: cancel-reverted-new-config counted NEW's commit from the first,
    finished change; only commits after the cancelled pending's write count
    (found by the event's pending_revision, or else by peers and time)."""
    audit = _round_trip_then_cancel()
    more = {"pending_revision": 6} if named else {}
    cancelled = _request("cancel-request", 7, 7, direction="applied", outcome="cancelled",
                         wall=10.0, **more)  # fmt: skip
    audit["n1"].append(cancelled)
    assert check_assignments(audit)[0] == []
    # The same cancel after NEW really committed for this pending is still caught.
    audit["n1"].insert(-1, _commit(NEW, 9.5))
    kinds = {a.kind for a in check_assignments(audit)[0]}
    assert "cancel-reverted-new-config" in kinds


@given(rebalance_scripts())
def test_rebalances_following_the_design_pass(events: list[dict[str, Any]]) -> None:
    """Any interleaving of triggers, promotions and cancels done right is clean."""
    anomalies, figures = check_assignments({"n1": events})
    assert anomalies == []
    assert figures["writes"] >= 1


def _premature_stable(events: list[dict[str, Any]]) -> str:
    """What the checker can see of a planted premature stable write (the one its
    group's commit of the same peers directly follows): `stable-before-commit`
    for a configuration new to the group, `stable-went-back` for one it
    committed before but not last (A-B-A), or "" when stable already held those
    peers (a pending equal to stable, after a cancel: nothing moved)."""
    committed: list[list[str]] = []
    for ev, nxt in zip(events, [*events[1:], None], strict=True):
        if ev["kind"] == "config-committed":
            committed.append(sorted(ev["peers"]))
            continue
        stable = ev["keys"].get("stable")
        late = nxt is not None and nxt["kind"] == "config-committed"
        if stable is None or not late or sorted(nxt["peers"]) != stable["new"]:
            continue
        if stable["new"] == stable["old"]:
            return ""
        if stable["new"] in committed[:-1] and stable["new"] != committed[-1]:
            return "stable-went-back"
        return "stable-before-commit"
    raise AssertionError("no premature stable write in the script")


@pytest.mark.parametrize("bug", REBALANCE_BUGS)
def test_each_planted_rebalance_bug_is_flagged_anywhere(bug: str) -> None:
    """A planted rebalance bug is found wherever in the sequence it lands, by its own
    kind; a premature stable write is found as what it shows (`_premature_stable`)."""

    @given(rebalance_scripts(bug))
    def run(events: list[dict[str, Any]]) -> None:
        kinds = {a.kind for a in check_assignments({"n1": events})[0]}
        if bug == "stable-before-commit":
            shown = _premature_stable(events)
            assert (shown in kinds) if shown else not kinds, (shown, kinds)
        else:
            assert bug in kinds, kinds

    run()


def test_a_premature_stable_back_to_an_older_config_is_stable_going_back() -> None:
    """Found by the randomized profile: n4 in, n3 back, then stable names n4's
    configuration again before its new commit. The write names a configuration
    the group committed before, not its latest: flagged as going back."""
    script = RebalanceScript(("n1", "n2", "n3"))
    script.retarget(["n1", "n2", "n4"], None)
    script.finish(None)
    script.retarget(["n1", "n2", "n3"], None)
    script.retarget(["n1", "n2", "n4"], None)  # planned behind the pending
    script.finish(None)
    script.finish("stable-before-commit")
    assert _premature_stable(script.events) == "stable-went-back"
    kinds = {a.kind for a in check_assignments({"n1": script.events})[0]}
    assert kinds == {"stable-went-back"}


def _late_report_audit(extra_commit_index: int | None) -> dict[str, list[dict[str, Any]]]:
    """Soak seed 106, trimmed: part-0 committed stable n1..n5 at index 851 long
    ago; much later a pending of n1..n5 (revision 1720) is cancelled while n4,
    a replica restarted by step 5, catches up and reports index 851 again."""
    five = ["n1", "n2", "n3", "n4", "n5"]
    commit = {"kind": "config-committed", "group": "part-0", "stage": "stable",
              "peers": five, "old_peers": None, "index": 851}  # fmt: skip
    pending = {
        "kind": "assignments-written",
        "zone": "default",
        "partition": 0,
        "revision": 1720,
        "wall": 5.689,
        "group": "part-0",
        "keys": {"zone.default.p0.assignments.pending": {"old": None, "new": five}},
    }
    cancel = {"kind": "cancel-request", "direction": "applied", "outcome": "cancelled",
              "zone": "default", "partition": 0, "request_revision": 1723,
              "last_seen_revision": 1723, "peers": five, "pending_revision": 1720,
              "group": "part-0", "wall": 6.004}  # fmt: skip
    n1 = [{**commit, "wall": 1.0}, pending, cancel]
    n4 = [{**commit, "wall": 5.864}]
    if extra_commit_index is not None:
        n4.append({**commit, "index": extra_commit_index, "wall": 5.9})
    return {"n1": n1, "n4": n4}


def test_a_late_report_of_an_old_commit_does_not_blame_a_cancel() -> None:
    anomalies, _ = check_assignments(_late_report_audit(None))
    assert anomalies == []


def test_a_new_commit_of_the_cancelled_peers_after_the_pending_is_still_caught() -> None:
    anomalies, _ = check_assignments(_late_report_audit(930))
    assert "cancel-reverted-new-config" in {a.kind for a in anomalies}


@pytest.mark.parametrize("restarted", [True, False])
def test_a_restarted_node_may_report_old_revisions_again(restarted: bool) -> None:
    """Seen under --backend sim (seed 3): a killed node comes back, replays its
    metastore log and reports revision 2 after it had reported 65. Within one
    process the revisions must still never go back."""
    first = {**_write(2, 1.0, stable=OLD), "node": "n3"}
    later = {**_write(65, 7.3, pending=NEW), "node": "n3"}
    again = {**_write(2, 10.8, stable=OLD), "node": "n3"}
    started = {"kind": "started", "node": "n3", "wall": 10.8}
    events = [first, later, *([started] if restarted else []), again]
    anomalies, _ = check_assignments({"n3": events})
    went_back = [a for a in anomalies if a.kind == "assignment-revision-went-back"]
    assert bool(went_back) is not restarted


@pytest.mark.parametrize("received_at", [67, 90])
def test_a_rebalance_that_could_not_be_cancelled_finishes_below_the_cancels_revision(
    received_at: int,
) -> None:
    """Seed 75 of the simulator's sweep: n3 took request 83 in at last seen 67; a
    cancel at 84 answered cannot-cancel (new already committed), so the job
    finished and reported applied with last seen 84. Taken in at 90 it is stale."""
    n3 = [
        _request("rebalance-request", 83, received_at, direction="received"),
        _request("cancel-request", 84, 83, direction="received"),
        _request("cancel-request", 84, 84, direction="applied", outcome="cannot-cancel"),
        _request("rebalance-request", 83, 84, direction="applied"),
    ]
    anomalies, _ = check_assignments({"n3": n3})
    stale = [a for a in anomalies if a.kind == "stale-request-applied"]
    assert bool(stale) is (received_at > 83)
