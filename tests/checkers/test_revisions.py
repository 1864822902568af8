"""The revision checker: real-time revision order and watch streams."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given

from checkers.api import CheckContext, CheckerResult
from checkers.history import Event, pair, validate
from checkers.revisions import RevisionChecker
from tests.checkers.strategies import REVISION_BUGS, metastore_histories
from workloads.revisions import DECLARED

# The metastore workload's declaration, for any key (the strategies' keys are a, b, c).
METASTORE = {"ops": DECLARED["metastore"]}


def _check(raw: list[dict[str, Any]], revisions: Any = None) -> CheckerResult:
    events = [Event(**e) for e in raw]
    validate(events)  # the strategies must build format-valid histories
    plan = {"revisions": METASTORE if revisions is None else revisions}
    return RevisionChecker().check(CheckContext(plan=plan, events=events, operations=pair(events)))


@given(metastore_histories())
def test_clean_histories_pass(raw: list[dict[str, Any]]) -> None:
    """Concurrent puts/gets of a linearizable metastore and a correct watch pass."""
    result = _check(raw)
    assert result.valid is True, result.anomalies
    assert result.figures["watches"] == 1
    assert result.figures["writes"] >= 2


def _planted(bug: str) -> Any:
    @given(metastore_histories(bug))
    def run(raw: list[dict[str, Any]]) -> None:
        result = _check(raw)
        assert result.valid is False
        assert bug in {a.kind for a in result.anomalies}, result.anomalies

    return run


@pytest.mark.parametrize("bug", REVISION_BUGS)
def test_each_planted_ordering_anomaly_is_flagged(bug: str) -> None:
    """Every planted revision or watch anomaly is reported under its own kind."""
    _planted(bug)()


def test_anomaly_names_both_ops_and_revisions() -> None:
    """A stale read reports the op it contradicts and both revisions."""
    raw = [
        {"index": 0, "time": 0, "process": 0, "type": "invoke", "f": "put", "key": "a", "value": 1},
        {"index": 1, "time": 1, "process": 0, "type": "ok", "f": "put", "key": "a", "value": 5},
        {"index": 2, "time": 2, "process": 1, "type": "invoke", "f": "get", "key": "a"},
        {"index": 3, "time": 3, "process": 1, "type": "ok", "f": "get", "key": "a",
         "value": {"value": None, "revision": 4}},
    ]  # fmt: skip
    (anomaly,) = _check(raw).anomalies
    assert anomaly.kind == "stale-revision"
    assert anomaly.ops == [0, 2]
    assert anomaly.revisions == [5, 4]


def test_concurrent_ops_may_see_any_order() -> None:
    """Overlapping ops are not ordered: a read concurrent with a write may miss it."""
    raw = [
        {"index": 0, "time": 0, "process": 0, "type": "invoke", "f": "put", "key": "a", "value": 1},
        {"index": 1, "time": 1, "process": 1, "type": "invoke", "f": "get", "key": "a"},
        {"index": 2, "time": 2, "process": 0, "type": "ok", "f": "put", "key": "a", "value": 5},
        {"index": 3, "time": 3, "process": 1, "type": "ok", "f": "get", "key": "a",
         "value": {"revision": 4}},
    ]  # fmt: skip
    assert _check(raw).valid is True


def test_invoke_writes_count_as_writes_and_the_declared_field_is_read() -> None:
    """An invoke that took a writing branch is a write; its revision is read from the
    event's `revision` field where the declaration puts it there."""
    txn = {"if": [], "then": [{"op": "put", "key": "a", "value": 1}], "else": []}
    raw = [
        {"index": 0, "time": 0, "process": 0, "type": "invoke", "f": "invoke", "value": txn},
        {"index": 1, "time": 1, "process": 0, "type": "ok", "f": "invoke",
         "value": {"succeeded": True}, "revision": 3},
        {"index": 2, "time": 2, "process": 1, "type": "invoke", "f": "put", "key": "b"},
        {"index": 3, "time": 3, "process": 1, "type": "ok", "f": "put", "key": "b", "value": 3},
    ]  # fmt: skip
    declared = {"ops": {"invoke": "revision", "put": "value"}}
    kinds = {a.kind for a in _check(raw, declared).anomalies}
    assert kinds == {"duplicate-write-revision", "write-revision-not-increasing"}
