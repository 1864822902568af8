"""kill -9 at random moments never loses an acknowledged write."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ember.storage import NodeStorage
from tests.storage.crash_child import GROUPS, SEGMENT_BYTES, payload

ROOT = Path(__file__).resolve().parents[2]


def run_and_kill(data_dir: Path, seed: int, rng: random.Random) -> dict[str, int]:
    """Start a writer child, kill -9 it after a random number of acks; return its acks."""
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.storage.crash_child", str(data_dir), str(seed)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    acked: dict[str, int] = {}
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n", "child failed to open the store"
        for _ in range(rng.randint(1, 400)):
            line = child.stdout.readline()
            assert line.startswith("ack "), f"child stopped early: {line!r}"
            _, group, index = line.split()
            acked[group] = max(acked.get(group, 0), int(index))
        # Land the kill anywhere in the child's write/fsync/print cycle.
        time.sleep(rng.random() * 0.005)
        os.kill(child.pid, signal.SIGKILL)
        # Acks already in the pipe were made before the kill: they count too.
        for line in child.stdout:
            if line.startswith("ack ") and line.endswith("\n"):
                _, group, index = line.split()
                acked[group] = max(acked.get(group, 0), int(index))
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    return acked


def check_acknowledged(data_dir: Path, acked: dict[str, int]) -> None:
    """Every acknowledged index is in the log (intact) or covered by the snapshot."""
    with NodeStorage(data_dir, segment_bytes=SEGMENT_BYTES) as store:
        for group in GROUPS:
            state = store.group(group).load()
            floor = state.snapshot.meta.index if state.snapshot else 0
            last = state.entries[-1].index if state.entries else floor
            assert last >= acked.get(group, 0), f"{group}: acked {acked[group]}, found {last}"
            assert [e.index for e in state.entries] == list(range(floor + 1, last + 1))
            for e in state.entries:
                assert e.data == payload(group, e.index), f"{group}: entry {e.index} damaged"
            if state.snapshot is not None:
                assert state.snapshot.data == payload(group, floor)
            assert state.hard_state.commit == last


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_kill_9_loses_nothing_acknowledged(tmp_path: Path, seed: int) -> None:
    """Repeated kill -9 of a writer (through rotations and snapshots) keeps every ack."""
    rng = random.Random(seed)
    acked: dict[str, int] = {}
    for round_ in range(6):
        got = run_and_kill(tmp_path, seed * 100 + round_, rng)
        for group, index in got.items():
            acked[group] = max(acked.get(group, 0), index)
        check_acknowledged(tmp_path, acked)
    assert sum(acked.values()) > 0
