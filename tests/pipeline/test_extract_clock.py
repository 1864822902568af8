"""The lake places audit events with the one mapping (checkers.audit.run_clock), no Spark.

A synthetic run whose node processes started 10 s before the workload (a
slow setup) has every `mono_ns` 10 s ahead of history time, and the node
restarted by the kill counts from zero again; the lake's change times,
rebalance times and fault x phase labels must still be where the history
puts them.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from harness.synthetic import make_run
from harness.synthetic_story import CHANGE, KILL, PARTITION
from pipeline.extract import IDLE, extract

NS_PER_S = 1_000_000_000
SETUP_NS = 10 * NS_PER_S
END_NS = 20 * NS_PER_S  # make_run's length for up to 4000 ops
Rows = dict[str, list[tuple[object, ...]]]
US = 1_000  # placed walls are Unix seconds in a double: sub-microsecond rounding


def _slow_setup(run: Path) -> None:
    """Each process started SETUP_NS earlier on the shared monotonic clock, and
    its events' `mono_ns` are that much larger: the same instants."""
    for path in (run / "nodes").glob("*/events.jsonl"):
        events = [msgspec.json.decode(line) for line in path.read_bytes().splitlines()]
        for ev in events:
            ev["mono_ns"] += SETUP_NS
            if "mono_origin_ns" in ev:
                ev["mono_origin_ns"] -= SETUP_NS
        path.write_bytes(b"".join(msgspec.json.encode(ev) + b"\n" for ev in events))


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> Rows:
    store = tmp_path_factory.mktemp("store")
    run = make_run(store, seed=4, ops=400).path
    _slow_setup(run)
    return extract(str(store), str(run), "ingest-1")


def test_change_and_rebalance_times_are_history_times(rows: Rows) -> None:
    """part-0's change starts (catching-up) one eighth into its window, as the story has it."""
    c0, c1 = (int(f * END_NS) for f in CHANGE)
    ((group, _token, start, _end, stages, outcome),) = [r[2:8] for r in rows["changes"]]
    assert (group, outcome) == ("part-0", "done")
    assert start == pytest.approx(c0 + (c1 - c0) // 8, abs=US)
    assert stages == ["catching-up", "joint", "stable"]
    times = sorted(int(r[4]) for r in rows["rebalances"])  # type: ignore[call-overload]
    assert times[0] == pytest.approx(100, abs=US)
    assert times[-1] == pytest.approx(c0 + 7 * ((c1 - c0) // 8), abs=US)


def test_fault_phase_labels_follow_the_history(rows: Rows) -> None:
    """The partition (before the change) is idle; the kill spans the whole change."""
    labels = {r[2]: (r[3], r[6]) for r in rows["faults"]}
    assert labels["partition"] == (int(PARTITION[0] * END_NS), [IDLE])
    assert labels["kill"][0] == int(KILL[0] * END_NS)
    assert labels["kill"][1] == ["catching-up", "joint", "pending written", "stable"]
