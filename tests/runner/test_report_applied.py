"""The runner asks the db for its replicas' end states before collecting the logs."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from harness.runner import report_applied

NAMES = ["n1", "n2", "n3"]


class SyncDB:
    """ember over Docker or SSH: a blocking call per node."""

    def __init__(self, silent: Sequence[str]) -> None:
        self.silent = list(silent)
        self.asked: list[str] = []

    def report_applied(self, names: Sequence[str]) -> list[str]:
        self.asked = list(names)
        return [n for n in names if n in self.silent]


class AsyncDB(SyncDB):
    """ember in the simulator: the same over the simulated network."""

    async def report_applied_async(self, names: Sequence[str]) -> list[str]:
        return self.report_applied(names)


def test_every_node_is_asked_and_a_silent_one_is_named_in_a_note() -> None:
    for db in (SyncDB(["n2"]), AsyncDB(["n2"])):
        notes = asyncio.run(report_applied(db, NAMES))
        assert db.asked == NAMES
        assert notes == ["n2 did not report its applied state at the end: replicas compared "
                         "at their last periodic report"]  # fmt: skip


def test_a_db_without_the_call_is_left_alone() -> None:
    """etcd has no such call: no note, since its checkers never read one."""
    assert asyncio.run(report_applied(object(), NAMES)) == []
