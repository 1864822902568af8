"""Clock faults on Docker (marked docker): ember runs under libfaketime, the
nemesis moves one node's wall clock by rewriting its faketime file, healing
puts it back, and a placement driver that trusts its own clock is caught by
M9 (`driver-acted-after-successor`), while the events stay placed by the
shared monotonic clock."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harness.cli import main
from tests.harness.cluster_fixtures import require_docker

pytestmark = pytest.mark.docker

PLAN = {
    "name": "pytest-clock", "seed": 2, "backend": "docker",
    "nodes": ["n1", "n2", "n3", "n4", "n5"], "db": "ember",
    "workload": ["register", "rebalance"], "nemesis": ["clock"],
    "concurrency": 4, "rate_hz": 20.0, "time_limit_s": 20.0, "quiet_s": 3.0,
    "options": {
        "nemesis_mode": "periodic", "nemesis_targets": ["random"],
        "failpoints": {"placement.trust-own-clock": {}},
    },
}  # fmt: skip


def test_a_driver_trusting_its_skewed_clock_is_caught_on_docker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    require_docker()
    plan = tmp_path / "clock.json"
    plan.write_text(json.dumps(PLAN))
    code = main(["run", "--plan", str(plan), "--store", str(tmp_path / "store"), "--no-progress"])
    out = capsys.readouterr().out
    run = Path(re.search(r"replay: faultline replay (\S+)", out).group(1))  # type: ignore[union-attr]
    ops = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    moved = [o for o in ops if o.get("process") == "nemesis" and o["f"] == "clock"
             and o["type"] == "ok"]  # fmt: skip
    assert moved, out
    for op in moved:  # the faketime file was written on the node the op names
        node = op["value"]["node"]
        assert any("/run/faultline/faketime" in c for c in op["value"]["commands"][node])
    healed = [o for o in ops if o.get("process") == "nemesis" and o["f"] == "heal-clock"
              and o["type"] == "ok" and o["value"].get("commands")]  # fmt: skip
    assert healed, "no clock fault was healed"
    results = json.loads((run / "results.json").read_text())
    kinds = {a["kind"] for a in results["checkers"]["revisions"]["anomalies"]}
    assert "driver-acted-after-successor" in kinds, out
    assert code == 1
