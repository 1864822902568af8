"""Parsing, validating and pairing history.jsonl."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from checkers.history import Event, HistoryError, RawEvent, load_history, pair, validate
from tests.checkers.helpers import HistoryBuilder


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "history.jsonl"
    path.write_text(text)
    return path


def test_valid_history_loads_every_event(tmp_path: Path) -> None:
    """A well-formed history decodes into Events in file order."""
    h = HistoryBuilder().op(0, "write", key="k", value=1).op(1, "read", key="k", result=1)
    path = tmp_path / "history.jsonl"
    path.write_bytes(h.lines() + b"\n")  # a trailing blank line is fine
    events = load_history(path)
    assert [e.index for e in events] == [0, 1, 2, 3]
    assert events[3].value == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"index": 0, "time": 1, "process": 0, "type": "invoke", "f": "read"}\nnot json\n',
         "line 2: JSON is malformed"),
        ('{"index": "x", "time": 1, "process": 0, "type": "invoke", "f": "read"}\n',
         "line 1: Expected `int`, got `str` - at `$.index`"),
        ('{"index": 0, "time": 1, "process": 0, "type": "begin", "f": "read"}\n',
         "line 1: Invalid enum value 'begin' - at `$.type`"),
        ('{"index": 0, "time": 1, "type": "invoke", "f": "read"}\n',
         "line 1: Object missing required field `process`"),
    ],
)  # fmt: skip
def test_malformed_line_is_named_with_its_number(tmp_path: Path, text: str, expected: str) -> None:
    """A line that is not a valid event fails with its line number and the field at fault."""
    with pytest.raises(HistoryError, match=r"history\.jsonl") as err:
        load_history(_write(tmp_path, text))
    assert expected in str(err.value)


def _ev(index: int, time_ns: int, process: object, type_: str, f: str = "read") -> str:
    return (
        f'{{"index": {index}, "time": {time_ns}, "process": {process!r}, "type": "{type_}",'
        f' "f": "{f}"}}\n'.replace("'", '"')
    )


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        ([_ev(0, 1, 0, "invoke"), _ev(1, 2, 0, "invoke")],
         "line 2: process 0 invokes again before its invoke on line 1 completed"),
        ([_ev(0, 1, 0, "ok")], "line 1: ok from process 0 without an open invoke"),
        ([_ev(0, 1, 0, "invoke"), _ev(1, 2, 0, "info"), _ev(2, 3, 0, "invoke")],
         "line 3: process 0 invokes after its info on line 2"),
        ([_ev(0, 5, 0, "invoke"), _ev(1, 4, 0, "ok")], "line 2: time 4 goes back"),
        ([_ev(3, 1, 0, "invoke"), _ev(3, 2, 0, "ok")], "line 2: index 3 does not increase"),
        ([_ev(0, 1, 0, "invoke"), _ev(1, 2, 0, "ok", "write")],
         "line 2: completion f='write' does not match invoke f='read'"),
    ],
)  # fmt: skip
def test_history_breaking_format_rules_is_rejected(
    tmp_path: Path, lines: list[str], expected: str
) -> None:
    """Each rule of the history format is enforced with the offending line named."""
    with pytest.raises(HistoryError) as err:
        load_history(_write(tmp_path, "".join(lines)))
    assert expected in str(err.value)


def test_nemesis_may_invoke_again_after_info(tmp_path: Path) -> None:
    """The nemesis ends faults with info yet keeps injecting; clients may not."""
    lines = [_ev(i, i, "nemesis", t, "kill") for i, t in enumerate(["invoke", "info"] * 2)]
    assert len(load_history(_write(tmp_path, "".join(lines)))) == 4


def test_validate_checks_in_memory_events() -> None:
    """validate applies the same rules to Events built in memory."""
    events = [Event(index=0, time=0, process=1, type="ok", f="read")]
    with pytest.raises(HistoryError, match="line 1: ok from process 1"):
        validate(events)


def test_pair_matches_invokes_with_completions_and_leaves_open_ones_info() -> None:
    """Concurrent ops pair per process; an open invoke becomes info without completion."""
    h = HistoryBuilder()
    h.add(0, "invoke", "write", key="a", value=1).add(1, "invoke", "read", key="a")
    h.add(1, "ok", "read", key="a", value=1, revision=7).add(0, "fail", "write", key="a", value=1)
    h.add(2, "invoke", "cas", key="a", value=[1, 2])
    ops = pair([Event(**e) for e in h.events])
    assert [(o.f, o.type, o.invoke_index, o.complete_index) for o in ops] == [
        ("write", "fail", 0, 3),
        ("read", "ok", 1, 2),
        ("cas", "info", 4, None),
    ]
    assert ops[1].result == 1
    assert ops[1].revision == 7
    assert ops[2].complete_time is None


def test_large_history_loads_fast(tmp_path: Path) -> None:
    """100k events load, validate and pair in well under two seconds of CPU."""
    h = HistoryBuilder()
    for i in range(50_000):
        h.op(i % 10, "write", key=f"k{i % 7}", value=i)
    path = tmp_path / "history.jsonl"
    path.write_bytes(h.lines())
    # CPU time, not wall: the suite shares its machine with other jobs.
    started = time.process_time()
    events = load_history(path)
    ops = pair(events)
    elapsed = time.process_time() - started
    assert len(ops) == 50_000
    assert elapsed < 2.0, f"took {elapsed:.2f}s"


def test_torn_last_line_is_skipped_with_a_note(tmp_path: Path) -> None:
    """A last line cut short (no newline) is skipped when notes are kept."""
    good = '{"index": 0, "time": 0, "process": 0, "type": "invoke", "f": "read"}\n'
    path = _write(tmp_path, good + '{"index": 1, "time": 5, "proc')
    notes: list[str] = []
    assert len(load_history(path, notes)) == 1
    assert "line 2 is torn" in notes[0]
    with pytest.raises(HistoryError, match="line 2"):
        load_history(path)  # without notes: refused, as before


def test_corrupt_middle_line_is_refused_even_with_notes(tmp_path: Path) -> None:
    """A bad line that is not the last one (it has its newline) is refused."""
    good = '{"index": 0, "time": 0, "process": 0, "type": "invoke", "f": "read"}\n'
    path = _write(tmp_path, good + '{"index": 1, "ti\n' + good.replace('"index": 0', '"index": 2'))
    with pytest.raises(HistoryError, match="line 2"):
        load_history(path, [])


def test_raw_event_types_every_field_as_event_does() -> None:
    """RawEvent must refuse exactly what Event refuses (readers take Event's
    words for a line RawEvent refused): same fields, types and defaults, only
    `value` kept raw."""

    def shape(struct: Any) -> dict[str, tuple[Any, bool]]:
        return {f.name: (f.type, f.required) for f in msgspec.structs.fields(struct)}

    raw, event = shape(RawEvent), shape(Event)
    assert raw.pop("value") == (msgspec.Raw, False)
    assert event.pop("value")[1] is False
    assert raw == event
