"""Each planted ember defect, switched on with `faultline run --failpoint`,
makes the run invalid by the checker that owns the broken rule (marked docker).

- `rebalance.cancel-without-revision-guard`: the cancel-race workload's
  cancels that name a stale pending revision on purpose get written; the
  revisions checker reports `cancel-wrong-pending`.
- `rebalance.ignore-last-seen`: the rebalance workload's stale requests
  (`workloads.stale_request`) are acted on; `stale-request-applied`.
- `raft.skip-catchup`: a rebalance adding a replica enters the joint stage
  before the new peer caught up; the raft checker's `joint-before-catchup`.

One short run each through the CLI entry point, 5 nodes, no nemesis: the
exit code says invalid, and the output ends with the replay command and
the report, as a user sees it. Seed 34 makes the cancel-race's first cancel
a stale-named one and sends the first stale request about 10 s in.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from ember.failpoints import KNOWN
from harness.cli import main
from tests.harness.cluster_fixtures import require_docker

pytestmark = pytest.mark.docker

CASES = [
    ("rebalance.cancel-without-revision-guard", "revisions", "cancel-wrong-pending"),
    ("rebalance.ignore-last-seen", "revisions", "stale-request-applied"),
    ("raft.skip-catchup", "raft", "joint-before-catchup"),
]


@pytest.mark.parametrize(("failpoint", "checker", "kind"), CASES, ids=[c[0] for c in CASES])
def test_a_planted_defect_is_reported_invalid_with_the_replay_command(
    failpoint: str,
    checker: str,
    kind: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    require_docker()
    assert failpoint in KNOWN
    code = main([
        "run", "--nodes", "5", "--workload", "register,rebalance,cancel-race",
        "--nemesis", "none", "--time-limit", "35", "--quiet-period", "3", "--seed", "34",
        "--concurrency", "4", "--rate", "20", "--failpoint", failpoint,
        "--store", str(tmp_path), "--no-progress", "--name", f"pytest-{failpoint}",
    ])  # fmt: skip
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.strip()]
    replay = [line for line in lines if line.startswith("replay: faultline replay ")]
    assert replay, out
    run_dir = Path(shlex.split(replay[-1].removeprefix("replay: faultline replay "))[0])
    assert (run_dir / "test.json").exists(), out
    assert lines[-1].startswith("report: "), out
    assert code == 1, out
    assert "valid: false" in out, out
    results = json.loads((run_dir / "results.json").read_text())
    verdict = results["checkers"][checker]
    kinds = {a["kind"] for a in verdict["anomalies"]}
    assert verdict["valid"] is False, out
    assert kind in kinds, (kinds, out)
