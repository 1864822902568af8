"""Each of ember's planted defects, switched on by its failpoint, is reported invalid by
the checker that owns its rule within 20 seeds of the default plan under --backend sim,
with a replay command that reproduces the verdict."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SEEDS = range(1, 21)

# failpoint -> (checker that owns the rule, the anomaly kind it reports, or None: any)
PLANTED = {
    "rebalance.cancel-without-revision-guard": ("revisions", "cancel-wrong-pending"),
    "rebalance.ignore-last-seen": ("revisions", "stale-request-applied"),
    "raft.skip-catchup": ("raft", "joint-before-catchup"),
    "raft.ignore-vote-lease": ("raft", "vote-in-lease"),
    "raft.skip-check-quorum": ("raft", "leader-kept-without-quorum"),
    "raft.step-down-on-joint": ("raft", "removed-before-stable"),
    "kv.ack-before-commit": ("linearizable", None),
    "kv.apply-diverge": ("convergence", "state-mismatch"),
}

pytestmark = pytest.mark.slow


def _run(store: Path, seed: int, failpoint: str) -> tuple[int, str]:
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", "--backend", "sim", "--seed", str(seed),
         "--failpoint", failpoint, "--store", str(store), "--no-progress"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    return out.returncode, out.stdout


def _caught(stdout: str, checker: str, kind: str | None) -> Path | None:
    run_dir = Path(next(ln.split(" ", 1)[1] for ln in stdout.splitlines()
                        if ln.startswith("store ")))  # fmt: skip
    result = json.loads((run_dir / "results.json").read_text())["checkers"].get(checker, {})
    if result.get("valid") is not False:
        return None
    kinds = {a.get("kind") for a in result.get("anomalies") or []}
    return run_dir if kind is None or kind in kinds else None


@pytest.mark.parametrize("failpoint", sorted(PLANTED))
def test_a_planted_defect_is_caught_in_simulation(tmp_path: Path, failpoint: str) -> None:
    checker, kind = PLANTED[failpoint]
    for seed in SEEDS:
        code, stdout = _run(tmp_path, seed, failpoint)
        run_dir = _caught(stdout, checker, kind) if code == 1 else None
        if run_dir is None:
            continue
        assert f"replay: faultline replay {run_dir}" in stdout
        lines = stdout.strip().splitlines()
        assert lines[0] == f"seed {seed}"
        assert lines[-1].startswith("report: ")
        again = subprocess.run(
            [sys.executable, "-m", "harness.cli", "replay", str(run_dir), "--no-progress"],
            cwd=ROOT, capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert again.returncode == 1, again.stdout[-2000:]
        assert "replay: byte-identical" in again.stdout
        return
    raise AssertionError(f"{failpoint} not caught by {checker} in seeds {SEEDS[0]}..{SEEDS[-1]}")
