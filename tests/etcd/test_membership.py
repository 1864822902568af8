"""The etcd membership generator and the member-list phase transitions."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from harness.dbs.etcd_phase import observations, transitions
from workloads.etcd_membership import MIN_VOTERS, MembershipGen, moves
from workloads.generator import Completion, Context, Op

NODES = ["n1", "n2", "n3", "n4", "n5"]


def _ctx() -> Context:
    return Context(0, (0,), (0,))


@given(st.integers(0, 2**32), st.lists(st.booleans(), min_size=1, max_size=40))
def test_believed_membership_keeps_three_voters_and_one_learner_at_most(
    seed: int, outcomes: list[bool]
) -> None:
    """Acting on every ok move never drops below MIN_VOTERS nor adds a second learner."""
    gen = MembershipGen(random.Random(seed), NODES, NODES[:3])
    for ok in outcomes:
        op = gen.op(_ctx())
        assert isinstance(op, Op)
        gen.update(_ctx(), Completion(op=op, thread=0, type="ok" if ok else "fail"))
        assert len(gen.voters) >= MIN_VOTERS
        assert len(gen.learners) <= 1
        assert not set(gen.voters) & set(gen.learners)


def test_a_completion_that_read_the_members_is_believed_over_the_intent() -> None:
    """The member list read after an info move replaces the generator's guess."""
    gen = MembershipGen(random.Random(1), NODES, NODES[:3])
    op = Op(f="change-peers", group="etcd", value={"move": "add", "node": "n4"})
    read = {"move": "add", "node": "n4", "voters": ["n1", "n2"], "learners": ["n5"]}
    gen.update(_ctx(), Completion(op=op, thread=0, type="info", value=read))
    assert (gen.voters, gen.learners) == (["n1", "n2"], ["n5"])


def test_moves_offer_promote_only_with_a_learner_and_remove_only_above_the_minimum() -> None:
    """The move table follows etcd's one-learner rule and the voter floor."""
    assert moves(["n1", "n2", "n3"], [], ["n4", "n5"]) == ["add"]
    assert moves(["n1", "n2", "n3"], ["n4"], ["n5"]) == ["promote", "remove"]
    assert moves(["n1", "n2", "n3", "n4"], [], ["n5"]) == ["add", "remove", "replace"]


def test_member_list_differences_become_phases() -> None:
    """A new learner is catching-up; a promotion and a removal are stable."""
    before = {"n1": False, "n2": False, "n3": False}
    assert transitions(before, before | {"n4": True}) == [("n4", "learner-added", "catching-up")]
    assert transitions(before | {"n4": True}, before | {"n4": False}) == [
        ("n4", "promoted", "stable")
    ]
    assert transitions(before, {"n1": False, "n2": False}) == [("n3", "removed", "stable")]
    assert transitions(before, before) == []


def test_a_promotion_names_the_promoted_learner_as_joining() -> None:
    """A fault at etcd's `stable` aimed at the joining peer had none named (it
    fell to a random node, often a spare): the promoted learner, or a voter
    added at once, is the joining peer; a removal names none."""
    before = {"n1": False, "n2": False, "n3": False, "n4": True}
    promoted = observations(before, before | {"n4": False}, "n1")
    assert [(o["stage"], o["etcd_stage"], o["joining"]) for o in promoted] == [
        ("stable", "promoted", ["n4"])
    ]
    assert promoted[0]["peers"] == ["n1", "n2", "n3", "n4"]
    assert promoted[0]["old_peers"] == ["n1", "n2", "n3"]
    added = observations(before, before | {"n5": False}, "n1")
    assert [o["joining"] for o in added] == [["n5"]]
    removed = observations(before, {"n1": False, "n2": False, "n4": True}, "n1")
    assert [(o["etcd_stage"], o["joining"]) for o in removed] == [("removed", [])]
