"""Node clock offsets for SSH hosts (harness.clock_offsets) and their use in placing
audit events (checkers.audit.place_events), without hosts: a fake control
answers `date +%s.%N` with a clock set off by a known amount."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest

from checkers.audit import load_audit, place_events, run_clock
from harness.clock_offsets import READ_BOOT_ID, READ_CLOCK, OffsetRecorder, local_boot_id, measure
from harness.synthetic import make_run
from harness.synthetic_story import NODES
from reports.data import clock_note, load_run_data

ROUND_TRIP_S = 0.02


@dataclass
class Answer:
    stdout: str


class SkewedHosts:
    """Each node's clock is the harness's plus its skew; a read takes ROUND_TRIP_S,
    half of it before the node reads its clock."""

    def __init__(self, skew_s: dict[str, float], boot_id: str = "remote-kernel") -> None:
        self.skew_s, self.boot_id = skew_s, boot_id

    def run(self, name: str, command: str, *, timeout_s: float = 5.0, check: bool = True) -> Any:
        if name not in self.skew_s:
            raise OSError(f"{name} is unreachable")
        if command == READ_BOOT_ID:
            return Answer(self.boot_id + "\n")
        assert command == READ_CLOCK
        time.sleep(ROUND_TRIP_S / 2)
        now = time.time() + self.skew_s[name]
        time.sleep(ROUND_TRIP_S / 2)
        return Answer(f"{now:.9f}\n")


def test_an_offset_is_the_node_clock_at_the_round_trips_midpoint() -> None:
    reading = measure(SkewedHosts({"n1": 135.0}), "n1", "start")
    assert reading["rtt_s"] >= ROUND_TRIP_S
    assert reading["offset_s"] == pytest.approx(135.0, abs=reading["rtt_s"] / 2)
    assert (reading["node"], reading["why"], reading["boot_id"]) == ("n1", "start", "remote-kernel")


@pytest.mark.skipif(not local_boot_id(), reason="this kernel has no boot id to read")
def test_nodes_share_the_monotonic_clock_only_on_the_harness_kernel(tmp_path: Path) -> None:
    """Docker on this machine: every node's boot id is ours; a remote Docker host's is not."""
    for boot_id, same in ((local_boot_id(), True), ("another-kernel", False)):
        hosts = SkewedHosts({"n1": 0.0, "n2": 0.0}, boot_id)
        recorder = OffsetRecorder(hosts, ["n1", "n2"], tmp_path / "timeline.json", {})
        recorder.measure_all("start")
        assert recorder.same_kernel() is same
    unread = OffsetRecorder(SkewedHosts({"n1": 0.0}, local_boot_id()), ["n1", "n2"],
                            tmp_path / "timeline.json", {})  # fmt: skip
    unread.measure_all("start")
    assert unread.same_kernel() is False  # n2 was not read: it cannot be assumed


def test_garbage_from_the_node_is_one_clear_error() -> None:
    class Garbage:
        def run(self, name: str, command: str, **_kw: Any) -> Any:
            return Answer("date: invalid option\n")

    with pytest.raises(ValueError, match="n1: `date"):
        measure(Garbage(), "n1", "start")


def test_the_recorder_keeps_the_anchor_and_notes_an_unreachable_node(tmp_path: Path) -> None:
    """Rounds at the start and after a restart op, not after other ops; a node it
    cannot read is an error noted, and the other nodes are still recorded."""
    timeline = tmp_path / "timeline.json"
    anchor = {"history_zero_wall": 1.7e9, "shared_monotonic": False}
    recorder = OffsetRecorder(SkewedHosts({"n1": -3.0, "n2": 40.0}), ["n1", "n2", "n3"],
                              timeline, anchor)  # fmt: skip
    recorder.measure_all("start")
    recorder.after("partition", "ok")
    recorder.after("start", "ok")
    recorder.join()
    doc = msgspec.json.decode(timeline.read_bytes())
    assert doc["history_zero_wall"] == 1.7e9
    assert doc["shared_monotonic"] is False
    assert [(r["node"], r["why"]) for r in doc["clock_offsets"]] == [
        ("n1", "start"), ("n2", "start"), ("n1", "after start"), ("n2", "after start")]  # fmt: skip
    assert [e.split(":")[0] for e in recorder.errors] == ["n3 (start)", "n3 (after start)"]


def _ssh_like(tmp_path: Path, skew_s: dict[str, float], offsets: bool) -> Path:
    """A synthetic run as an SSH run records it: nodes' walls off by their skew,
    no shared monotonic clock, and (when `offsets`) the measured offsets."""
    run = make_run(tmp_path, seed=8, ops=300).path
    zero = msgspec.json.decode((run / "timeline.json").read_bytes())["history_zero_wall"]
    for path in (run / "nodes").glob("*/events.jsonl"):
        events = [msgspec.json.decode(line) for line in path.read_bytes().splitlines()]
        for ev in events:
            ev["wall"] += skew_s.get(path.parent.name, 0.0)
            ev.pop("mono_origin_ns", None)
        path.write_bytes(b"".join(msgspec.json.encode(ev) + b"\n" for ev in events))
    readings = [{"node": node, "harness_wall": zero + at, "offset_s": skew_s.get(node, 0.0),
                 "rtt_s": 0.002} for node in NODES for at in (0.0, 15.0)]  # fmt: skip
    doc = {"history_zero_wall": zero, "shared_monotonic": False}
    (run / "timeline.json").write_bytes(
        msgspec.json.encode({**doc, "clock_offsets": readings} if offsets else doc)
    )
    return run


def test_events_of_ssh_nodes_are_placed_by_their_measured_offsets(tmp_path: Path) -> None:
    """n2's clock 135 s ahead, n4's 40 s behind: placed, their events are where the
    story put them (each node's `started` at history time 0)."""
    run = _ssh_like(tmp_path, {"n2": 135.0, "n4": -40.0}, offsets=True)
    audit = load_audit(run)
    assert audit is not None
    at = run_clock(run, audit)
    for node in ("n1", "n2", "n4"):
        assert at(audit[node][0]) == pytest.approx(0, abs=1_000), node
    assert audit["n2"][0]["node_wall"] - audit["n2"][0]["wall"] == pytest.approx(135.0)
    assert clock_note(load_run_data(run)) is None


def test_without_measured_offsets_the_report_says_lanes_may_be_offset(tmp_path: Path) -> None:
    run = _ssh_like(tmp_path, {"n2": 135.0}, offsets=False)
    note = clock_note(load_run_data(run))
    assert note is not None
    assert "no measured offset" in note


def test_an_unmeasured_node_keeps_its_wall() -> None:
    audit = {"n1": [{"kind": "started", "wall": 100.0}], "n9": [{"kind": "started", "wall": 7.0}]}
    readings = [{"node": "n1", "harness_wall": 99.0, "offset_s": 1.5}]
    assert place_events(audit, {"clock_offsets": readings}) == 1
    assert audit["n1"][0]["wall"] == 98.5
    assert audit["n9"][0] == {"kind": "started", "wall": 7.0}
