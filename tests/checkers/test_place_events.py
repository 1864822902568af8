"""Audit events are ordered by when they happened, not by what a node's clock
said: `checkers.audit.place_events` sets `wall` from the monotonic clock the
nodes share with the harness (docs/events.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from checkers.audit import load_audit, place_events

S = 1_000_000_000
ZERO_WALL, ZERO_MONO = 1_767_225_600.0, 50 * S


def _ev(kind: str, mono_s: float, wall: float, origin_s: float | None = None) -> dict[str, Any]:
    ev: dict[str, Any] = {"kind": kind, "mono_ns": int(mono_s * S), "wall": wall}
    if origin_s is not None:
        ev["mono_origin_ns"] = int(origin_s * S)
    return ev


def _timeline(shared: bool = True) -> dict[str, Any]:
    return {"history_zero_wall": ZERO_WALL, "history_zero_mono_ns": ZERO_MONO,
            "shared_monotonic": shared}  # fmt: skip


def test_a_skewed_clock_does_not_reorder_events() -> None:
    """n2's wall clock runs 10 s behind: by its walls its event came first; by the
    shared monotonic clock (process started at mono 40 s) it came after n1's."""
    audit = {
        "n1": [_ev("started", 0.0, ZERO_WALL - 10, origin_s=40), _ev("a", 12.0, ZERO_WALL + 2)],
        "n2": [_ev("started", 0.0, ZERO_WALL - 20, origin_s=40), _ev("b", 13.0, ZERO_WALL - 7)],
    }
    assert place_events(audit, _timeline()) == 4
    a, b = audit["n1"][1], audit["n2"][1]
    assert (a["wall"], b["wall"]) == (ZERO_WALL + 2, ZERO_WALL + 3)
    assert b["node_wall"] == ZERO_WALL - 7  # the node's own reading is kept


def test_each_process_has_its_own_origin() -> None:
    """A restart starts mono_ns at zero again with a new origin; events of a
    process whose origin is unknown keep their wall."""
    audit = {"n1": [
        _ev("x", 5.0, 111.0),  # no origin yet (an older run's prefix): kept
        _ev("started", 0.0, 1.0, origin_s=50), _ev("y", 1.0, 2.0),
        _ev("started", 0.0, 3.0, origin_s=70), _ev("z", 0.5, 4.0),
    ]}  # fmt: skip
    place_events(audit, _timeline())
    assert [e["wall"] for e in audit["n1"]] == [111.0, ZERO_WALL, ZERO_WALL + 1,
                                                ZERO_WALL + 20, ZERO_WALL + 20.5]  # fmt: skip


def test_hosts_with_clocks_of_their_own_keep_their_walls() -> None:
    """SSH hosts do not share the harness's monotonic clock; old runs lack the fields."""
    audit = {"n1": [_ev("started", 0.0, 7.0, origin_s=40)]}
    assert place_events(audit, _timeline(shared=False)) == 0
    assert place_events(audit, {"history_zero_wall": ZERO_WALL}) == 0
    assert audit["n1"][0]["wall"] == 7.0


def test_load_audit_places_by_the_runs_timeline(tmp_path: Path) -> None:
    (tmp_path / "nodes" / "n1").mkdir(parents=True)
    lines = [_ev("started", 0.0, 1.0, origin_s=50), _ev("y", 2.0, 2.0)]
    (tmp_path / "nodes" / "n1" / "events.jsonl").write_text(
        "".join(json.dumps(e) + "\n" for e in lines)
    )
    (tmp_path / "timeline.json").write_text(json.dumps(_timeline()))
    audit = load_audit(tmp_path)
    assert audit is not None
    assert audit["n1"][1]["wall"] == ZERO_WALL + 2


def test_a_process_from_another_kernel_is_not_placed_by_our_monotonic_clock() -> None:
    """Every event gets its process's boot id; one whose boot id is not the
    harness's keeps its wall even when the run says clocks are shared."""
    audit = {"n1": [
        {**_ev("started", 0.0, 1.0, origin_s=40), "boot_id": "ours"}, _ev("a", 12.0, 2.0),
        {**_ev("started", 0.0, 3.0, origin_s=40), "boot_id": "theirs"}, _ev("b", 12.0, 4.0),
    ]}  # fmt: skip
    timeline = {**_timeline(), "harness_boot_id": "ours"}
    assert place_events(audit, timeline) == 2
    a, b = audit["n1"][1], audit["n1"][3]
    assert (a["boot_id"], a["wall"]) == ("ours", ZERO_WALL + 2)
    assert (b["boot_id"], b["wall"]) == ("theirs", 4.0)
    assert "node_wall" not in b


def test_a_process_naming_our_kernel_is_placed_by_our_clock_even_if_the_run_is_unsure() -> None:
    """shared_monotonic false (a node's boot id was not read at the start): the
    process naming the harness's kernel is still placed by the monotonic clock,
    another by its node's measured offset, one naming nothing keeps its wall."""
    audit = {
        "n1": [{**_ev("started", 0.0, 1.0, origin_s=40), "boot_id": "ours"}, _ev("a", 12.0, 2.0)],
        "n2": [{**_ev("started", 0.0, 30.0, origin_s=40), "boot_id": "theirs"}],
        "n3": [_ev("started", 0.0, 5.0, origin_s=40)],
    }
    reading = {"node": "n2", "harness_wall": 29.0, "offset_s": 1.5, "rtt_s": 0.01}
    timeline = {**_timeline(shared=False), "harness_boot_id": "ours", "clock_offsets": [reading]}
    assert place_events(audit, timeline) == 3
    assert audit["n1"][1]["wall"] == ZERO_WALL + 2
    assert audit["n2"][0]["wall"] == 28.5
    assert audit["n3"][0]["wall"] == 5.0


def test_an_ssh_nodes_clock_fault_is_taken_off_with_its_measured_offset() -> None:
    """On an SSH host a clock fault moves ember's clock, not the host's (which
    the offset readings measure): the event's `clock_offset_s` comes off too,
    so n2's event 5 s ahead by its faulted clock lands where it happened."""
    reading = {"node": "n2", "harness_wall": 29.0, "offset_s": 1.5, "rtt_s": 0.01}
    audit = {"n2": [
        {"kind": "started", "wall": 30.0},
        {"kind": "a", "wall": 36.0, "clock_offset_s": 5.0},
        {"kind": "b", "wall": 27.0, "clock_offset_s": -5.0},
    ]}  # fmt: skip
    assert place_events(audit, {"clock_offsets": [reading]}) == 3
    assert [ev["wall"] for ev in audit["n2"]] == [28.5, 29.5, 30.5]
    assert [ev["node_wall"] for ev in audit["n2"]] == [30.0, 36.0, 27.0]
