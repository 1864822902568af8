"""A killed `faultline explore` leaves no worker behind: SIGTERM shuts the
pool down at once, and a SIGKILLed explore's workers end with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _session(sid: int) -> list[int]:
    """The live (not zombie) processes of session `sid`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(entry.name))
    return pids


def _wait(pred: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_explore_leaves_no_worker(tmp_path: Path, sig: signal.Signals) -> None:
    argv = [sys.executable, "-m", "harness.cli", "explore", "--budget", "50 runs",
            "--workers", "2", "--time-limit", "30", "--store", str(tmp_path),
            "--no-progress"]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip
    try:
        # explore itself, the resource tracker and two workers, all playing.
        assert _wait(lambda: len(_session(proc.pid)) >= 4, 60), _session(proc.pid)
        time.sleep(1.0)
        proc.send_signal(sig)
        proc.wait(timeout=20)
        assert _wait(lambda: not _session(proc.pid), 10), f"left behind: {_session(proc.pid)}"
        if sig == signal.SIGTERM:
            out = proc.stdout.read().decode() if proc.stdout else ""
            assert "explore: interrupted" in out, out
    finally:
        for pid in _session(proc.pid):
            os.kill(pid, signal.SIGKILL)
        proc.wait()
