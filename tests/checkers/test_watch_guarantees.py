"""etcd's KV and watch guarantees (G1-G9, checkers/watches.py): one clean
history, and for each guarantee one change to it that breaks that guarantee
and no other."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from checkers.api import CheckContext, CheckerResult
from checkers.catalog import GUARANTEES, guarantees_broken
from checkers.history import Event, pair, validate
from checkers.revisions import RevisionChecker

DECLARATION = {"ops": {"get": "value.revision", "put": "value", "delete": "value.revision",
                       "invoke": "value.revision", "watch": "watch", "range": "snapshot",
                       "compact": "compaction"}}  # fmt: skip
Story = dict[str, Any]


def _story() -> Story:
    """Five writes, a compaction at 2, and three watches.

    rev 1 put m/a=1; rev 2 put m/b=2; rev 3 txn (put m/a=3, delete m/b);
    rev 4 delete m/a (deleted 1); rev 5 put m/b=5. Watch A (from 1) runs
    beside them all, with a progress notification at 3. After the
    compaction, B (from 1, below it) is refused and C (from 2) is served.
    """

    def ev(key: str, rev: int, value: Any = None) -> dict[str, Any]:
        kind = "PUT" if value is not None else "DELETE"
        return {"key": key, "revision": rev, "type": kind, "value": value}

    txn = {"if": [{"key": "m/a", "target": "exists", "value": True}],
           "then": [{"op": "put", "key": "m/a", "value": 3}, {"op": "delete", "key": "m/b"}],
           "else": []}  # fmt: skip
    responses = [
        {"revision": 1, "events": [ev("m/a", 1, 1)]},
        {"revision": 2, "events": [ev("m/b", 2, 2)]},
        {"revision": 3, "events": [ev("m/a", 3, 3), ev("m/b", 3)]},
        {"revision": 3, "progress": True},
        {"revision": 4, "events": [ev("m/a", 4)]},
        {"revision": 5, "events": [ev("m/b", 5, 5)]},
    ]
    return {
        "writes": [
            ("put", "m/a", 1, 1), ("put", "m/b", 2, 2),
            ("invoke", "m/a", txn, {"succeeded": True, "revision": 3}),
            ("delete", "m/a", None, {"deleted": 1, "revision": 4}),
            ("put", "m/b", 5, 5),
        ],
        "read": {"value": 5, "mod_revision": 5, "revision": 5},
        "snapshot": {"at": 3, "kvs": [{"key": "m/a", "value": 3, "mod_revision": 3}]},
        "A": {"responses": responses},
        "B": {"responses": [], "compacted": 2},
        "C": {"responses": [copy.deepcopy(r) for r in responses[1:] if "events" in r]},
        "C_from": 2,
    }  # fmt: skip


def _history(story: Story) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def add(process: Any, type_: str, f: str, key: Any = None, value: Any = None) -> None:
        out.append({"index": len(out), "time": len(out) * 1000, "process": process,
                    "type": type_, "f": f, "key": key, "value": value})  # fmt: skip

    add("w0", "invoke", "watch", value={"prefix": "m/", "from": 1})
    for f, key, value, result in story["writes"]:
        add(0, "invoke", f, key, value)
        add(0, "ok", f, key, result)
    add(1, "invoke", "get", "m/b")
    add(1, "ok", "get", "m/b", story["read"])
    add(1, "invoke", "range", "m/", {"revision": 3})
    add(1, "ok", "range", "m/", story["snapshot"])
    if "fault_compaction" in story:  # the nemesis's compact-kill compacted at 2 instead
        value = {"kind": "compact-kill", "action": "compact", "target": "leader"}
        add("nemesis", "invoke", "compact-kill", value=value)
        add("nemesis", "ok", "compact-kill", value={**value, **story["fault_compaction"]})
    else:
        add(1, "invoke", "compact", value={"revision": 2})
        add(1, "ok", "compact", value={"revision": 2})
    add("w1", "invoke", "watch", value={"prefix": "m/", "from": 1})
    add("w1", "ok" if story["B"].get("responses") else "fail", "watch", value=story["B"])
    add("w2", "invoke", "watch", value={"prefix": "m/", "from": story["C_from"]})
    add("w2", "ok", "watch", value=story["C"])
    add("w0", "ok", "watch", value=story["A"])
    return out


def _check(story: Story) -> CheckerResult:
    events = [Event(**e) for e in _history(story)]
    validate(events)
    ctx = CheckContext(plan={"revisions": DECLARATION}, events=events, operations=pair(events))
    return RevisionChecker().check(ctx)


def _stale_read(s: Story) -> None:
    s["read"]["revision"] = 3  # invoked after rev 5 was acknowledged


def _missed_write(s: Story) -> None:
    s["snapshot"]["kvs"][0].update(value=1, mod_revision=1)  # at 3, m/a was 3


def _went_back(s: Story) -> None:
    r = s["A"]["responses"]
    r[4], r[5] = r[5], r[4]


def _gap(s: Story) -> None:
    del s["A"]["responses"][4]  # the delete at 4 said it deleted: it must show


def _split(s: Story) -> None:
    r = s["A"]["responses"]
    put, delete = r[2]["events"]
    r[2:3] = [{"revision": 3, "events": [put]}, {"revision": 3, "events": [delete]}]


def _mismatch(s: Story) -> None:
    s["A"]["responses"][5]["events"].append(
        {"key": "m/c", "revision": 5, "type": "PUT", "value": 9}
    )  # revision 5 is the put of m/b alone


def _progress_ahead(s: Story) -> None:
    r = s["A"]["responses"]
    r[3]["revision"] = 4  # claims 4 before the delete at 4 came


def _resume_gap(s: Story) -> None:
    # from 3, but the first event is at 4 (at 2, the compaction's revision, it would be G9)
    s["C_from"] = 3
    s["C"]["responses"] = [r for r in s["C"]["responses"] if r["revision"] >= 4]


def _served_compacted(s: Story) -> None:
    # from 1, below the compaction at 2, served from 2 on: m/a=1 silently gone
    s["B"] = {"responses": copy.deepcopy(s["C"]["responses"])}


def _refused_wrongly(s: Story) -> None:
    s["C"] = {"responses": [], "compacted": 2}  # from 2 = the compact revision: servable


BREAKS: dict[str, Callable[[Story], None]] = {
    "G1": _stale_read, "G2": _missed_write, "G3": _went_back, "G4": _gap, "G5": _split,
    "G6": _mismatch, "G7": _progress_ahead, "G8": _resume_gap, "G9": _served_compacted,
}  # fmt: skip


def test_the_clean_story_keeps_every_guarantee() -> None:
    result = _check(_story())
    assert result.valid is True, result.anomalies
    assert result.figures["watches"] == 3
    assert result.figures["compactions"] == 1


def test_every_guarantee_has_a_break() -> None:
    assert sorted(BREAKS) == [g.id for g in GUARANTEES]


@pytest.mark.parametrize("guarantee", sorted(BREAKS))
def test_each_break_reports_its_guarantee_alone(guarantee: str) -> None:
    story = _story()
    BREAKS[guarantee](story)
    result = _check(story)
    assert guarantees_broken({"revisions": result}) == {guarantee}, result.anomalies


def test_a_member_behind_the_compaction_may_serve_a_compacted_start_whole() -> None:
    story = _story()
    story["B"] = copy.deepcopy(story["A"])  # from 1, every event since: nothing lost
    assert _check(story).valid is True


def test_a_progress_notification_behind_what_was_delivered_is_g7() -> None:
    """etcd-io/etcd#15220: a requested progress notification with a revision
    below an event the stream had already delivered."""
    story = _story()
    story["A"]["responses"].append({"revision": 4, "progress": True})  # after rev 5's event
    result = _check(story)
    assert [a.kind for a in result.anomalies] == ["watch-progress-behind"]


def test_a_delete_lost_at_the_compaction_revision_is_g9() -> None:
    """etcd-io/etcd#18089: delete at r, compact at r, watch from r: the delete is
    missing (the tombstone at the compaction revision was compacted away)."""
    story = _story()
    story["writes"].insert(4, ("compact", None, {"revision": 4}, {"revision": 4}))
    story["C_from"] = 4
    story["C"]["responses"] = [r for r in story["C"]["responses"] if r["revision"] == 5]
    anomalies = _check(story).anomalies
    assert [a.kind for a in anomalies] == ["watch-compaction-lost-event"], anomalies
    # A user triaging the verdict learns it is the known upstream defect.
    assert "etcd-io/etcd#18089, fixed in etcd 3.4.34 and 3.5.16" in anomalies[0].message


def test_a_refusal_of_a_servable_watch_is_g9_too() -> None:
    story = _story()
    _refused_wrongly(story)
    result = _check(story)
    assert [a.kind for a in result.anomalies] == ["watch-refused-wrongly"]


@pytest.mark.parametrize("value", [3, 4])
def test_a_phantom_event_no_operation_wrote_is_g6(value: int) -> None:
    """An event at a revision no acknowledged write owns must still be a key
    and value some operation wrote: m/b=3 was never written, m/b=4 neither."""
    story = _story()
    story["writes"][4] = ("put", "m/b", 5, None)  # rev 5's put never acknowledged: info below
    story["A"]["responses"][5]["events"][0]["value"] = value
    events = _history(story)
    for e in events:  # the last put's completion is lost
        if e["f"] == "put" and e["type"] == "ok" and e["value"] is None:
            e["type"] = "info"
    ctx = CheckContext(plan={"revisions": DECLARATION}, events=[Event(**e) for e in events],
                       operations=pair([Event(**e) for e in events]))  # fmt: skip
    kinds = [a.kind for a in RevisionChecker().check(ctx).anomalies]
    assert "watch-phantom-event" in kinds, kinds


def test_a_list_shaped_stream_is_still_judged_where_it_can_be() -> None:
    """Older runs' watches (a bare list of events) keep G3, G4, G6 and G8."""
    story = _story()
    flat = [e for r in story["A"]["responses"] for e in r.get("events", [])]
    story["A"] = flat
    assert _check(story).valid is True
    del flat[3]  # m/b's delete inside the txn at 3: it may have found no key
    assert _check(story).valid is True
    del flat[1]  # m/b=2, an acknowledged put
    assert [a.kind for a in _check(story).anomalies] == ["watch-gap"]


def test_a_watch_of_now_owes_nothing_before_its_first_event() -> None:
    """Without `from` a watch starts at the store's revision when it begins:
    its progress notification claims nothing about earlier writes."""
    story = _story()
    story["C_from"] = 0
    story["C"]["responses"] = story["C"]["responses"][2:]  # events at 4 and 5 only
    story["C"]["responses"].insert(1, {"revision": 4, "progress": True})
    assert _check(story).valid is True


def _fault_compaction(answered: bool) -> dict[str, Any]:
    done = {"action": "compact", "revision": 2, "answered": answered, "kill_after_ms": 4.0}
    if answered:
        done["answer"] = {"compact_revision": 2, "revision": 5}
    return {"applied": True, "node": "n1", "maintenance": done}


def test_a_compaction_the_nemesis_saw_answered_counts_for_g9() -> None:
    story = _story()
    story["fault_compaction"] = _fault_compaction(answered=True)
    assert _check(story).figures["compactions"] == 1
    _served_compacted(story)
    kinds = [a.kind for a in _check(story).anomalies]
    assert kinds == ["watch-compacted-not-refused"], kinds


def test_a_compaction_whose_answer_the_kill_cut_off_is_not_assumed() -> None:
    """Without the answer the checker cannot know the compaction happened: a
    watch from 1 whose first event is at 2 is a watch that did not start
    where it was asked to (G8), not one that should have been refused."""
    story = _story()
    story["fault_compaction"] = _fault_compaction(answered=False)
    assert _check(story).figures["compactions"] == 0
    _served_compacted(story)
    assert [a.kind for a in _check(story).anomalies] == ["watch-resume-gap"]


def test_a_lost_event_is_reported_once_not_again_by_a_later_progress() -> None:
    """etcd-io/etcd#18089 as the sweep saw it: a watch from the compaction
    revision never gets the delete there, and a progress notification later
    claims past it. One loss, one anomaly: G9's, not G7's too."""
    story = _story()
    story["writes"].insert(4, ("compact", None, {"revision": 4}, {"revision": 4}))
    story["C_from"] = 4
    story["C"]["responses"] = [r for r in story["C"]["responses"] if r["revision"] == 5]
    story["C"]["responses"].append({"revision": 5, "progress": True})
    kinds = [a.kind for a in _check(story).anomalies]
    assert kinds == ["watch-compaction-lost-event"], kinds


def _applied_again(s: Story, writes: int) -> None:
    """put m/b=5 delivered again at 6, by both streams that reach it; with
    `writes` 2 a second put of m/b=5 explains it (and the read sees it)."""
    again = {"revision": 6, "events": [{"key": "m/b", "revision": 6, "type": "PUT", "value": 5}]}
    s["A"]["responses"].append(again)
    s["C"]["responses"].append(copy.deepcopy(again))
    if writes == 2:
        s["writes"].append(("put", "m/b", 5, 6))
        s["read"] = {"value": 5, "mod_revision": 6, "revision": 6}


def test_a_write_delivered_at_two_revisions_is_applied_twice() -> None:
    """The planted `metastore.ignore-sessions` shape: one put, two applications."""
    story = _story()
    _applied_again(story, writes=1)
    result = _check(story)
    assert [a.kind for a in result.anomalies] == ["watch-write-applied-twice"]
    assert result.anomalies[0].revisions == [5, 6]
    assert "'m/b'=5 was delivered at revisions [5, 6], but only 1 operation(s)" in \
        result.anomalies[0].message  # fmt: skip
    twin = _story()
    _applied_again(twin, writes=2)
    assert _check(twin).valid is True, _check(twin).anomalies
