"""The pure metastore state: revisions, invoke, past reads, watches, compaction."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from checkers.linearizability.metastore import MetastoreModel
from checkers.linearizability.models import ILLEGAL
from checkers.linearizability.types import LinOp
from ember.metastore import Compacted, MetaState, MetastoreError, MetastoreMachine, encode
from ember.raft import Entry

KEYS = ["a", "b", "z.1", "z.2"]
keys = st.sampled_from(KEYS)
values = st.integers(0, 3)
conds = st.fixed_dictionaries(
    {
        "key": keys,
        "target": st.sampled_from(["exists", "value", "mod_revision", "version"]),
        "op": st.sampled_from(["eq", "ne", "lt", "gt"]),
        "value": values,
    }
)
writes = st.one_of(
    st.fixed_dictionaries({"op": st.just("put"), "key": keys, "value": values}),
    st.fixed_dictionaries({"op": st.just("delete"), "key": keys}),
)
ops = st.one_of(
    st.tuples(st.just("put"), keys, values),
    st.tuples(st.just("delete"), keys, st.none()),
    st.tuples(st.just("get"), keys, st.none()),
    st.tuples(
        st.just("invoke"),
        st.none(),
        st.fixed_dictionaries(
            {
                "if": st.lists(conds, max_size=2),
                "then": st.lists(writes, max_size=3),
                "else": st.lists(writes, max_size=2),
            }
        ),
    ),
)


def run(state: MetaState, f: str, key: Any, arg: Any) -> Any:
    """One op on the state, answered in the model's output shape."""
    if f == "put":
        return state.put(key, arg)
    if f == "delete":
        return state.delete(key)
    if f == "get":
        return state.get(key)
    return state.invoke(arg)


@given(st.lists(ops, max_size=30))
def test_state_agrees_with_the_linearizability_model(seq: list[tuple[str, Any, Any]]) -> None:
    """Every answer the state gives is the one the checker's sequential model allows."""
    model = MetastoreModel()
    mstate = model.init()
    state = MetaState()
    for i, (f, key, arg) in enumerate(seq):
        out = run(state, f, key, arg)
        op = LinOp(id=i, process=0, call=2 * i, ret=2 * i + 1, f=f, key=key, input=arg,
                   output=out, known=True)  # fmt: skip
        mstate = model.step(mstate, op)
        assert mstate is not ILLEGAL, (f, key, arg, out)
    assert mstate[0] == state.revision


@given(st.lists(ops, max_size=30), st.data())
def test_range_at_a_past_revision_is_the_state_then(seq: list[Any], data: st.DataObject) -> None:
    """A read at revision r equals the live map as it was when the revision was r."""
    state = MetaState()
    seen: dict[int, dict[str, Any]] = {0: {}}
    for f, key, arg in seq:
        run(state, f, key, arg)
        seen[state.revision] = {k: r.value for k, r in state.kv.items()}
    rev = data.draw(st.integers(0, state.revision))
    got = state.range(prefix="", revision=rev)
    assert {kv["key"]: kv["value"] for kv in got["kvs"]} == seen[rev]


@given(st.lists(ops, max_size=30), st.integers(1, 40), st.sampled_from(["", "z.", "a"]))
def test_watch_delivers_every_write_in_order_once(seq: list[Any], start: int, prefix: str) -> None:
    """A watch from r yields each write to its range at revision >= r, in order, once."""
    state = MetaState()
    expected: list[tuple[str, int]] = []
    for f, key, arg in seq:
        before = {k: (r.mod_revision) for k, r in state.kv.items()}
        out = run(state, f, key, arg)
        # Keys put by this op count even if a later write in it deleted them.
        put = {key} if f == "put" else set()
        if f == "invoke":
            branch = arg["then"] if out["succeeded"] else arg["else"]
            put = {w["key"] for w in branch if w["op"] == "put"}
        for k in sorted(set(before) | set(state.kv) | put):
            now = state.kv[k].mod_revision if k in state.kv else None
            touched = now != before.get(k) or k in put
            if touched and k.startswith(prefix) and state.revision >= start:
                expected.append((k, state.revision))
    got = [(ev.key, ev.revision) for ev in state.watch_events(start, prefix=prefix)]
    assert sorted(got, key=lambda p: p[1]) == got
    assert sorted(got) == sorted(expected)


def test_invoke_takes_the_first_branch_whose_conditions_hold() -> None:
    """The multi-branch invoke runs exactly one branch, else when none holds."""
    state = MetaState()
    state.put("x", 1)
    spec = {
        "branches": [
            {"if": [{"key": "x", "target": "value", "value": 2}], "then": [
                {"op": "put", "key": "y", "value": "first"}]},
            {"if": [{"key": "x", "target": "mod_revision", "op": "lt", "value": 5}], "then": [
                {"op": "put", "key": "y", "value": "second"}]},
        ],
        "else": [{"op": "put", "key": "y", "value": "else"}],
    }  # fmt: skip
    assert state.invoke(spec) == {"succeeded": False, "branch": 1, "revision": 2}
    assert state.get("y")["value"] == "second"
    state.put("x", 9)
    state.put("x", 9)
    state.put("x", 9)
    assert state.invoke(spec)["branch"] == -1
    assert state.get("y")["value"] == "else"


def test_one_invoke_bumps_the_revision_once_and_keeps_key_revisions() -> None:
    """Many writes in one invoke share one revision; create/mod/version follow."""
    state = MetaState()
    state.put("a", 1)
    out = state.invoke({"then": [{"op": "put", "key": "a", "value": 2},
                                 {"op": "put", "key": "b", "value": 3}]})  # fmt: skip
    assert out == {"succeeded": True, "branch": 0, "revision": 2}
    a, b = state.get("a"), state.get("b")
    assert (a["create_revision"], a["mod_revision"], a["version"]) == (1, 2, 2)
    assert (b["create_revision"], b["mod_revision"], b["version"]) == (2, 2, 1)
    assert state.delete("nope") == 2


def test_compacted_revisions_raise_a_clear_error() -> None:
    """After compaction at c, reads and watches from below c name the limit; a
    watch from c itself is served from c, as etcd serves it (G9)."""
    state = MetaState()
    for i in range(5):
        state.put("k", i)
    state.compact(3)
    assert state.range(key="k", revision=3)["kvs"][0]["value"] == 2
    assert [e.revision for e in state.watch_events(4, key="k")] == [4, 5]
    with pytest.raises(Compacted, match="revision 2 is compacted"):
        state.range(key="k", revision=2)
    assert [e.revision for e in state.watch_events(3, key="k")] == [3, 4, 5]
    with pytest.raises(Compacted, match="compacted up to 3"):
        state.watch_events(2, key="k")
    with pytest.raises(MetastoreError, match="current revision 5"):
        state.compact(9)


def test_malformed_invokes_name_the_bad_part() -> None:
    """A bad condition or write is a MetastoreError naming it, and changes nothing."""
    state = MetaState()
    with pytest.raises(MetastoreError, match="target"):
        state.invoke({"if": [{"key": "a", "target": "colour", "value": 1}]})
    with pytest.raises(MetastoreError, match="put needs a value"):
        state.invoke({"then": [{"op": "put", "key": "a"}]})
    assert state.revision == 0


def test_machine_applies_commands_snapshots_and_compacts_alike() -> None:
    """Replicas applying the same entries agree; a snapshot restores the same state."""
    a, b = MetastoreMachine(retain=3), MetastoreMachine(retain=3)
    cmds = [{"op": "put", "key": f"k{i % 2}", "value": i} for i in range(8)]
    cmds.append({"op": "bogus"})
    for i, cmd in enumerate(cmds, start=1):
        entry = Entry(index=i, term=1, kind="normal", data=encode(cmd))
        ra, rb = a.apply(entry), b.apply(entry)
        assert ra == rb
    assert ra == {"error": "unknown metastore op 'bogus'"}
    assert a.digest == b.digest
    assert a.state.compact_revision == 3  # compacted at revision 6: 6 - retain
    c = MetastoreMachine()
    c.restore(a.snapshot(), a.applied)
    assert (c.state, c.digest) == (a.state, a.digest)
