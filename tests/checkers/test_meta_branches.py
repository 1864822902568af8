"""Lost metastore transactions that write in both branches, checked each way
(checkers/meta_branches.py): one search per choice of branch, valid when one
choice is, invalid when all are, and the evidence re-checked by `verify`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from checkers.api import CheckContext
from checkers.compose import SplitLinear
from checkers.history import Event, pair, validate
from checkers.linearizability.types import LinResult
from checkers.meta_branches import MAX_SPLIT, choices, decide
from harness.cli import main
from tests.checkers.helpers import HistoryBuilder, watch_op

_IF = [{"key": "m/0", "target": "mod_revision", "op": "lt", "value": 40}]


def _lost(b: HistoryBuilder, process: int, then_value: int, else_value: int) -> None:
    """A transaction comparing a revision values alone cannot judge, writing
    m/1 in its then branch and m/2 in its else branch; its answer is lost."""
    spec = {"if": _IF, "then": [{"op": "put", "key": "m/1", "value": then_value}],
            "else": [{"op": "put", "key": "m/2", "value": else_value}]}  # fmt: skip
    b.add(process, "invoke", "invoke", key="m/1", value=spec)
    b.add(process, "info", "invoke", key="m/1", value=None)


def _read(b: HistoryBuilder, key: str, value: Any) -> None:
    b.op(1, "get", key=key, result={"value": value, "mod_revision": 9, "revision": 9})


def _ctx(b: HistoryBuilder) -> CheckContext:
    b.op(0, "put", key="k1", value=3, result=None)  # register traffic: the history is mixed
    events = [Event(**e) for e in b.events]
    validate(events)
    return CheckContext(plan={}, events=events, operations=pair(events))


def _one_lost(*reads: tuple[str, Any]) -> HistoryBuilder:
    b = HistoryBuilder()
    b.op(1, "put", key="m/0", value=1, result=2)
    _lost(b, 2, then_value=6, else_value=7)
    for key, value in reads:
        _read(b, key, value)
    return b


@pytest.mark.parametrize(("reads", "valid", "tried"), [
    ([("m/1", 6)], True, 1),  # the then branch ran
    ([("m/2", 7)], True, 2),  # the else branch ran: the second choice holds
    ([("m/1", None), ("m/2", None)], True, 1),  # it never took effect
    ([("m/1", 6), ("m/2", 7)], False, 2),  # both branches ran: no choice explains it
])  # fmt: skip
def test_a_lost_two_way_transaction_is_checked_each_way(
    reads: list[tuple[str, Any]], valid: bool, tried: int
) -> None:
    """Values alone cannot judge the comparison, so either branch, or neither,
    may have run, but never both. Each used to be `unknown`."""
    result = SplitLinear().check(_ctx(_one_lost(*reads)))
    assert result.valid is valid, result
    meta = result.figures["metastore"]
    assert meta["revisions"].startswith("left out")
    lost = 2  # the lost transaction's invoke index
    assert meta["branches"]["ops"] == [lost]
    assert [c["then"] for c in meta["branches"]["tried"]] == [[lost], []][:tried]
    assert any("op(s) [2], lost transactions" in n for n in result.figures["notes"])
    if valid is False:
        message = result.anomalies[0].message
        assert "under each choice of branch for lost transaction(s) [2]" in message
        assert all(c["counterexample"] for c in meta["branches"]["tried"])
    else:  # a choice that failed before one held proves nothing: no proof is kept
        assert not any("counterexample" in c for c in meta["branches"]["tried"])


def test_two_lost_transactions_need_the_choice_that_explains_them() -> None:
    """m/1=6 and m/2=17 can only be the first's then and the second's else:
    the third of four choices in order."""
    b = HistoryBuilder()
    _lost(b, 2, then_value=6, else_value=7)
    _lost(b, 3, then_value=16, else_value=17)
    _read(b, "m/1", 6)
    _read(b, "m/2", 17)
    result = SplitLinear().check(_ctx(b))
    assert result.valid is True, result
    branches = result.figures["metastore"]["branches"]
    assert branches["ops"] == [0, 2]
    assert [c["then"] for c in branches["tried"]] == [[0, 2], [0]]
    assert [c["valid"] for c in branches["tried"]] == [False, True]


def test_a_read_before_the_transaction_was_sent_is_still_found() -> None:
    """No choice of branch moves a write before its invoke."""
    b = HistoryBuilder()
    _read(b, "m/1", 6)
    _lost(b, 2, then_value=6, else_value=7)
    assert SplitLinear().check(_ctx(b)).valid is False


def test_on_ranks_the_choices_keep_the_ranking() -> None:
    """Past the watch record the comparison cannot be ranked; each choice
    settles it, so the ranking (and its revision checks) is kept."""
    b = HistoryBuilder()
    b.op(1, "put", key="m/0", value=1, result=2)
    watch_op(b, 1, [(2, "m/0", "put", 1)])
    _lost(b, 2, then_value=6, else_value=7)
    _read(b, "m/2", 7)
    result = SplitLinear().check(_ctx(b))
    assert result.valid is True, result
    assert result.figures["metastore"]["revisions"].startswith("ranked by the watch record")
    assert len(result.figures["metastore"]["branches"]["tried"]) == 2


def _verdict(valid: Any, reason: str | None = None) -> LinResult:
    return LinResult(valid=valid, model="metastore", ops=3, partitions=1, states_explored=4,
                     cache_size=2, elapsed_s=0.5, reason=reason)  # fmt: skip


@pytest.mark.parametrize(("verdicts", "merged", "searches"), [
    ([False, "unknown", False, False], "unknown", 4),  # the undecided choice may hold
    (["unknown", True], True, 2),  # one choice holds: the rest need not be decided
    ([False, False, False, False], False, 4),
])  # fmt: skip
def test_the_choices_merge_as_any_valid_else_all_invalid_else_unknown(
    verdicts: list[Any], merged: Any, searches: int
) -> None:
    b = HistoryBuilder()
    _lost(b, 2, then_value=6, else_value=7)
    _lost(b, 3, then_value=16, else_value=17)
    ops = [op for op in _ctx(b).operations if op.key and op.key.startswith("m/")]
    answers = iter(verdicts)
    calls: list[int] = []

    def search(ops: list[Any], model: Any) -> LinResult:
        calls.append(len(ops))
        v = next(answers)
        return _verdict(v, "out of budget" if v == "unknown" else None)

    result, _ = decide(ops, "no watch", search)
    assert result.valid == merged
    assert len(calls) == searches
    assert result.elapsed_s == pytest.approx(0.5 * searches)
    assert result.branches is not None
    assert result.branches.ops == [0, 2]
    if merged == "unknown":
        assert result.reason == (
            "1 of 4 choices of branch for lost transaction(s) [0, 2] undecided; out of budget"
        )


def test_choices_come_in_order_all_then_first() -> None:
    assert list(choices([4, 9])) == [[4, 9], [4], [9], []]
    assert len(list(choices(list(range(MAX_SPLIT))))) == 2**MAX_SPLIT


@pytest.mark.parametrize("reads", [[("m/2", 7)], [("m/1", 6), ("m/2", 7)]])
def test_verify_checks_the_choice_that_held_or_every_choice_failing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], reads: list[tuple[str, Any]]
) -> None:
    """A valid verdict's witness is of the else choice; an invalid one's
    counterexamples are one per choice, and dropping one is refused."""
    b = _one_lost(*reads)
    b.op(0, "put", key="k1", value=3, result=None)
    history = tmp_path / "history.jsonl"
    history.write_bytes(b.lines())
    main(["check", str(history), "--checker", "linearizable"])
    results_path = tmp_path / "results.json"
    results = json.loads(results_path.read_text())
    assert results["valid"] is (len(reads) == 1)
    assert main(["verify", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    tried = results["checkers"]["linearizable"]["figures"]["metastore"]["branches"]["tried"]
    if len(reads) == 1:
        assert "witness verified" in out, out
        assert "running then: []" in out, out
        tried[-1]["then"] = [2]  # the witness against the other choice's ops
        results_path.write_text(json.dumps(results))
        assert main(["verify", str(results_path)]) == 1
        return
    assert "counterexample verified under each of the 2 choices" in out, out
    tried[1] = {**tried[0]}  # the same choice's proof twice, the other's missing
    results_path.write_text(json.dumps(results))
    assert main(["verify", str(results_path)]) == 2
    assert "a counterexample for 1 of the 2 choices" in capsys.readouterr().err
