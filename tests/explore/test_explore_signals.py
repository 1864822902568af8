"""A killed `faultline explore` leaves no worker behind: SIGTERM shuts the
pool down at once, and a SIGKILLed explore's workers end with it. Nor their
files: the workers' temporary files live under one directory the explore
removes (SIGTERM), or the next explore does (SIGKILL)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from harness.commands_explore import _scratch_root

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
def test_a_killed_explore_leaves_no_worker(
    tmp_path: Path, sig: signal.Signals, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = [sys.executable, "-m", "harness.cli", "explore", "--budget", "50 runs",
            "--workers", "2", "--time-limit", "30", "--store", str(tmp_path / "store"),
            "--no-progress"]  # fmt: skip
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, env=env)  # fmt: skip
    try:
        # explore itself, the resource tracker and two workers, all playing.
        assert _wait(lambda: len(_session(proc.pid)) >= 4, 60), _session(proc.pid)
        time.sleep(1.0)
        proc.send_signal(sig)
        proc.wait(timeout=20)
        assert _wait(lambda: not _session(proc.pid), 10), f"left behind: {_session(proc.pid)}"
        ours = sorted(p.name for p in tmp.glob("faultline-*"))
        if sig == signal.SIGTERM:
            out = proc.stdout.read().decode() if proc.stdout else ""
            assert "explore: interrupted" in out, out
            assert ours == [], "the workers' files were left"
        else:  # the next explore's start removes what a killed one left
            assert len(ours) == 1, ours
            assert ours[0].startswith(f"faultline-workers-{proc.pid}-"), ours
            monkeypatch.setattr(tempfile, "tempdir", str(tmp))
            shutil.rmtree(_scratch_root())
            assert sorted(p.name for p in tmp.glob("faultline-*")) == []
    finally:
        for pid in _session(proc.pid):
            os.kill(pid, signal.SIGKILL)
        proc.wait()
