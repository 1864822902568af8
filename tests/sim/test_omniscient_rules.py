"""Each omniscient property can fail alone: a few Readies that break exactly one.

The simulator-only rule (R3 log matching) and the simulator's side of R5, R7
and R8 are broken here on the checker itself, fed synthetic Readies the way
the node loop feeds it; every property reported must be the one broken, and
every property belongs to one catalog rule (checkers/catalog.py).
"""

from __future__ import annotations

import pytest

from checkers.catalog import rule_of
from ember.raft import ConfState, Entry, HardState, PersistedState, Ready, Snapshot, SnapshotMeta
from ember.raft import Status as RaftStatus
from ember.raft.facade import Role
from ember.raft.messages import RequestVoteResp
from ember.sim.omniscient import SAFETY_PROPERTIES, Omniscient

CONF = ConfState(peers=("n1", "n2", "n3"))
JOINT = ConfState(peers=("n1", "n2", "n4"), old_peers=("n1", "n2", "n3"))
NEW = ConfState(peers=("n1", "n2", "n4"))


def _status(node: str, role: Role, term: int, conf: ConfState = CONF, *, commit: int = 0,
            stage: str = "none") -> RaftStatus:  # fmt: skip
    return RaftStatus(id=node, group="g", role=role, term=term, leader=None, commit=commit,
                      applied=0, last_index=0, conf=conf, stage=stage, token=0,
                      progress={})  # fmt: skip


def _ready(entries: list[Entry], hs: HardState | None = None,
           messages: list[RequestVoteResp] | None = None) -> Ready:  # fmt: skip
    return Ready(messages=list(messages or []), entries=entries, hard_state=hs, snapshot=None,
                 committed_entries=[], events=[], change_results=[])  # fmt: skip


def _checker(margin: int = 1000) -> Omniscient:
    checker = Omniscient(lambda: 1.0, catchup_margin=margin)
    snap = Snapshot(meta=SnapshotMeta(index=0, term=0, conf=CONF))
    boot = PersistedState(hard_state=HardState(), entries=[], snapshot=snap)
    for node in (*CONF.peers, "n4"):
        checker.on_start(node, "g", boot)
    return checker


def _elect_n1(checker: Omniscient, term: int = 2) -> None:
    """n1 wins `term` with n2's vote, as a real election records it."""
    checker.on_write("n1", "g", _ready([], HardState(term=term, vote="n1")),
                     _status("n1", "candidate", term))  # fmt: skip
    grant = RequestVoteResp(group="g", src="n2", dst="n1", term=term, granted=True)
    checker.on_write("n2", "g", _ready([], HardState(term=term, vote="n1"), [grant]),
                     _status("n2", "follower", term))  # fmt: skip
    checker.on_status("n1", "g", _status("n1", "leader", term))


def _config(index: int, conf: ConfState, term: int = 2) -> Entry:
    return Entry(index=index, term=term, kind="config", conf=conf)


def _props(checker: Omniscient) -> list[str]:
    assert not checker.errors, checker.errors
    return sorted({v.prop for v in checker.violations})


def test_two_entries_at_one_index_and_term_break_log_matching_alone() -> None:
    """R3: one (index, term), two different entries."""
    checker = _checker()
    checker.on_write("n1", "g", _ready([Entry(index=1, term=1, data=b"a")]),
                     _status("n1", "follower", 1))  # fmt: skip
    checker.on_write("n2", "g", _ready([Entry(index=1, term=1, data=b"b")]),
                     _status("n2", "follower", 1))  # fmt: skip
    assert _props(checker) == ["log-matching"]


def test_a_configuration_not_in_the_log_breaks_config_in_force_alone() -> None:
    """R7: a node that appended a joint entry but still runs the old configuration."""
    checker = _checker()
    checker.on_write("n2", "g", _ready([_config(1, JOINT, term=1)]), _status("n2", "follower", 1))
    assert _props(checker) == ["config-in-force"]


def test_a_change_before_an_own_term_commit_breaks_that_rule_alone() -> None:
    """R7: a new leader starts catching up before anything of its term committed."""
    checker = _checker()
    _elect_n1(checker)
    checker.on_write("n1", "g", _ready([Entry(index=1, term=2, kind="noop")]),
                     _status("n1", "leader", 2))  # fmt: skip
    checker.on_write("n1", "g", _ready([]), _status("n1", "leader", 2, stage="catching-up"))
    assert _props(checker) == ["change-before-term-commit"]


def test_a_second_configuration_above_the_commit_breaks_that_rule_alone() -> None:
    """R7: stable(new) appended while joint(new, old) is not committed."""
    checker = _checker()
    _elect_n1(checker)
    checker.on_write("n1", "g", _ready([_config(1, JOINT)]), _status("n1", "leader", 2, JOINT))
    checker.on_write("n1", "g", _ready([_config(2, NEW)]), _status("n1", "leader", 2, NEW))
    assert _props(checker) == ["one-uncommitted-config"]


def test_a_commit_only_the_leader_holds_breaks_quorum_commit_alone() -> None:
    """R5: the leader's commit point durable on itself only."""
    checker = _checker()
    _elect_n1(checker)
    rd = _ready([Entry(index=1, term=2, kind="noop")], HardState(term=2, vote="n1", commit=1))
    checker.on_write("n1", "g", rd, _status("n1", "leader", 2, commit=1))
    checker.on_durable("n1", "g", rd)
    assert _props(checker) == ["quorum-commit"]


def test_a_joint_entry_before_the_new_peer_caught_up_breaks_catchup_margin_alone() -> None:
    """R8: ten entries ahead of an empty new peer, with a margin of three."""
    checker = _checker(margin=3)
    _elect_n1(checker)
    entries = [Entry(index=i, term=2, data=b"x") for i in range(1, 11)]
    checker.on_write("n1", "g", _ready(entries), _status("n1", "leader", 2))
    checker.on_write("n1", "g", _ready([_config(11, JOINT)]), _status("n1", "leader", 2, JOINT))
    assert _props(checker) == ["catchup-margin"]


def test_the_same_steps_done_right_break_nothing() -> None:
    """The scaffolding above is clean: elected, noop committed by a quorum, then a change."""
    checker = _checker(margin=3)
    _elect_n1(checker)
    noop = [Entry(index=1, term=2, kind="noop")]
    checker.on_write("n1", "g", _ready(noop), _status("n1", "leader", 2))
    checker.on_durable("n1", "g", _ready(noop))
    follower = _ready(noop, HardState(term=2, vote="n1"))
    checker.on_write("n2", "g", follower, _status("n2", "follower", 2))
    checker.on_durable("n2", "g", follower)
    rd = _ready([], HardState(term=2, vote="n1", commit=1))
    checker.on_write("n1", "g", rd, _status("n1", "leader", 2, commit=1))
    checker.on_durable("n1", "g", rd)
    checker.on_write("n1", "g", _ready([]), _status("n1", "leader", 2, commit=1,
                                                     stage="catching-up"))  # fmt: skip
    assert _props(checker) == []
    assert checker.checks["change-before-term-commit"] == 1
    assert checker.checks["quorum-commit"] == 1


@pytest.mark.parametrize("prop", SAFETY_PROPERTIES)
def test_every_property_reports_one_catalog_rule(prop: str) -> None:
    """What the sim checker reports maps back to the catalog."""
    assert rule_of("sim", prop) is not None
