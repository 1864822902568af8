"""The Raft audit-event checker on clean and planted-anomaly streams."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given

from checkers.api import CheckContext
from checkers.raft import RaftChecker, transition_error
from tests.checkers.strategies import RAFT_BUGS, RaftScript, raft_scripts


def _check(audit: dict[str, list[dict[str, Any]]]) -> Any:
    return RaftChecker().check(CheckContext(audit=audit))


@given(raft_scripts())
def test_clean_streams_pass(audit: dict[str, list[dict[str, Any]]]) -> None:
    """Elections and change-peers done right produce no anomaly."""
    result = _check(audit)
    assert result.valid is True, result.anomalies
    assert result.figures["checks"]["leader-voter"] > 0


def _planted(bug: str) -> Any:
    @given(raft_scripts(bug))
    def run(audit: dict[str, list[dict[str, Any]]]) -> None:
        result = _check(audit)
        assert result.valid is False
        assert bug in {a.kind for a in result.anomalies}, result.anomalies

    return run


@pytest.mark.parametrize("bug", RAFT_BUGS)
def test_each_planted_anomaly_is_flagged(bug: str) -> None:
    """Every planted audit anomaly is reported under its own kind."""
    _planted(bug)()


def test_no_audit_events_is_unknown() -> None:
    """Without audit logs the checker cannot decide."""
    assert RaftChecker().check(CheckContext()).valid == "unknown"


def test_catchup_outside_margin_is_flagged() -> None:
    """A peer reported caught up further behind than the margin is an anomaly."""
    script = RaftScript()
    script.elect("n1")
    script.emit("n1", "catchup-start", peer="n4", margin=10, leader_last=50, match=0)
    script.emit("n1", "catchup-done", peer="n4", leader_last=50, match=5)
    kinds = {a.kind for a in _check(script.events).anomalies}
    assert "catchup-outside-margin" in kinds


def test_conflicting_commits_at_one_index_are_flagged() -> None:
    """Two nodes committing different configurations at one index break Raft safety."""
    script = RaftScript()
    script.events["n1"].append(
        {"kind": "config-committed", "node": "n1", "group": "part-1", "index": 1,
         "stage": "stable", "peers": ["n4", "n5"], "old_peers": None}
    )  # fmt: skip
    kinds = {a.kind for a in _check(script.events).anomalies}
    assert "conflicting-committed-config" in kinds


@pytest.mark.parametrize(
    ("prev", "new", "expected"),
    [
        ((("a", "b"), None), (("a", "b"), None), None),
        ((("a", "b"), None), (("c",), ("a", "b")), None),
        ((("c",), ("a", "b")), (("c",), None), None),
        ((("a", "b"), None), (("c",), None), "joint-skipped"),
        ((("c",), ("a", "b")), (("a", "b"), None), "bad-config-transition"),
        ((("a", "b"), None), (("c",), ("a",)), "bad-config-transition"),
    ],
)
def test_transition_table(prev: Any, new: Any, expected: str | None) -> None:
    """Only stable(old) -> joint(new, old) -> stable(new) and repeats are legal."""
    assert transition_error(prev, new) == expected


def test_restored_configuration_must_be_the_committed_one() -> None:
    """A configuration restored from a snapshot older than the committed one is flagged."""
    script = RaftScript()
    script.elect("n1")
    script.change(("n1", "n2", "n4"))
    script._config("n3", "config-applied", 40, ("n1", "n2", "n3"), None)  # no entry at 40
    kinds = {a.kind for a in _check(script.events).anomalies}
    assert kinds == {"restored-config-stale"}


def test_restarted_leader_is_not_judged_as_leader() -> None:
    """A node naming another leader (after a silent restart) appends as a follower."""
    script = RaftScript()
    script.elect("n1")
    script.emit("n1", "leader", leader="n2")  # n1 restarted; n2 won meanwhile
    script.leader = None
    script.elect("n2")
    script.change(("n1", "n2", "n4"))
    result = _check(script.events)
    assert result.valid is True, result.anomalies


def test_configuration_from_an_older_request_is_flagged() -> None:
    """A committed configuration whose token is older than its predecessor's is stale."""
    script = RaftScript()
    script.elect("n1")
    script.change(("n1", "n2", "n4"))
    for ev in script.events["n1"]:
        if ev["kind"] == "config-committed" and ev["index"] == 3:
            ev["token"] = 1  # the joint before it carries token 2
    kinds = {a.kind for a in _check(script.events).anomalies}
    assert kinds == {"stale-token-committed"}


# A full-mix run (ember register/change-peers/rebalance, kill nemesis) had
# these events, trimmed to one group's config entries: n5 stored the stable
# entry at 251, was killed -9 before its round's events were written, and
# reported it only after restarting, from its durable log.
_KILLED_FOLLOWER = """
{"kind":"config-appended","node":"n1","group":"part-0","term":20,"index":248,"old_peers":["n1","n2","n4","n5"],"peers":["n1","n5"],"token":470}
{"kind":"config-applied","node":"n1","group":"part-0","term":20,"index":248,"old_peers":["n1","n2","n4","n5"],"peers":["n1","n5"],"token":470}
{"kind":"config-committed","node":"n1","group":"part-0","term":20,"index":248,"old_peers":["n1","n2","n4","n5"],"peers":["n1","n5"],"token":470}
{"kind":"config-appended","node":"n1","group":"part-0","term":20,"index":251,"old_peers":null,"peers":["n1","n5"],"token":470}
{"kind":"config-applied","node":"n1","group":"part-0","term":20,"index":251,"old_peers":null,"peers":["n1","n5"],"token":470}
{"kind":"config-committed","node":"n1","group":"part-0","term":29,"index":251,"old_peers":null,"peers":["n1","n5"],"token":470}
{"kind":"config-appended","node":"n5","group":"part-0","term":11,"index":248,"old_peers":["n1","n2","n4","n5"],"peers":["n1","n5"],"token":470}
{"kind":"config-applied","node":"n5","group":"part-0","term":11,"index":248,"old_peers":["n1","n2","n4","n5"],"peers":["n1","n5"],"token":470}
{"kind":"started","node":"n5"}
{"kind":"config-applied","node":"n5","group":"part-0","term":20,"index":251,"old_peers":null,"peers":["n1","n5"],"token":470}
{"kind":"config-committed","node":"n5","group":"part-0","term":30,"index":251,"old_peers":null,"peers":["n1","n5"],"token":470}
"""

# The same run: leader n1 appended the joint entry at 229 (its appends went
# out before its fsync, so n5 stored it), then was killed -9 before writing
# that round's events.
_KILLED_LEADER = """
{"kind":"config-appended","node":"n2","group":"part-1","term":33,"index":229,"old_peers":["n1","n5"],"peers":["n2","n3","n4"],"token":560}
{"kind":"config-appended","node":"n3","group":"part-1","term":33,"index":229,"old_peers":["n1","n5"],"peers":["n2","n3","n4"],"token":560}
{"kind":"config-appended","node":"n4","group":"part-1","term":33,"index":229,"old_peers":["n1","n5"],"peers":["n2","n3","n4"],"token":560}
{"kind":"config-appended","node":"n5","group":"part-1","term":33,"index":229,"old_peers":["n1","n5"],"peers":["n2","n3","n4"],"token":560}
{"kind":"config-committed","node":"n5","group":"part-1","term":37,"index":229,"old_peers":["n1","n5"],"peers":["n2","n3","n4"],"token":560}
{"kind":"started","node":"n1"}
{"kind":"config-applied","node":"n1","group":"part-1","term":33,"index":229,"old_peers":["n1","n5"],"peers":["n2","n3","n4"],"token":560}
{"kind":"config-committed","node":"n1","group":"part-1","term":37,"index":229,"old_peers":["n1","n5"],"peers":["n2","n3","n4"],"token":560}
"""  # fmt: skip


def _audit(lines: str, drop: Callable[[dict[str, Any]], bool]) -> dict[str, list[dict[str, Any]]]:
    audit: dict[str, list[dict[str, Any]]] = {}
    for line in lines.strip().splitlines():
        ev = json.loads(line)
        if not drop(ev):
            audit.setdefault(ev["node"], []).append(ev)
    return audit


@pytest.mark.parametrize(
    ("lines", "node", "index"), [(_KILLED_FOLLOWER, "n5", 251), (_KILLED_LEADER, "n1", 229)]
)
@pytest.mark.parametrize(
    ("lost", "flagged"),
    [
        ((), False),
        (("config-committed",), False),  # its restart's config-applied alone shows it
        (("config-applied",), False),  # its config-committed alone shows it
        (("config-applied", "config-committed"), True),  # no trace of it: no quorum
    ],
)
def test_entry_stored_before_a_kill_counts_for_the_commit_quorum(
    lines: str, node: str, index: int, lost: tuple[str, ...], flagged: bool
) -> None:
    """A node whose config-appended a kill -9 lost still stored the entry if
    it later reports that configuration at that index as applied or committed."""

    def drop(ev: dict[str, Any]) -> bool:
        return ev["node"] == node and ev.get("index") == index and ev["kind"] in lost

    result = _check(_audit(lines, drop))
    assert result.figures["checks"]["commit-quorum"] >= 1
    kinds = [a.kind for a in result.anomalies]
    assert kinds == (["commit-without-quorum"] if flagged else []), result.anomalies


def test_leader_removed_by_an_uncommitted_config_may_still_be_elected() -> None:
    """A voter of the previous configuration may lead while its removal is uncommitted."""
    script = RaftScript(peers=("n1", "n2", "n3"))
    script.elect("n1")
    for n in ("n1", "n2", "n3"):  # n3's removal, appended but not committed
        script.emit(n, "config-applied", index=9, peers=["n1", "n2"], old_peers=None)
    script.leader = None
    script.elect("n3")
    result = RaftChecker().check(CheckContext(audit=script.events))
    assert "leader-not-voter" not in {a.kind for a in result.anomalies}, result.anomalies
    for n in ("n1", "n2", "n3"):  # once committed, n3 may no longer lead
        script.emit(n, "config-committed", index=9, peers=["n1", "n2"], old_peers=None)
    script.elect("n3")
    result = RaftChecker().check(CheckContext(audit=script.events))
    assert "leader-not-voter" in {a.kind for a in result.anomalies}


def test_config_committed_without_a_majority_storing_it_is_flagged() -> None:
    """A joint entry stored by the new majority only cannot have been committed."""
    script = RaftScript(peers=("n1", "n2", "n3"))
    script.elect("n1")
    joint = {"index": 5, "peers": ["n1", "n4", "n5"], "old_peers": ["n1", "n2", "n3"]}
    for n in ("n1", "n4", "n5"):
        script.emit(n, "config-appended", **joint)
    script.emit("n1", "config-committed", **joint)
    kinds = {a.kind for a in RaftChecker().check(CheckContext(audit=script.events)).anomalies}
    assert "commit-without-quorum" in kinds
    script.emit("n2", "config-appended", **joint)  # now a majority of the old set too
    kinds = {a.kind for a in RaftChecker().check(CheckContext(audit=script.events)).anomalies}
    assert "commit-without-quorum" not in kinds


def test_bootstrap_configuration_needs_no_stored_entry() -> None:
    """A configuration committed without any entry (bootstrap) is not judged for a quorum."""
    boot = {"index": 1, "peers": ["n1", "n2", "n3"], "old_peers": None, "group": "g"}
    audit = {
        n: [{"kind": "config-committed", "node": n, "term": 1, "mono_ns": 1, **boot}]
        for n in ("n1", "n2", "n3")
    }
    result = RaftChecker().check(CheckContext(audit=audit))
    assert result.valid is True, result.anomalies
    assert result.figures["checks"]["commit-quorum"] == 0


def _late_storers(backend: str) -> Any:
    """n1 commits joint([n1, n4, n5] <- [n1, n2, n3]) at t=5 with n4 and n5 only;
    the old voters n2 and n3 store it at t=6, after the commit."""
    new, old = ["n1", "n4", "n5"], ["n1", "n2", "n3"]
    audit: dict[str, list[dict[str, Any]]] = {}

    def config(node: str, kind: str, wall: float) -> None:
        audit.setdefault(node, []).append(
            {"kind": kind, "node": node, "group": "part-1", "index": 2, "stage": "joint",
             "peers": new, "old_peers": old, "learners": [], "token": 2, "wall": wall}
        )  # fmt: skip

    for node, wall in (("n1", 1.0), ("n4", 2.0), ("n5", 2.0), ("n2", 6.0), ("n3", 6.0)):
        config(node, "config-appended", wall)
    config("n1", "config-committed", 5.0)
    plan = {"backend": backend}
    return RaftChecker().check(CheckContext(audit=audit, plan=plan))


def test_a_joint_entry_committed_before_the_old_voters_stored_it_is_flagged() -> None:
    """Where nodes share a clock, storing it after the commit does not count (R5)."""
    result = _late_storers("sim")
    assert [a.kind for a in result.anomalies] == ["commit-without-quorum"]
    assert "by its first commit" in result.anomalies[0].message


def test_on_separate_hosts_any_store_counts() -> None:
    """SSH hosts' wall clocks may disagree: there every store counts, late or not."""
    assert _late_storers("ssh").valid is True
