"""The metastore machine's client sessions (ember.metastore.sessions): a
repeat answers the first result, a command no longer awaited never applies,
sessions ride in snapshots and are forgotten alike on every replica."""

from __future__ import annotations

from typing import Any

import pytest

from ember.metastore import sessions
from ember.metastore.machine import MetastoreMachine, encode
from ember.raft import Entry


def _apply(machine: MetastoreMachine, cmd: dict[str, Any]) -> Any:
    return machine.apply(Entry(term=1, index=machine.applied + 1, data=encode(cmd)))


def _put(key: str, value: Any, client: str, seq: int, lowest_open: int) -> dict[str, Any]:
    session = {"client": client, "seq": seq, "lowest_open": lowest_open}
    return {"op": "put", "key": key, "value": value, "session": session}


def test_a_repeat_answers_the_first_result_even_after_other_writes() -> None:
    m = MetastoreMachine()
    first = _apply(m, _put("a", 1, "c1", 1, 1))
    _apply(m, _put("a", 2, "c2", 1, 1))  # another client writes between
    again = _apply(m, _put("a", 1, "c1", 1, 1))
    assert first == again == {"revision": 1}
    assert (m.state.kv["a"].value, m.state.revision) == (2, 2)


def test_a_command_no_longer_awaited_is_not_applied() -> None:
    """A late copy of command 1, after the client moved past it, answers
    stale-request and leaves the store as it was."""
    m = MetastoreMachine()
    _apply(m, _put("b", 1, "c1", 2, 2))  # command 1 given up, 2 applied
    late = _apply(m, _put("a", 1, "c1", 1, 1))
    assert late["code"] == sessions.STALE
    assert "not applied" in late["error"]
    assert "a" not in m.state.kv
    assert m.state.revision == 1


def test_results_below_lowest_open_are_forgotten() -> None:
    m = MetastoreMachine()
    for seq in (1, 2, 3):
        _apply(m, _put(f"k{seq}", seq, "c1", seq, 1))
    assert sorted(m.sessions.clients["c1"].results) == [1, 2, 3]
    _apply(m, _put("k4", 4, "c1", 4, 3))
    assert sorted(m.sessions.clients["c1"].results) == [3, 4]


def test_sessions_ride_in_the_snapshot() -> None:
    m = MetastoreMachine()
    _apply(m, _put("a", 1, "c1", 1, 1))
    copy = MetastoreMachine()
    copy.restore(m.snapshot(), m.applied)
    assert _apply(copy, _put("a", 1, "c1", 1, 1)) == {"revision": 1}
    assert copy.state.revision == 1


def test_idle_clients_are_forgotten_at_the_same_entry_everywhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sessions, "SESSION_RETAIN", 6)
    monkeypatch.setattr(sessions, "SWEEP_EVERY", 4)
    replicas = [MetastoreMachine(), MetastoreMachine()]
    for m in replicas:
        _apply(m, _put("a", 1, "old", 1, 1))  # index 1
        for i in range(2, 8):
            _apply(m, _put("b", i, "busy", i, i))
        assert "old" in m.sessions.clients  # index 7: the sweep at 4 kept it
        _apply(m, _put("b", 8, "busy", 8, 8))  # index 8: idle since 1 > 6 entries
        assert sorted(m.sessions.clients) == ["busy"]
    assert replicas[0].snapshot() == replicas[1].snapshot()


@pytest.mark.parametrize(
    ("session", "says"),
    [
        ("c1", "session must be an object"),
        ({"client": "", "seq": 1, "lowest_open": 1}, "client must be a string of 1 to 200"),
        ({"client": "c1", "seq": 0, "lowest_open": 1}, "1 <= lowest_open <= seq"),
        ({"client": "c1", "seq": 2, "lowest_open": 3}, "1 <= lowest_open <= seq"),
        ({"client": "c1", "seq": True, "lowest_open": 1}, "1 <= lowest_open <= seq"),
    ],
)
def test_a_malformed_session_is_an_error_and_applies_nothing(session: Any, says: str) -> None:
    m = MetastoreMachine()
    out = _apply(m, {"op": "put", "key": "a", "value": 1, "session": session})
    assert says in out["error"]
    assert m.state.revision == 0
