"""Clock faults on Docker and on SSH hosts (marked docker): the nemesis moves
one node's wall clock by rewriting the offset file ember follows (its audit
walls show the bump), healing puts it back, every fault drawn is applied
(drifts by a loop that steps the offset), and clean ember keeps one placement
driver at a time (M9) while clocks jump, strobe and drift: before the driver
judged its lease by the monotonic clock, the same kind of run reported
`driver-acted-after-successor`.

The same plan runs twice: on Docker, and with --backend ssh on containers
used as plain SSH hosts. Both runs' events are placed by the monotonic clock
(the containers run on the harness's kernel, which each process names by its
boot id), so each run's events are also placed as on hosts with clocks of
their own: by each host's measured offset less the fault's own
(`clock_offset_s`, docs/events.md), within 100 ms of the monotonic placement.
Without taking the fault's offset off, every event written during a bump
was off by the bump.

The schedule is the seed's draw (seed 13: a drift at 0.785x, a bump of
-5.0 s, a strobe of +-6.6 s, ...), faults every 2 s on average at random
nodes, so every fault
resolves without asking anyone. Catching the planted
`placement.trust-own-clock` needs the bump to land on the driver, which the
simulator does deterministically (tests/sim/test_clock_faults.py).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.cli import main
from tests.harness.cluster_fixtures import require_docker
from tests.harness.ssh_hosts import containers_as_ssh_hosts, placed_by_offsets_only

pytestmark = pytest.mark.docker

PLAN = {
    "name": "pytest-clock", "seed": 13, "backend": "docker",
    "nodes": ["n1", "n2", "n3", "n4", "n5"], "db": "ember",
    "workload": ["register", "rebalance"], "nemesis": ["clock"],
    "concurrency": 4, "rate_hz": 20.0, "time_limit_s": 20.0, "quiet_s": 3.0,
    "options": {"nemesis_mode": "periodic", "nemesis_targets": ["random"], "nemesis_gap_s": 2.0},
}  # fmt: skip


def _wall_shifts(node_dir: Path) -> list[float]:
    """Each audit event's wall minus its monotonic time, less the node's median."""
    diffs, origin = [], 0
    for line in (node_dir / "events.jsonl").read_text().splitlines():
        ev = json.loads(line)
        origin = ev.get("mono_origin_ns", origin)  # a process's first event carries it
        diffs.append(ev["wall"] - (origin + ev["mono_ns"]) / 1e9)
    middle = statistics.median(diffs)
    return [d - middle for d in diffs]


TOLERANCE_S = 0.1


@pytest.fixture(scope="module", params=["docker", "ssh"])
def clock_run(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, str]]:
    """The plan's run dir and output, on Docker or on containers as SSH hosts
    (removed even if the run was interrupted)."""
    require_docker()
    root = tmp_path_factory.mktemp(f"clock-{request.param}")
    plan: dict[str, Any] = dict(PLAN)
    with contextlib.ExitStack() as stack:
        if request.param == "ssh":
            name = f"pytest-clock-hosts-{os.getpid()}"
            stack.enter_context(containers_as_ssh_hosts(name, len(PLAN["nodes"]), root / "hosts"))
            plan |= {"backend": "ssh", "options": {**PLAN["options"], "hosts": str(root / "hosts")}}
        (root / "clock.json").write_text(json.dumps(plan))
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            main(["run", "--plan", str(root / "clock.json"), "--store", str(root / "store"),
                  "--no-progress"])  # fmt: skip
        out = printed.getvalue()
        found = re.search(r"replay: faultline replay (\S+)", out)
        assert found, out
        yield Path(found.group(1)), out


def test_clock_faults_move_a_node_clock_and_one_driver_acts_at_a_time(
    clock_run: tuple[Path, str],
) -> None:
    run, out = clock_run
    ops = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    moved = [o for o in ops if o.get("process") == "nemesis" and o["f"] == "clock"
             and o["type"] == "ok"]  # fmt: skip
    assert moved, out
    ended = [o for o in ops if o.get("process") == "nemesis" and o["f"] == "clock"
             and o["type"] != "invoke"]  # fmt: skip
    assert ended == moved, "a clock fault was not applied (drifts are, since the loop)"
    assert {o["value"].get("mode") for o in moved} >= {"drift", "bump"}, moved
    for op in moved:  # the offset file was written on the node the op names
        node = op["value"]["node"]
        assert any("/run/faultline/clock-offset" in c for c in op["value"]["commands"][node])
    # ember followed it: on a node a bump or strobe moved, some audit event's
    # wall stands off its monotonic clock by the fault's delta, against the
    # node's usual difference (a node may write no event while a fault lasts:
    # seed 13's strobe on n3 shows, its bump on n4 did not).
    steps = [o["value"] for o in moved if o["value"].get("mode") in ("bump", "strobe")]
    seen = [v for v in steps if any(abs(abs(s) - abs(v["delta_s"])) < 0.3
                                    for s in _wall_shifts(run / "nodes" / v["node"]))]  # fmt: skip
    assert seen, f"no fault of {steps} shows in its node's audit walls"
    healed = [o for o in ops if o.get("process") == "nemesis" and o["f"] == "heal-clock"
              and o["type"] == "ok" and o["value"].get("commands")]  # fmt: skip
    assert healed, "no clock fault was healed"
    results = json.loads((run / "results.json").read_text())
    revisions = results["checkers"]["revisions"]
    assert revisions["figures"]["assignments"]["driver-actions"] > 0, "the driver never acted"
    kinds = {a["kind"] for a in revisions["anomalies"]}
    assert "driver-acted-after-successor" not in kinds, out


def test_events_are_placed_where_they_happened_while_clocks_were_moved(
    clock_run: tuple[Path, str],
) -> None:
    """Placed by the measured offsets less each event's `clock_offset_s`, every
    event lands where the monotonic clock the containers share with the
    harness puts it; some events were written under a clock moved by more
    than a second, so the check is not empty."""
    run, _ = clock_run
    loaded, by_offsets = placed_by_offsets_only(run)
    faulted = [ev for evs in loaded.values() for ev in evs if ev.get("clock_offset_s")]
    assert any(abs(ev["clock_offset_s"]) > 1.0 for ev in faulted), "no event under a moved clock"
    for node, events in loaded.items():
        for ev, other in zip(events, by_offsets[node], strict=True):
            assert abs(ev["wall"] - other["wall"]) <= TOLERANCE_S, (node, ev, other)
