"""M9 per partition: primaries' actions, placed in real time, under leases that
only grow across nodes (checkers.authority.check_primaries)."""

from __future__ import annotations

from typing import Any

from checkers.authority import check_authority, check_primaries


def _act(node: str, wall: float, lease: int, partition: int = 0) -> dict[str, Any]:
    return {"kind": "primary-acting", "node": node, "wall": wall, "zone": "default",
            "partition": partition, "act": "change-peers", "primary_lease": lease}  # fmt: skip


def test_the_checker_flags_a_primary_acting_after_its_successor() -> None:
    audit = {
        "n1": [_act("n1", 1.0, 10), _act("n1", 2.0, 12), _act("n1", 4.0, 12),
               _act("n1", 4.5, 12, partition=1)],
        "n2": [_act("n2", 3.0, 20), _act("n2", 5.0, 13, partition=1)],
    }  # fmt: skip
    out: list[Any] = []
    assert check_primaries(audit, out) == 6
    assert [(a.kind, a.revisions) for a in out] == [("primary-acted-after-successor", [12, 20])]


def test_the_checker_passes_a_handover_and_a_restart() -> None:
    audit = {
        "n1": [_act("n1", 1.0, 10), _act("n1", 2.0, 12), _act("n1", 6.0, 30)],
        "n2": [_act("n2", 3.0, 20), _act("n2", 4.0, 22)],
    }
    out: list[Any] = []
    assert check_primaries(audit, out) == 5
    assert out == []


def test_the_driver_rule_is_unchanged() -> None:
    def act(node: str, wall: float, lease: int) -> dict[str, Any]:
        return {"kind": "driver-acting", "node": node, "wall": wall, "act": "trigger",
                "driver_lease": lease}  # fmt: skip

    audit = {"n1": [act("n1", 1.0, 5), act("n1", 3.0, 5)], "n2": [act("n2", 2.0, 9)]}
    out: list[Any] = []
    assert check_authority(audit, out) == 3
    assert [(a.kind, a.revisions) for a in out] == [("driver-acted-after-successor", [5, 9])]
    assert "as driver under lease 5" in out[0].message
