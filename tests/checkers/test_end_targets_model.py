"""Convergence's legal end states, against ember's own rebalance invokes.

`checkers.convergence.end_targets` infers, from the assignment writes alone,
which peer sets a partition's stable may end at. It was wrong three times,
each found by a run flagged `stable-not-target` that had ended correctly
(docker mix runs and sim seed 67). Here hypothesis plays random interleavings
of the design's invokes (trigger, done, cancel, and a cancel's resolution to
either side) on a real `MetaState`, drives the partition to rest as a healed
cluster would, turns the metastore's events into the audit events ember emits,
and asks end_targets: the stable reached must be legal, and without any
cancel it must be the only legal end (the newest trigger's target, L1).
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from checkers.convergence import end_targets
from ember.metastore.state import MetaState
from ember.rebalance.invokes import cancel_invoke, done_invoke, trigger_invoke
from ember.rebalance.keys import assignment_writes, assignments_prefix, key

ZONE, PART = "default", 0
PEERS = [["n1", "n2", "n3"], ["n1", "n2", "n4"], ["n3", "n4"], ["n1"]]


class _Partition:
    def __init__(self, initial: list[str]) -> None:
        self.meta = MetaState()
        self.meta.put(key(ZONE, PART, "stable"), initial)
        self.ts = self.meta.revision
        self.cancelled = False

    def value(self, kind: str) -> Any:
        rec = self.meta.kv.get(key(ZONE, PART, kind))
        return None if rec is None else rec.value

    def _done(self, peers: list[str], pending_revision: int) -> None:
        """What the primary (or the driver, for cannot-cancel) writes once the
        group committed `peers`: guarded on the pending it served, as in ember."""
        snap = self.meta.range(prefix=assignments_prefix(ZONE, PART))
        kvs = {kv["key"]: kv for kv in snap["kvs"]}
        self.meta.invoke(done_invoke(kvs, ZONE, PART, peers, pending_revision))

    def step(self, action: tuple[Any, ...]) -> None:
        pending = self.meta.kv.get(key(ZONE, PART, "pending"))
        cancel = self.value("cancel")
        if action[0] == "trigger":
            _, asked, repeat = action
            new = (self.value(asked) or ["n5"]) if isinstance(asked, str) else asked
            self.ts = self.ts if repeat else self.meta.revision + 1
            self.meta.invoke(trigger_invoke(ZONE, PART, new, self.ts))
        elif action[0] == "done" and pending is not None:
            # A group that committed pending before a cancel reached it finishes
            # normally; the done clears the cancel with pending.
            self._done(pending.value, pending.mod_revision)
        elif action[0] == "cancel" and pending is not None and cancel is None:
            old = self.value("stable") or []
            self.meta.invoke(cancel_invoke(ZONE, PART, old, pending.value, pending.mod_revision))
            self.cancelled = True
        elif action[0] == "resolve" and isinstance(cancel, dict):
            side = cancel["old"] if action[1] else cancel["new"]
            self._done(side, cancel["pending_revision"])

    def settle(self, revert: bool) -> None:
        """A healed cluster's rebalance runs to rest: cancels resolve, pendings finish."""
        for _ in range(20):
            if isinstance(self.value("cancel"), dict):
                self.step(("resolve", revert))
            elif self.value("pending") is not None:
                self.step(("done",))
            else:
                return
        raise AssertionError("the partition never came to rest")


def _enabled(part: _Partition) -> list[str]:
    """The steps that do something now; drawing only these keeps the
    interleavings that matter (triggers under an outstanding cancel) common."""
    pending, cancel = part.value("pending"), part.value("cancel")
    if pending is None:
        return ["trigger"]
    if cancel is None:
        return ["trigger", "trigger", "cancel", "cancel", "done"]
    return ["trigger", "trigger", "trigger", "trigger", "resolve", "done"]


def _action(data: st.DataObject, part: _Partition) -> tuple[Any, ...]:
    kind = data.draw(st.sampled_from(_enabled(part)))
    if kind == "trigger":
        # A peer set, or what a key holds now: the cases the inference got
        # wrong were triggers asking again for pending's target.
        asked = data.draw(st.sampled_from([*PEERS, "pending", "pending", "planned", "stable"]))
        stale = data.draw(st.sampled_from([False, False, False, True]))  # the last ts again
        return (kind, asked, stale)
    if kind == "resolve":
        return (kind, data.draw(st.booleans()))  # True: reverted to old; else cannot-cancel
    return (kind,)


@given(st.sampled_from(PEERS), st.integers(1, 30), st.booleans(), st.data())
def test_every_reachable_end_is_a_legal_end(
    initial: list[str], count: int, revert: bool, data: st.DataObject
) -> None:
    part = _Partition(initial)
    for _ in range(count):
        part.step(_action(data, part))
    part.settle(revert)
    assert part.value("planned") is None
    assert part.value("cancel") is None
    audit = {"n1": assignment_writes(part.meta.events)}
    legal = end_targets(audit)[(ZONE, PART)]
    final = tuple(part.value("stable"))
    assert final in legal, (final, legal)
    if not part.cancelled:
        assert legal == {final}


def test_a_stable_the_design_never_asked_for_is_flagged() -> None:
    """The same replay refuses an end no trigger or cancel named."""
    part = _Partition(["n1", "n2", "n3"])
    part.step(("trigger", ["n1", "n2", "n4"], False))
    part.settle(revert=False)
    part.meta.put(key(ZONE, PART, "stable"), ["n5"])  # written by no rebalance
    legal = end_targets({"n1": assignment_writes(part.meta.events)})[(ZONE, PART)]
    assert ("n5",) not in legal
    assert legal == {("n1", "n2", "n4")}
