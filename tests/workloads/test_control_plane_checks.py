"""What the checkers make of the control-plane workloads' op shapes.

(Kept next to the workloads that produce these shapes: snapshot reads,
deletes, mixed register + metastore traffic, cancel outcomes.)
"""

from __future__ import annotations

from typing import Any

from checkers.api import CheckContext
from checkers.compose import METASTORE_PREFIX, SplitLinear
from checkers.convergence import end_targets
from checkers.history import Event, pair, validate
from checkers.revisions import RevisionChecker
from tests.checkers.helpers import HistoryBuilder
from workloads.metastore import PREFIX
from workloads.revisions import METASTORE_PREFIX as DECLARED_PREFIX
from workloads.revisions import declaration


def _ctx(b: HistoryBuilder) -> CheckContext:
    events = [Event(**e) for e in b.events]
    validate(events)
    plan = {"revisions": declaration(["register", "metastore"])}
    return CheckContext(plan=plan, events=events, operations=pair(events))


def test_the_split_uses_the_workload_prefix() -> None:
    """compose, and the workload's revision declaration, recognise its keys."""
    assert METASTORE_PREFIX == PREFIX == DECLARED_PREFIX


def test_a_snapshot_read_missing_an_acknowledged_put_is_flagged() -> None:
    """A read at revision 12 that shows m/0 at mod 5 misses the put at 10."""
    b = HistoryBuilder()
    b.op(0, "put", key="m/0", value=1, result=5)
    b.op(0, "put", key="m/0", value=2, result=10)
    kvs = [{"key": "m/0", "value": 1, "mod_revision": 5}]
    b.op(1, "range", key="m/", value={"revision": 12}, result={"at": 12, "kvs": kvs})
    r = RevisionChecker().check(_ctx(b))
    assert r.valid is False
    assert [a.kind for a in r.anomalies] == ["snapshot-missed-write"]


def test_a_snapshot_read_of_the_past_is_not_a_stale_read() -> None:
    """Reading at 5 after a put at 10 completed is fine (it reads the past on purpose)."""
    b = HistoryBuilder()
    b.op(0, "put", key="m/0", value=1, result=5)
    b.op(0, "put", key="m/0", value=2, result=10)
    kvs = [{"key": "m/0", "value": 1, "mod_revision": 5}]
    b.op(1, "range", key="m/", value={"revision": 5}, result={"at": 5, "kvs": kvs})
    assert RevisionChecker().check(_ctx(b)).valid is True
    wrong = HistoryBuilder()
    wrong.op(0, "put", key="m/0", value=1, result=5)
    bad = [{"key": "m/0", "value": 3, "mod_revision": 5}]
    wrong.op(1, "range", key="m/", value={"revision": 5}, result={"at": 5, "kvs": bad})
    r = RevisionChecker().check(_ctx(wrong))
    assert [a.kind for a in r.anomalies] == ["snapshot-wrong-value"]


def test_a_delete_of_an_absent_key_is_not_a_write() -> None:
    """An invoke deleting an absent key keeps the revision: no duplicate-write anomaly,
    and a watch need not deliver it."""
    b = HistoryBuilder()
    b.op(0, "put", key="m/0", value=1, result=5)
    spec = {"if": [], "then": [{"op": "delete", "key": "m/1"}], "else": []}
    b.op(0, "invoke", key="m/1", value=spec, result={"succeeded": True, "revision": 5})
    b.op(0, "delete", key="m/2", result=5)
    events = [{"key": "m/0", "revision": 5}]
    b.op(1, "watch", value={"prefix": "m/", "from": 1}, result=events)
    assert RevisionChecker().check(_ctx(b)).valid is True


def _mixed(meta_value: Any) -> HistoryBuilder:
    b = HistoryBuilder()
    b.op(0, "put", key="k1", value=3, result=None)
    b.op(0, "get", key="k1", result=3)
    # Revisions jump by 40 between the workload's writes: the control plane wrote.
    b.op(1, "put", key="m/0", value=2, result=7)
    b.op(1, "get", key="m/0", result={"value": meta_value, "mod_revision": 7, "revision": 47})
    b.op(1, "range", key="m/", value={"revision": 3}, result={"at": 3, "kvs": []})
    return b


def test_mixed_traffic_is_checked_per_object() -> None:
    """Register and metastore ops each with their model; revision jumps by other
    writers are not a violation, a wrong value is."""
    ok = SplitLinear().check(_ctx(_mixed(2)))
    assert ok.valid is True, ok
    assert set(ok.figures) == {"register", "metastore", "notes"}
    # No watch recorded the writes: values alone, and the result says so.
    assert ok.figures["notes"] == ["metastore: revisions not checked (values and outcomes "
                                   "only): no watch on the prefix from revision 1 delivered "
                                   "anything"]  # fmt: skip
    assert ok.figures["metastore"]["model"] == "metastore"
    bad = SplitLinear().check(_ctx(_mixed(1)))
    assert bad.valid is False
    assert bad.anomalies[0].message.startswith("metastore:")


def _write(rev: int, **keys: Any) -> dict[str, Any]:
    return {"kind": "assignments-written", "zone": "default", "partition": 0, "revision": rev,
            "keys": {f"zone.default.p0.assignments.{k}": {"old": None, "new": v}
                     for k, v in keys.items()}}  # fmt: skip


def test_after_a_cancel_either_side_may_end_as_stable() -> None:
    """The last cancel's sides are both legal ends, until a later pending replaces them."""
    cancel = {"old": ["n1"], "new": ["n2"], "pending_revision": 3}
    audit = {"n1": [_write(2, stable=["n1"]), _write(3, pending=["n2"]),
                    _write(4, cancel=cancel)]}  # fmt: skip
    assert end_targets(audit) == {("default", 0): {("n1",), ("n2",)}}
    audit["n1"].append(_write(6, pending=["n3"]))
    assert end_targets(audit) == {("default", 0): {("n3",)}}


def test_a_trigger_that_deletes_planned_makes_pending_the_target_again() -> None:
    """pending A, planned B, then a trigger asking A again deletes planned: the target is A
    (seen in a docker run: stable ended at A and was wrongly flagged)."""
    audit = {"n1": [_write(2, stable=["n1"]), _write(3, pending=["n1", "n2"]),
                    _write(5, planned=["n2"]), _write(7, planned=None),
                    _write(9, stable=["n1", "n2"], pending=None)]}  # fmt: skip
    assert end_targets(audit) == {("default", 0): {("n1", "n2")}}


def test_a_planned_deleted_under_a_cancel_leaves_the_cancel_deciding() -> None:
    """pending A at 3, a cancel of it, then a trigger asking A deletes planned
    before the cancel lands: stable may end old (cancelled) or A (sim seed 67 of
    the default plan ended old and was wrongly flagged stable-not-target)."""
    cancel = {"old": ["n1"], "new": ["n2"], "pending_revision": 3}
    audit = {"n1": [_write(2, stable=["n1"]), _write(3, pending=["n2"]),
                    _write(4, planned=["n3"]), _write(5, cancel=cancel),
                    _write(7, planned=None),
                    _write(9, stable=["n1"], pending=None, cancel=None)]}  # fmt: skip
    assert end_targets(audit) == {("default", 0): {("n1",), ("n2",)}}


def test_a_planned_written_after_a_cancel_then_deleted_leaves_the_cancel_deciding() -> None:
    """A cancel of pending A, then planned B written and deleted again by a
    trigger asking A: the cancel decides, old or A, not B (docker mix seed 9091
    ended at A after a cannot-cancel and was wrongly flagged stable-not-target)."""
    cancel = {"old": ["n1"], "new": ["n2"], "pending_revision": 3}
    audit = {"n1": [_write(2, stable=["n1"]), _write(3, pending=["n2"]),
                    _write(4, cancel=cancel), _write(6, planned=["n3"]),
                    _write(8, planned=None),
                    _write(9, stable=["n2"], pending=None, cancel=None)]}  # fmt: skip
    assert end_targets(audit) == {("default", 0): {("n1",), ("n2",)}}
    audit["n1"].insert(4, _write(7, planned=["n3", "n4"]))  # a later planned alone is kept
    audit["n1"].pop()
    audit["n1"].pop()
    assert end_targets(audit) == {("default", 0): {("n3", "n4")}}


def test_metastore_traffic_alone_is_checked_with_its_revisions() -> None:
    """etcd's metastore runs: nothing else writes the store, so a read at a
    revision no write made is flagged, watches and compactions beside it or
    not; the same read beside register traffic (ember's, where the control
    plane writes too) is checked on its value alone."""
    b = HistoryBuilder()
    b.op(1, "put", key="m/0", value=2, result=1)
    b.op(1, "get", key="m/0", result={"value": 2, "mod_revision": 1, "revision": 47})
    b.op(1, "compact", value={"revision": 1}, result={"revision": 1})
    b.op(2, "watch", value={"prefix": "m/", "from": 1},
         result={"responses": [{"revision": 1, "events": [
             {"key": "m/0", "revision": 1, "type": "PUT", "value": 2}]}]})  # fmt: skip
    alone = SplitLinear().check(_ctx(b))
    assert alone.valid is False, alone
    assert alone.figures["model"] == "metastore"
    b.op(0, "put", key="k1", value=3, result=None)
    assert SplitLinear().check(_ctx(b)).valid is True
