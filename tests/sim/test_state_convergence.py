"""The planted `kv.apply-diverge` (followers apply puts with other values: same log,
different state) is caught by the convergence checker's content digests under
--backend sim, and the log-digest comparison alone would have passed it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from checkers.api import CheckContext
from checkers.audit import load_timeline
from checkers.compose import load_run
from checkers.convergence import ConvergenceChecker
from checkers.history import pair
from harness import plan as plans
from harness.progress import RunStatus
from harness.runner import run

pytestmark = pytest.mark.slow
DIVERGENCE = {"state-mismatch", "digest-mismatch", "replicas-diverge"}


def _convergence(run_dir: Path, audit: dict[str, list[dict[str, Any]]]) -> set[str]:
    plan, history, _, _ = load_run(run_dir)
    options = {"history_zero_wall": load_timeline(run_dir)}  # as the runner judges
    ctx = CheckContext(plan=plan, events=history, operations=pair(history), audit=audit,
                       options=options)  # fmt: skip
    return {a.kind for a in ConvergenceChecker().check(ctx).anomalies}


def test_same_log_different_state_is_caught_on_state_not_on_log(tmp_path: Path) -> None:
    """Content digests differ at equal indexes (state-mismatch) while every log digest
    agrees; with the `state` fields removed the checker sees no divergence at all."""
    plan = plans.Plan(seed=1, backend="sim", time_limit_s=15.0, quiet_s=6.0,
                      options={"failpoints": {"kv.apply-diverge": {}}})  # fmt: skip
    outcome = run(plan, tmp_path, status=RunStatus())
    assert outcome.error is None, outcome.error
    conv = outcome.result.checkers["convergence"]
    kinds = {a.kind for a in conv.anomalies}
    assert conv.valid is False
    assert "state-mismatch" in kinds
    assert "digest-mismatch" not in kinds  # the logs are the same everywhere
    _, _, audit, _ = load_run(outcome.run.path)
    assert _convergence(outcome.run.path, audit) & DIVERGENCE == kinds & DIVERGENCE
    for events in audit.values():
        for ev in events:
            ev.pop("state", None)  # what a log-hash-only node reports
    assert _convergence(outcome.run.path, audit) & DIVERGENCE == set()


def test_a_clean_run_reports_equal_states(tmp_path: Path) -> None:
    """Without the failpoint every replica's content digest agrees at equal indexes,
    and every `applied` event carries one."""
    plan = plans.Plan(seed=1, backend="sim", time_limit_s=15.0, quiet_s=6.0)
    outcome = run(plan, tmp_path, status=RunStatus())
    assert outcome.error is None, outcome.error
    conv = outcome.result.checkers["convergence"]
    assert not {a.kind for a in conv.anomalies} & DIVERGENCE, conv.anomalies
    applied = [json.loads(line) for p in outcome.run.path.glob("nodes/*/events.jsonl")
               for line in p.read_text().splitlines() if '"applied"' in line]  # fmt: skip
    applied = [e for e in applied if e.get("kind") == "applied"]
    assert applied
    assert all(isinstance(e.get("state"), str) and len(e["state"]) == 64 for e in applied)
