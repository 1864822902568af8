"""Clock faults in the simulator (`--nemesis clock`): a node's wall clock jumps,
strobes or drifts, exactly and per host; the checkers place events by the
shared monotonic clock, so a skewed clock alone is no anomaly; and a placement
driver that trusts its own clock instead of its lease is caught (M9)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ember.sim.procs import HostClock

ROOT = Path(__file__).resolve().parents[2]


def test_a_host_clock_jumps_strobes_and_drifts_exactly() -> None:
    clock = HostClock(offset_s=-6.0, since=10.0)
    assert clock.offset_at(12.0) == -6.0
    clock.reset()
    clock.rate, clock.since = 2.0, 10.0
    assert clock.offset_at(13.0) == 3.0  # 3 s of true time read as 6
    clock.reset()
    clock.strobe_s, clock.period_s, clock.since = 4.0, 0.5, 10.0
    assert [clock.offset_at(t) for t in (10.1, 10.6, 11.1)] == [4.0, -4.0, 4.0]
    clock.reset()
    assert clock.offset_at(99.0) == 0.0


def _run(store: Path, *flags: str, seed: int = 2) -> tuple[int, str, Path]:
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", "--backend", "sim", "--seed", str(seed),
         "--nemesis", "clock", "--time-limit", "30", "--store", str(store), "--no-progress",
         *flags],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    run_dir = next(Path(ln.split(" ", 1)[1]) for ln in out.stdout.splitlines()
                   if ln.startswith("store "))  # fmt: skip
    return out.returncode, out.stdout, run_dir


@pytest.mark.slow
def test_skewed_clocks_alone_are_no_anomaly_and_replay_byte_for_byte(tmp_path: Path) -> None:
    """Seed 2: the nodes' own walls put a joint entry's commit before others stored
    it (a false commit-without-quorum before events were placed by the shared
    clock); placed, the run is valid, and a second run is the same bytes."""
    code, out, run = _run(tmp_path / "a")
    assert code == 0, out
    assert "faults: clock" in out, out
    events = [json.loads(line) for node in sorted((run / "nodes").iterdir())
              for line in (node / "events.jsonl").read_text().splitlines()]  # fmt: skip
    placed = _placed_walls(run)
    skewed = [e for e in events
              if abs(e.get("wall", 0) - placed[e["node"], e["mono_ns"], e["kind"]]) > 1.0
              ]  # fmt: skip
    assert skewed, "no event was written under a skewed clock"
    _, _, again = _run(tmp_path / "b")
    assert (again / "history.jsonl").read_bytes() == (run / "history.jsonl").read_bytes()


def _placed_walls(run: Path) -> dict[tuple[str, int, str], float]:
    """Each event's wall as placed on the shared clock, by (node, mono_ns, kind).
    Read once: reading the run's audit per event made this test 140 s long."""
    from checkers.audit import load_audit

    return {(e["node"], e["mono_ns"], e["kind"]): float(e["wall"])
            for evs in (load_audit(run) or {}).values() for e in evs}  # fmt: skip


@pytest.mark.slow
def test_a_driver_trusting_its_own_clock_is_caught(tmp_path: Path) -> None:
    # Seed 1 (seed 2 until nodes heartbeat every second tick; 3, 7 and 8 catch it too).
    code, out, run = _run(tmp_path, "--failpoint", "placement.trust-own-clock", seed=1)
    assert code == 1, out
    results = json.loads((run / "results.json").read_text())
    kinds = {a["kind"] for a in results["checkers"]["revisions"]["anomalies"]}
    assert kinds == {"driver-acted-after-successor"}, kinds
