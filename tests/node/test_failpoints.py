"""The failpoint registry: validation, firing rules and toggle reports."""

from __future__ import annotations

import random
from typing import Any

import pytest

from ember.failpoints import CRASH_POINTS, FailpointError, Failpoints


def _registry() -> tuple[Failpoints, list[tuple[str, bool]]]:
    toggles: list[tuple[str, bool]] = []

    def on_toggle(name: str, enabled: bool, params: dict[str, Any]) -> None:
        toggles.append((name, enabled))

    return Failpoints(random.Random(1), on_toggle), toggles


@pytest.mark.parametrize(
    ("name", "params", "fragment"),
    [
        ("nope", {}, "unknown failpoint"),
        ("raft.append.delay", {"delay_ms": -1}, "delay_ms"),
        ("raft.append.delay", {"delay_ms": True}, "delay_ms"),
        ("raft.append.drop", {"probability": 2}, "probability"),
        ("raft.append.drop", {"peer": 3}, "peer"),
        ("raft.append.drop", {"one_shot": "yes"}, "one_shot"),
        ("raft.append.drop", {"bogus": 1}, "unknown parameter"),
        ("crash", {}, "crash needs point"),
        ("crash", {"point": "nowhere"}, "crash needs point"),
        ("raft.append.drop", {"point": CRASH_POINTS[0]}, "only to the crash"),
    ],
)
def test_invalid_failpoint_is_refused_naming_the_problem(
    name: str, params: dict[str, Any], fragment: str
) -> None:
    """A bad name or parameter raises FailpointError that says which."""
    fps, toggles = _registry()
    with pytest.raises(FailpointError, match=fragment):
        fps.enable(name, params)
    assert toggles == []
    assert not fps.any_enabled


def test_peer_filter_and_one_shot() -> None:
    """A peer-scoped failpoint fires only for that peer; a one-shot switches off after firing."""
    fps, toggles = _registry()
    fps.enable("raft.append.drop", {"peer": "n2", "one_shot": True})
    assert fps.hit("raft.append.drop", peer="n3") is None
    fp = fps.hit("raft.append.drop", peer="n2")
    assert fp is not None
    assert fp.hits == 1
    assert fps.hit("raft.append.drop", peer="n2") is None
    assert toggles == [("raft.append.drop", True), ("raft.append.drop", False)]


def test_probability_is_drawn_from_the_seeded_rng() -> None:
    """The same seed fires on the same hits; probability 0.5 fires some but not all."""

    def pattern() -> list[bool]:
        fps = Failpoints(random.Random(7))
        fps.enable("raft.message.drop", {"probability": 0.5})
        return [fps.hit("raft.message.drop", peer="n2") is not None for _ in range(64)]

    first = pattern()
    assert first == pattern()
    assert 0 < sum(first) < 64


def test_crash_fires_only_at_its_point_and_disable_reports() -> None:
    """crash matches its named point only; disable says whether it was on."""
    fps, toggles = _registry()
    fps.enable("crash", {"point": "after-persist"})
    assert fps.hit("crash", point="before-persist") is None
    assert fps.hit("crash", point="after-persist") is not None
    assert fps.disable("crash") is True
    assert fps.disable("crash") is False
    assert fps.list()["crash"]["enabled"] is False
    assert toggles == [("crash", True), ("crash", False)]
