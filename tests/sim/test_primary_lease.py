"""M9 for primaries in the simulator: a primary cut off by partitions stops
acting before the driver names another, and one that acts on past its lease
(the planted `rebalance.primary-ignores-lease`) is caught by the revisions
checker (`primary-acted-after-successor`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Seed 3 of this mix catches the planted primary (so do 5, 6, 9 and 10 of 1-12).
SEED = 3


def _run(store: Path, *flags: str) -> tuple[int, str, dict]:
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", "--backend", "sim", "--seed", str(SEED),
         "--nemesis", "partition", "--workload", "register,rebalance,cancel-race",
         "--time-limit", "30", "--store", str(store), "--no-progress", *flags],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    run_dir = next(Path(ln.split(" ", 1)[1]) for ln in out.stdout.splitlines()
                   if ln.startswith("store "))  # fmt: skip
    return out.returncode, out.stdout, json.loads((run_dir / "results.json").read_text())


def _revisions(results: dict) -> tuple[set[str], dict]:
    revisions = results["checkers"]["revisions"]
    return {a["kind"] for a in revisions["anomalies"]}, revisions["figures"]["assignments"]


@pytest.mark.slow
def test_primaries_hand_over_in_time_under_partitions(tmp_path: Path) -> None:
    code, out, results = _run(tmp_path)
    assert code == 0, out
    kinds, figures = _revisions(results)
    assert kinds == set(), kinds
    assert figures["primary-actions"] > 0, "no primary ever acted"


@pytest.mark.slow
def test_a_primary_acting_past_its_lease_is_caught(tmp_path: Path) -> None:
    code, out, results = _run(tmp_path, "--failpoint", "rebalance.primary-ignores-lease")
    assert code == 1, out
    kinds, _ = _revisions(results)
    assert kinds == {"primary-acted-after-successor"}, kinds
