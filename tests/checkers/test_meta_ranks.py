"""Metastore revisions ranked by the watch record (checkers/meta_ranks.py),
and the mixed register + metastore check that uses them (checkers/compose.py)."""

from __future__ import annotations

from typing import Any

import pytest

from checkers.api import CheckContext
from checkers.compose import SplitLinear, check
from checkers.history import Event, Operation, pair, validate
from checkers.meta_branches import MAX_SPLIT
from checkers.meta_ranks import UnrankableError, ranked_ops, record_of
from tests.checkers.helpers import Ev, HistoryBuilder, foreign_writers_history, watch_op


def _ops(b: HistoryBuilder) -> list[Operation]:
    events = [Event(**e) for e in b.events]
    validate(events)
    return pair(events)


def _ctx(b: HistoryBuilder) -> CheckContext:
    b.op(0, "put", key="k1", value=3, result=None)  # register traffic: the history is mixed
    events = [Event(**e) for e in b.events]
    validate(events)
    return CheckContext(plan={}, events=events, operations=pair(events))


def test_the_record_is_the_gapless_cover_from_revision_one() -> None:
    b = HistoryBuilder()
    watch_op(b, 1, [(2, "m/0", "put", 1), (5, "m/1", "put", 2)])
    watch_op(b, 6, [(9, "m/0", "delete", None)])
    watch_op(b, 12, [(14, "m/0", "put", 4)])  # revisions 10-11 are on no stream
    record = record_of(_ops(b), "m/")
    assert (record.end, record.writes) == (9, (2, 5, 9))
    assert [record.rank(r) for r in (1, 2, 4, 5, 9, 10)] == [0, 1, 1, 2, 3, None]
    assert record.pinned()[3] == (("m/0", "DELETE", None),)


def _progress(b: HistoryBuilder, start: int, lines: list[Ev | int]) -> None:
    """A watch whose lines are events and progress notifications (ints)."""
    responses = [{"revision": ln, "progress": True} if isinstance(ln, int) else
                 {"revision": ln[0], "events": [{"key": ln[1], "revision": ln[0], "type": ln[2],
                                                 "value": ln[3]}]} for ln in lines]  # fmt: skip
    b.op(9, "watch", value={"prefix": "m/", "from": start},
         result={"responses": responses, "unframed": True})  # fmt: skip


def test_a_progress_line_covers_the_revisions_up_to_it() -> None:
    """ember sends {"progress": r} when every event up to r was sent: a watch
    that delivered nothing after 2 still covers up to its progress."""
    b = HistoryBuilder()
    _progress(b, 1, [(2, "m/0", "put", 1), 6])
    _progress(b, 7, [6, (8, "m/0", "put", 2), 11])
    record = record_of(_ops(b), "m/")
    assert (record.end, record.writes) == (11, (2, 8))


def test_a_progress_line_far_ahead_is_not_walked_revision_by_revision() -> None:
    """A stream may name any revision; the record's cost is its events'."""
    b = HistoryBuilder()
    _progress(b, 1, [(2, "m/0", "put", 1), 10**15])
    _progress(b, 1, [(2, "m/0", "put", 1), 10**14])
    record = record_of(_ops(b), "m/")
    assert (record.end, record.rank(10**13)) == (10**15, 1)


def test_an_event_a_progress_line_already_passed_gives_no_record() -> None:
    b = HistoryBuilder()
    _progress(b, 1, [(2, "m/0", "put", 1), 6, (5, "m/1", "put", 1)])
    with pytest.raises(UnrankableError, match="revision 5 out of order"):
        record_of(_ops(b), "m/")


@pytest.mark.parametrize("spec", [{"from": 3}, {"from": 1, "key": "m/0"}, {"from": 0}])
def test_no_record_without_a_prefix_watch_from_revision_one(spec: dict[str, Any]) -> None:
    b = HistoryBuilder()
    start = spec.pop("from")
    watch_op(b, start, [(4, "m/0", "put", 1)], **spec)
    with pytest.raises(UnrankableError, match="from revision 1"):
        record_of(_ops(b), "m/")


def test_streams_that_disagree_give_no_record() -> None:
    b = HistoryBuilder()
    watch_op(b, 1, [(2, "m/0", "put", 1), (3, "m/1", "put", 1)])
    watch_op(b, 1, [(3, "m/1", "put", 1)])  # says nothing happened at 2
    with pytest.raises(UnrankableError, match="disagree about revision 2"):
        record_of(_ops(b), "m/")


def test_a_stream_going_back_gives_no_record() -> None:
    b = HistoryBuilder()
    watch_op(b, 1, [(3, "m/1", "put", 1), (2, "m/0", "put", 1)])
    with pytest.raises(UnrankableError, match="out of order"):
        record_of(_ops(b), "m/")


def _record_b() -> HistoryBuilder:
    b = HistoryBuilder()
    watch_op(b, 1, [(2, "m/0", "put", 1), (5, "m/1", "put", 2), (9, "m/0", "put", 3)])
    return b


def test_every_revision_an_op_reports_becomes_its_rank() -> None:
    b = _record_b()
    b.op(1, "put", key="m/0", value=3, result=9)
    b.op(1, "put", key="m/1", value=5, result=20)  # past the record: left unchecked
    b.op(1, "get", key="m/1", result={"value": 2, "mod_revision": 5, "revision": 7})
    b.op(1, "get", key="m/2", result={"value": None, "mod_revision": 0, "revision": 30})
    b.op(1, "delete", key="m/3", result={"revision": 6, "deleted": 0})
    conds = [{"key": "m/0", "target": "mod_revision", "op": "lt", "value": 6},
             {"key": "m/0", "target": "mod_revision", "op": "eq", "value": 5},
             {"key": "m/0", "target": "mod_revision", "op": "eq", "value": 0}]  # fmt: skip
    spec = {"if": conds, "then": [], "else": []}
    b.op(1, "invoke", key="m/0", value=spec, result={"succeeded": False, "revision": 9})
    ops = _ops(b)
    record = record_of(ops, "m/")
    ranked = ranked_ops([op for op in ops if op.f != "watch"], record)
    assert [op.result for op in ranked[:5]] == [
        3, None, {"value": 2, "mod_revision": 2, "revision": 2},
        {"value": None, "mod_revision": 0}, {"revision": 2, "deleted": 0},
    ]  # fmt: skip
    # 6 is no write: it sits between the ranks around it, so lt/eq keep their answers.
    assert [c["value"] for c in ranked[5].value["if"]] == [2.5, 2, 0]
    assert ranked[5].result == {"succeeded": False, "revision": 3}


@pytest.mark.parametrize(
    ("f", "value", "result", "match"),
    [("put", 1, 4, "write at revision 4"),
     ("get", None, {"value": 1, "mod_revision": 3, "revision": 4}, "write at revision 3"),
     ("invoke", {"if": [{"key": "m/0", "target": "mod_revision", "op": "eq", "value": 12}],
                 "then": [{"op": "put", "key": "m/0", "value": 1}],
                 "else": [{"op": "delete", "key": "m/1"}]},
      None, "not saying which branch ran, compares with revision 12")],
)  # fmt: skip
def test_a_revision_the_record_cannot_place_gives_no_ranks(
    f: str, value: Any, result: Any, match: str
) -> None:
    b = _record_b()
    b.op(1, f, key="m/0", value=value, result=result)
    ops = _ops(b)
    with pytest.raises(UnrankableError, match=match):
        ranked_ops([op for op in ops if op.f != "watch"], record_of(ops, "m/"))


_THEN = [{"op": "put", "key": "m/1", "value": 6}]
_ELSE = [{"op": "put", "key": "m/2", "value": 7}]


def _compare(b: HistoryBuilder, at: int, succeeded: bool | None, op: str = "lt",
             then: Any = _THEN, orelse: Any = _ELSE, lost_by: int = 2) -> None:  # fmt: skip
    """An invoke on m/1 that also compares m/0's mod revision with `at`
    (None: its answer was lost, by process `lost_by`)."""
    spec = {"if": [{"key": "m/1", "target": "exists", "value": True},
                   {"key": "m/0", "target": "mod_revision", "op": op, "value": at}],
            "then": then, "else": orelse}  # fmt: skip
    if succeeded is None:
        b.add(lost_by, "invoke", "invoke", key="m/1", value=spec)
        b.add(lost_by, "info", "invoke", key="m/1", value=None)
    else:
        b.op(1, "invoke", key="m/1", value=spec,
             result={"succeeded": succeeded, "revision": at + 1})  # fmt: skip


@pytest.mark.parametrize("succeeded", [True, False])
def test_a_comparison_past_the_record_is_settled_by_the_outcome(succeeded: bool) -> None:
    """Past the record no rank says what the store compared; the answer does:
    succeeded, the comparison held (dropped); failed, the else branch ran
    (a condition that never holds)."""
    b = _record_b()
    _compare(b, 30, succeeded)
    ops = _ops(b)
    [ranked] = ranked_ops([op for op in ops if op.f == "invoke"], record_of(ops, "m/"))
    conds = ranked.value["if"]
    assert conds[0] == {"key": "m/1", "target": "exists", "value": True}
    if succeeded:
        assert conds[1:] == []
    else:
        assert conds[1:] == [{"key": "m/0", "target": "version", "op": "lt", "value": 0}]


def test_compared_revisions_are_judged_on_ranks() -> None:
    """m/0 was last written at 9: `mod_revision lt 9` cannot have held at the
    end, so a transaction reporting it did is found; one reporting it did
    not is fine."""

    def recorded(succeeded: bool) -> HistoryBuilder:
        b = _record_b()  # writes m/0=1 at 2, m/1=2 at 5, m/0=3 at 9
        for key, value, revision in (("m/0", 1, 2), ("m/1", 2, 5), ("m/0", 3, 9)):
            b.op(1, "put", key=key, value=value, result=revision)
        _compare(b, 9, succeeded)  # writes m/1=6 (then) or m/2=7 (else) at 10
        key, value = ("m/1", 6) if succeeded else ("m/2", 7)
        b.op(1, "get", key=key, result={"value": value, "mod_revision": 10, "revision": 10})
        watch_op(b, 10, [(10, key, "put", value)])
        return b

    good = SplitLinear().check(_ctx(recorded(succeeded=False)))
    assert good.valid is True, good
    result = SplitLinear().check(_ctx(recorded(succeeded=True)))
    assert result.valid is False, result
    assert result.figures["metastore"]["revisions"].startswith("ranked")


def test_values_alone_settle_comparisons_or_say_they_cannot_decide() -> None:
    """Without a record, known transactions are settled by their outcomes;
    lost ones that write in both branches are checked each way
    (test_meta_branches.py), up to `MAX_SPLIT` of them; past that the part is
    unknown and says why: never a verdict values alone cannot back."""
    b = HistoryBuilder()
    b.op(1, "put", key="m/1", value=2, result=5)
    _compare(b, 4, succeeded=True)
    decided = SplitLinear().check(_ctx(b))
    assert decided.valid is True, decided
    assert decided.figures["metastore"]["revisions"].startswith("left out")
    for process in range(2, MAX_SPLIT + 3):
        _compare(b, 30, succeeded=None, lost_by=process)
    undecided = SplitLinear().check(_ctx(b))
    assert undecided.valid == "unknown", undecided
    assert undecided.figures["metastore"]["states_explored"] == 0  # no search was run
    why = (f"metastore: not checked: {MAX_SPLIT + 1} transactions of unknown outcome compare "
           f"mod or create revisions and write in both branches; checking each way would "
           f"take 2^{MAX_SPLIT + 1} searches (at most 2^{MAX_SPLIT})")  # fmt: skip
    assert why in (undecided.error or "")


@pytest.mark.parametrize("empty", ["else", "then"])
def test_a_lost_answer_is_settled_when_one_branch_writes_nothing(empty: str) -> None:
    """A transaction of unknown outcome may never take effect, and a branch
    that writes nothing looks the same as that: the op takes the other branch
    wherever it takes effect. Past the record, it keeps the ranking."""
    then, orelse = ([], _ELSE) if empty == "then" else (_THEN, [])
    b = _record_b()
    _compare(b, 30, succeeded=None, then=then, orelse=orelse)
    ops = _ops(b)
    [ranked] = ranked_ops([op for op in ops if op.f == "invoke"], record_of(ops, "m/"))
    never = [{"key": "m/0", "target": "version", "op": "lt", "value": 0}]
    assert ranked.value["if"][1:] == (never if empty == "then" else [])


def test_an_answer_that_does_not_say_which_branch_ran_is_not_settled() -> None:
    """It took effect, so an empty else is not the same as never: the op
    still ends the ranking rather than be forced down the then branch."""
    b = _record_b()
    spec = {"if": [{"key": "m/0", "target": "mod_revision", "op": "lt", "value": 30}],
            "then": _THEN, "else": []}  # fmt: skip
    b.op(1, "invoke", key="m/1", value=spec, result={"revision": 31})
    ops = _ops(b)
    with pytest.raises(
        UnrankableError, match="not saying which branch ran, compares with revision 30"
    ):
        ranked_ops([op for op in ops if op.f == "invoke"], record_of(ops, "m/"))


def test_values_alone_decide_a_lost_answer_whose_else_writes_nothing() -> None:
    """The lost transaction may have written m/1=6 (then) or nothing: a read
    of 6 after it is explained, a read of 6 before it was sent is not. Both
    were `unknown` while every lost answer made values alone undecidable."""

    def history(read_first: bool) -> HistoryBuilder:
        b = HistoryBuilder()
        b.op(1, "put", key="m/1", value=2, result=5)
        if read_first:
            b.op(1, "get", key="m/1", result={"value": 6, "mod_revision": 6, "revision": 6})
        _compare(b, 30, succeeded=None, orelse=[])
        b.op(1, "get", key="m/1", result={"value": 6, "mod_revision": 6, "revision": 6})
        return b

    good = SplitLinear().check(_ctx(history(read_first=False)))
    assert good.valid is True, good
    assert good.figures["metastore"]["revisions"].startswith("left out")
    bad = SplitLinear().check(_ctx(history(read_first=True)))
    assert bad.valid is False, bad


def test_mixed_histories_keep_their_revisions_where_the_watches_record_every_write() -> None:
    """A read of the newest value that names the older write's revision breaks
    nothing a check of values sees; ranked, it is found."""
    ok = SplitLinear().check(_ctx(foreign_writers_history(50)))
    assert ok.valid is True, ok
    assert ok.figures["metastore"]["revisions"].startswith("ranked by the watch record: 2 writes")
    bad = SplitLinear().check(_ctx(foreign_writers_history(10)))
    assert bad.valid is False, bad
    assert bad.anomalies[0].message.startswith("metastore:")
    assert "(revisions shown as ranks: ranked by the watch record" in bad.anomalies[0].message
    unwatched = foreign_writers_history(10)
    unwatched.events = [e for e in unwatched.events if e["f"] != "watch"]
    fallback = SplitLinear().check(_ctx(unwatched))
    assert fallback.valid is True  # values alone cannot see it, and says so
    assert fallback.figures["metastore"]["revisions"].startswith("left out: no watch")


def _lost_writes(recorded_value: int) -> HistoryBuilder:
    """A put whose answer was lost, a later read of its value at the first write."""
    b = HistoryBuilder()
    b.add(2, "invoke", "put", key="m/0", value=7)
    b.add(2, "info", "put", key="m/0", value=None)
    b.op(1, "get", key="m/0", result={"value": 7, "mod_revision": 3, "revision": 4})
    watch_op(b, 1, [(3, "m/0", "put", recorded_value)])
    return b


def test_a_lost_write_may_only_be_the_write_the_record_shows() -> None:
    """The lost put explains the read only if the record's write at 3 is it."""
    ok = SplitLinear().check(_ctx(_lost_writes(7)))
    assert ok.valid is True, ok
    bad = SplitLinear().check(_ctx(_lost_writes(8)))
    assert bad.valid is False, bad


def test_a_write_applied_twice_is_found_on_ranks() -> None:
    """The planted `metastore.ignore-sessions` shape: one put, answered once,
    applied again after a later write to its key."""
    b = HistoryBuilder()
    b.op(1, "put", key="m/0", value=9, result=3)
    b.op(1, "put", key="m/0", value=10, result=5)
    b.op(1, "get", key="m/0", result={"value": 9, "mod_revision": 7, "revision": 7})
    watch_op(b, 1, [(3, "m/0", "put", 9), (5, "m/0", "put", 10), (7, "m/0", "put", 9)])
    result = SplitLinear().check(_ctx(b))
    assert result.valid is False, result
    assert result.figures["metastore"]["revisions"].startswith("ranked")


def _reasons(b: HistoryBuilder) -> list[str]:
    b.op(0, "put", key="k1", value=3, result=None)  # register traffic: the history is mixed
    events = [Event(**e) for e in b.events]
    result = check({}, events, checkers={"linearizable": SplitLinear()})
    assert result.valid is True, result
    return result.reasons


def test_the_summary_names_revisions_the_check_did_not_judge() -> None:
    """A check that judged values alone, or left some ops' revisions out, says
    so in the run's reasons (printed and in the report); one that judged every
    revision says nothing."""

    def recorded() -> HistoryBuilder:
        b = _record_b()  # writes m/0=1 at 2, m/1=2 at 5, m/0=3 at 9
        for key, value, revision in (("m/0", 1, 2), ("m/1", 2, 5), ("m/0", 3, 9)):
            b.op(1, "put", key=key, value=value, result=revision)
        return b

    assert _reasons(recorded()) == []
    tail = recorded()
    tail.op(1, "get", key="m/0", result={"value": 3, "mod_revision": 9, "revision": 20})
    assert _reasons(tail) == [
        "linearizable: metastore: the revisions of 1 of 4 operations not checked, past the "
        "watch record (3 writes under 'm/' at revisions 1-9; the revisions of 1 of 4 ops, "
        "past it, left unchecked)"
    ]
    unwatched = foreign_writers_history(50)
    unwatched.events = [e for e in unwatched.events if e["f"] != "watch"]
    [reason] = _reasons(unwatched)
    assert reason.startswith("linearizable: metastore: revisions not checked (values and "
                             "outcomes only): no watch on the prefix"), reason  # fmt: skip


def test_a_failed_op_past_the_record_does_not_cost_the_ranking() -> None:
    """A `fail` certainly took no effect and is never searched; that it
    compared a revision past the record, which no answer settles, must not
    leave every other op's revisions out."""
    b = foreign_writers_history(10)
    spec = {"if": [{"key": "m/0", "target": "mod_revision", "op": "lt", "value": 99}],
            "then": [{"op": "put", "key": "m/0", "value": 3}], "else": []}  # fmt: skip
    b.add(4, "invoke", "invoke", key="m/0", value=spec)
    b.add(4, "fail", "invoke", key="m/0", value=spec, error="timeout")
    bad = SplitLinear().check(_ctx(b))
    assert bad.figures["metastore"]["revisions"].startswith("ranked by the watch record")
    assert bad.valid is False, bad  # the stale read is still found, on ranks
