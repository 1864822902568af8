"""The control-plane mix against a 5-node Docker cluster of ember (marked docker).

One 60 s run of register + rebalance + cancel-race + metastore traffic under
partitions: ember with its control plane must end valid, converged, with
every checker's verdict in results.json and cancels exercised.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from checkers.history import load_history, pair
from harness.backends.docker import LABEL
from harness.plan import Plan
from harness.runner import RunOutcome, run
from tests.harness.cluster_fixtures import require_docker

pytestmark = pytest.mark.docker

SEED = 9091
CHECKERS = {"linearizable", "raft", "revisions", "convergence", "stats"}


@pytest.fixture(scope="module")
def mix_run(tmp_path_factory: pytest.TempPathFactory) -> RunOutcome:
    """The run (one per module: it takes a couple of minutes)."""
    require_docker()
    plan = Plan(
        name="pytest-mix", seed=SEED, nodes=("n1", "n2", "n3", "n4", "n5"), concurrency=6,
        rate_hz=30.0, time_limit_s=60.0, quiet_s=3.0, nemesis=("partition",),
        workload=("register", "rebalance", "cancel-race", "metastore"),
        options={"rebalance_interval_s": 4.0, "cancel_interval_s": 2.0},
    )  # fmt: skip
    return run(plan, tmp_path_factory.mktemp("store"))


def _ops(out: RunOutcome) -> list[Any]:
    return pair(load_history(out.run.history))


def test_every_checker_judges_the_mix_and_it_is_valid(mix_run: RunOutcome) -> None:
    """All five checkers ran; ember is valid and converged after the quiet period."""
    doc = json.loads(Path(mix_run.run.results).read_text())
    assert set(doc["checkers"]) >= CHECKERS
    verdicts = {name: c["valid"] for name, c in doc["checkers"].items()}
    assert verdicts["convergence"] is True, doc["checkers"]["convergence"]
    # Every node answered the harness's report-applied call before collection.
    figures = doc["checkers"]["convergence"]["figures"]
    assert figures["groups-judged-at-collection"] == figures["groups"] > 0, figures
    # A failure names each checker that did not hold and what it found.
    failed = {name: (c["valid"], c.get("error"), c.get("anomalies", [])[:3])
              for name, c in doc["checkers"].items() if c["valid"] is not True}  # fmt: skip
    assert mix_run.result.valid is True, (failed, mix_run.result.reasons, str(mix_run.run.path))
    assert mix_run.exit_code == 0


def test_the_mix_exercised_alters_cancels_and_the_metastore(mix_run: RunOutcome) -> None:
    """Alters committed, cancels reached an outcome, the metastore was read and watched."""
    ops = _ops(mix_run)
    alters = [op for op in ops if op.f == "alter-zone" and op.type == "ok"]
    assert len(alters) >= 3
    assert all(isinstance(op.result.get("revision"), int) for op in alters)
    outcomes = Counter(
        op.result.get("outcome")
        for op in ops
        if op.f == "cancel-rebalance" and isinstance(op.result, dict)
    )
    known = {"cancelled", "already-done", "rejected-stale"}
    assert sum(outcomes[k] for k in known) >= 1, outcomes
    figures = mix_run.result.checkers["revisions"].figures
    assert figures["watches"] >= 1
    assert figures["snapshot_reads"] >= 1
    assert figures["assignments"]["writes"] >= 1
    lin = mix_run.result.checkers["linearizable"].figures
    assert set(lin) >= {"register", "metastore"}  # both objects searched


def test_the_mix_leaves_no_container(mix_run: RunOutcome) -> None:
    """The cluster is torn down after the run."""
    import docker

    client = docker.from_env()
    prefix = f"run{SEED % 100_000}-{os.getpid()}"
    left = [c for c in client.containers.list(all=True, filters={"label": LABEL})
            if c.labels.get(LABEL, "").startswith(prefix)]  # fmt: skip
    assert not left
