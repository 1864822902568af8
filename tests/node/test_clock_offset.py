"""ember.clock: the wall clock a clock fault moves, by the offset file the
nemesis writes (nemesis/clock.py), followed from the node's loop."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ember import clock
from ember.audit import AuditLog


@pytest.fixture(autouse=True)
def _no_offset() -> Iterator[None]:
    clock._offset_s = 0.0
    yield
    clock._offset_s = 0.0


def _write(path: Path, text: str) -> None:
    """As the nemesis writes it: a scratch file renamed over the offset file."""
    (path.parent / (path.name + ".tmp")).write_text(text)
    os.replace(path.parent / (path.name + ".tmp"), path)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("+0", 0.0), ("+1.250s\n", 1.25), ("-5.000s", -5.0), ("+7", 7.0), ("-0.010s", -0.01)],
)
def test_offsets_in_the_nemesis_format_parse(text: str, seconds: float) -> None:
    assert clock.parse_offset(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text", ["", "5s", "+abc", "@2026-01-01 00:00:00", "+inf", "-infs", "+nan"]
)
def test_anything_else_is_refused_and_the_offset_stays(text: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        clock.parse_offset(text)
    path = tmp_path / "clock-offset"
    _write(path, "+3s")
    assert clock.read_offset(path) == 3.0
    _write(path, text)
    assert clock.read_offset(path) == 3.0


def test_no_file_is_no_offset(tmp_path: Path) -> None:
    path = tmp_path / "clock-offset"
    _write(path, "+3s")
    clock.read_offset(path)
    path.unlink()
    assert clock.read_offset(path) == 0.0
    assert abs(clock.wall() - time.time()) < 0.05


def test_a_followed_file_moves_the_wall_clock_and_the_audit_wall(tmp_path: Path) -> None:
    path = tmp_path / "clock-offset"
    audit = AuditLog(tmp_path / "events.jsonl", "n1")

    async def scenario() -> list[float]:
        follower = asyncio.create_task(clock.follow_offset_file(path))
        seen = []
        for text in ("-5.000s", "+2.500s", "+0"):
            _write(path, text)
            await asyncio.sleep(clock.OFFSET_POLL_S * 5)
            seen.append(round(clock.wall() - time.time(), 2))
            audit.record({"kind": "probe"})
        follower.cancel()
        return seen

    assert asyncio.run(scenario()) == [-5.0, 2.5, 0.0]
    audit.close()
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    walls = [ev["wall"] for ev in events]
    assert walls[0] < time.time() - 4.5
    assert walls[1] > time.time() + 2.0
    # What the fault added, for readers placing walls by the host's clock.
    assert [ev.get("clock_offset_s") for ev in events] == [-5.0, 2.5, None]


def test_a_file_that_cannot_be_stated_does_not_end_the_follower(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stat failing with another OSError than ENOENT (EACCES, EIO) is "no
    stamp", and the follower goes on to see the next offset."""
    path = tmp_path / "clock-offset"
    real_stat = os.stat
    failing = {"on": False}

    def stat(target: object, *args: object, **kwargs: object) -> os.stat_result:
        if failing["on"] and Path(str(target)) == path:
            raise PermissionError(13, "Permission denied", str(target))
        return real_stat(target, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(clock.os, "stat", stat)

    async def scenario() -> float:
        follower = asyncio.create_task(clock.follow_offset_file(path))
        try:
            failing["on"] = True
            await asyncio.sleep(clock.OFFSET_POLL_S * 5)
            assert not follower.done()
            failing["on"] = False
            _write(path, "+4s")
            await asyncio.sleep(clock.OFFSET_POLL_S * 10)
            return clock._offset_s
        finally:
            follower.cancel()

    assert asyncio.run(scenario()) == 4.0
