"""nemesis.clock's shell commands, run for real by `sh` against a scratch
state dir: a bump writes the offset ember follows, a strobe flips it until
healed, a drift gains at its rate, a heal (or heal_all's HEAL_CLOCK) puts +0
back."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from harness.backends.base import NodeHandle, SshTarget
from harness.control import CommandResult
from harness.db import EmberDB
from nemesis.clock import CLOCK_OFFSET_FILE, HEAL_CLOCK, ClockFaultUnsupportedError, clock_fault
from nemesis.fault import STATE_DIR
from nemesis.heal import HEAL_ALL


class LocalRunner:
    """Runs each node's script with sh, the state dir moved under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def run_many(
        self, commands: Mapping[str, str], *, timeout_s: float = 60.0, check: bool = True
    ) -> dict[str, CommandResult]:
        out = {}
        for node, cmd in commands.items():
            cmd = cmd.replace(STATE_DIR, str(self.root))
            done = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, check=True,
                                  timeout=timeout_s)  # fmt: skip
            out[node] = CommandResult(node, cmd, 0, done.stdout, done.stderr)
        return out


def _offset(root: Path) -> str:
    path = root / Path(CLOCK_OFFSET_FILE).name
    return path.read_text().strip() if path.exists() else ""


def test_a_bump_writes_the_offset_and_its_heal_puts_zero_back(tmp_path: Path) -> None:
    runner = LocalRunner(tmp_path)
    fault = clock_fault(runner, "n2", {"mode": "bump", "delta_s": -7.25})
    assert _offset(tmp_path) == "-7.250s"
    assert fault.as_value()["node"] == "n2"
    fault.heal(runner)
    assert _offset(tmp_path) == "+0"


def test_a_strobe_flips_until_healed(tmp_path: Path) -> None:
    runner = LocalRunner(tmp_path)
    fault = clock_fault(runner, "n1", {"mode": "strobe", "delta_s": 4.0, "period_s": 0.05})
    seen = set()
    try:
        deadline = time.monotonic() + 5
        while len(seen) < 2 and time.monotonic() < deadline:
            seen |= {_offset(tmp_path)} - {""}
            time.sleep(0.01)
    finally:
        fault.heal(runner)  # the loop must not outlive a failed assertion
    assert seen == {"+4.000s", "-4.000s"}
    time.sleep(0.2)
    assert _offset(tmp_path) == "+0"
    assert not (tmp_path / "clock-strobe.pid").exists()


def _seconds(offset: str) -> float:
    return float(offset.rstrip("s"))


def _reading(root: Path) -> tuple[float, float]:
    """The offset and when it was written (the offset file's mtime, seconds)."""
    path = root / Path(CLOCK_OFFSET_FILE).name
    return _seconds(path.read_text().strip()), path.stat().st_mtime_ns / 1e9


@pytest.mark.parametrize("rate", [2.0, 0.5])
def test_a_drift_gains_at_its_rate_until_healed(tmp_path: Path, rate: float) -> None:
    """The offset grows by (rate - 1) per second of real time, in small steps."""
    runner = LocalRunner(tmp_path)
    fault = clock_fault(runner, "n1", {"mode": "drift", "rate": rate})
    try:
        deadline = time.monotonic() + 20  # the loop's interpreter starts slowly under load
        while not _offset(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.01)
        # Judged by when the loop wrote each reading (the file's mtime), not
        # when this test read it: under load the loop may be starved for most
        # of a second (CI: 0.203 s gained in a 1.0 s sleep), which is no drift
        # error, only a late write.
        first, first_at = _reading(tmp_path)
        time.sleep(1.0)
        last, last_at = _reading(tmp_path)
        gained, elapsed = last - first, last_at - first_at
    finally:
        fault.heal(runner)
    assert fault.as_value()["rate"] == rate
    assert abs(gained - (rate - 1) * elapsed) < 0.1, (gained, elapsed)
    time.sleep(0.2)
    assert _offset(tmp_path) == "+0"
    assert not (tmp_path / "clock-strobe.pid").exists()


def test_an_unknown_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ClockFaultUnsupportedError, match="unknown clock fault mode 'reset'"):
        clock_fault(LocalRunner(tmp_path), "n1", {"mode": "reset"})


def test_heal_all_resets_clocks_and_a_clock_run_gives_ember_the_offset_file() -> None:
    assert HEAL_CLOCK in HEAL_ALL
    nodes = [NodeHandle(name="n1", ip="10.0.0.1", ssh=SshTarget(host="10.0.0.1"))]
    plain, moved = EmberDB(nodes, {}, 1), EmberDB(nodes, {"clock_faults": True}, 1)
    assert plain.spec.start_command == moved.spec.start_command  # no LD_PRELOAD any more
    assert "clock_offset_file" not in plain._config(nodes[0])
    assert f'clock_offset_file = "{CLOCK_OFFSET_FILE}"' in moved._config(nodes[0])
    assert "clock_faults" not in moved._config(nodes[0])
