"""Pairing many processes at once (pipeline/pairing.py) gives the operations,
and the problems, that pairing each process through the checkers' own
validator and `pair` gives, on histories that keep or break each rule."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.pairing import OP_COLUMNS, from_json, pair_process, pair_processes
from pipeline.precheck import _EVENT_FIELDS
from pipeline.schemas import arrow_type

_FIELDS = [(name, kind) for name, kind in _EVENT_FIELDS if name != "error"]
PROCESSES = [("1", True), ("2", True), ("10", True), ("nemesis", False), ("5", True),
             ("5", False)]  # fmt: skip


@st.composite
def histories(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    """Events of one to three processes, interleaved, invoke and completion in
    turn, but now and then with one rule broken: a type out of turn, another
    f, an index repeated, time going back (an info followed by more events
    is itself one for a client)."""
    procs = draw(st.lists(st.sampled_from(PROCESSES), min_size=1, max_size=3, unique=True))
    rows: list[tuple[Any, ...]] = []
    index = now = 0
    open_: dict[tuple[str, bool], str] = {}  # process -> its open invoke's f
    for line in range(1, draw(st.integers(0, 30)) + 1):
        proc = draw(st.sampled_from(procs))
        defect = draw(st.sampled_from([None] * 6 + ["turn", "f", "index", "time"]))
        index += 0 if defect == "index" else 1
        now += -3 if defect == "time" else draw(st.sampled_from([0, 10]))
        opening = (proc not in open_) != (defect == "turn")
        f = draw(st.sampled_from(["get", "put"])) if proc not in open_ else open_[proc]
        if defect == "f":
            f = "put" if f == "get" else "get"
        type_ = "invoke" if opening else draw(st.sampled_from(["ok", "fail", "info"]))
        if type_ == "invoke":
            open_[proc] = f
        else:
            open_.pop(proc, None)
        key = draw(st.sampled_from([None, "a", "b"]))
        value = draw(st.sampled_from([None, "1", '{"x": [1, 2]}', "null", '"s"']))
        revision = draw(st.sampled_from([None, 3, 2**62]))
        rows.append((line, index, now, *proc, type_, f, key, value, revision))
    return rows


def _frame(rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    """The events as per_group hands them on: via Arrow, sorted by process then index."""
    schema = pa.schema([(name, arrow_type(kind)) for name, kind in _FIELDS])
    names = [name for name, _ in _FIELDS]
    order = ["line", "idx", "time", "process", "is_client", "type", "f", "key", "value",
             "revision"]  # fmt: skip
    columns = dict(zip(order, zip(*rows, strict=True), strict=True)) if rows else {}
    table = pa.table({n: pa.array(list(columns.get(n, [])), schema.field(n).type)
                      for n in names})  # fmt: skip
    frame = table.to_pandas()
    return frame.sort_values(["process", "idx"], kind="stable", ignore_index=True)


def _canonical(frame: pd.DataFrame) -> list[tuple[Any, ...]]:
    """Rows comparable across both: JSON texts decoded, missing values as None."""
    out = []
    for row in frame[OP_COLUMNS].astype(object).itertuples(index=False):
        fields = dict(zip(OP_COLUMNS, row, strict=True))
        fields = {k: (None if v is None or v is pd.NA or v != v else v) for k, v in fields.items()}
        for name in ("value", "result"):
            fields[name] = repr(from_json(fields[name]))
        out.append(tuple(fields[c] for c in OP_COLUMNS))
    return sorted(out, key=repr)


def _one_by_one(frame: pd.DataFrame) -> pd.DataFrame:
    rows = [r for _, one in frame.groupby("process", sort=False) for r in pair_process(one)]
    return pd.DataFrame(rows, columns=OP_COLUMNS)


@given(histories())
def test_many_processes_at_once_pair_as_one_at_a_time(rows: list[tuple[Any, ...]]) -> None:
    frame = _frame(rows)
    assert _canonical(pair_processes(frame)) == _canonical(_one_by_one(frame))


def test_an_open_invoke_is_info_and_fields_come_from_the_completion_first() -> None:
    rows = [
        (1, 0, 0, "1", True, "invoke", "put", "a", "7", 4),
        (2, 1, 1, "1", True, "ok", "put", None, None, 9),
        (3, 2, 2, "1", True, "invoke", "get", "a", None, None),
    ]  # fmt: skip
    out = pair_processes(_frame(rows))
    assert out["type"].tolist() == ["ok", "info"]
    assert out["key"].tolist() == ["a", "a"]  # the invoke's key where the completion has none
    assert out["revision"].tolist()[0] == 9  # the completion's revision wins
    assert out["revision"].isna().tolist() == [False, True]
    assert out["complete_index"].isna().tolist() == [False, True]
    assert out["problem"].isna().all()


def test_a_process_breaking_a_rule_gets_the_validators_words() -> None:
    rows = [
        (1, 0, 0, "3", True, "invoke", "put", "a", "1", None),
        (2, 1, 1, "3", True, "ok", "get", "a", None, None),
        (3, 2, 2, "4", True, "invoke", "get", "b", None, None),
    ]  # fmt: skip
    out = pair_processes(_frame(rows))
    problems = out["problem"].dropna().tolist()
    assert problems == ["process 3: line 2: completion f='get' does not match invoke f='put'"]
    assert out[out["problem"].isna()]["process"].tolist() == ["4"]


def test_a_name_both_a_client_and_not_is_paired_as_one_process_at_a_time() -> None:
    """Client 5 and the process "5" share a name, so one group: its first event
    says whether it is a client, as it always did."""
    rows = [
        (1, 1, 0, "5", False, "invoke", "get", "a", None, None),
        (2, 2, 0, "5", False, "ok", "get", "a", None, None),
        (3, 3, 0, "5", True, "invoke", "get", "a", None, None),
        (4, 4, 0, "5", True, "ok", "get", "a", None, None),
    ]  # fmt: skip
    frame = _frame(rows)
    assert pair_processes(frame)["is_client"].tolist() == [False, False]
    assert _canonical(pair_processes(frame)) == _canonical(_one_by_one(frame))


# One history per rule, so that each is held whatever examples hypothesis draws.
_BROKEN = {
    "out of turn": [("ok", "get", 1, 0), ("invoke", "get", 2, 0)],
    "another f": [("invoke", "get", 1, 0), ("ok", "put", 2, 0)],
    "index repeated": [("invoke", "get", 1, 0), ("ok", "get", 1, 0)],
    "time back": [("invoke", "get", 1, 5), ("ok", "get", 2, 4)],
    "invoke after info": [("invoke", "get", 1, 0), ("info", "get", 2, 0),
                          ("invoke", "get", 3, 0), ("ok", "get", 4, 0)],
}  # fmt: skip


@pytest.mark.parametrize("rule", sorted(_BROKEN))
def test_each_broken_rule_goes_to_the_validator(rule: str) -> None:
    rows = [(line, idx, now, "7", True, type_, f, "a", None, None)
            for line, (type_, f, idx, now) in enumerate(_BROKEN[rule], start=1)]  # fmt: skip
    frame = _frame(rows)
    out = pair_processes(frame)
    assert len(out) == 1, out
    assert out["problem"].notna().all(), out
    assert _canonical(out) == _canonical(_one_by_one(frame))
