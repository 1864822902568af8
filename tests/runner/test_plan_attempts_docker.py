"""A plan file that `faultline shrink` wrote replays on Docker with
`--attempts N` and the count it prints is the attempts whose own verdict
carries the expected rule (marked docker).

The plan is what shrink wrote for a simulated `raft.skip-catchup` find: the
change-peers workload with the planted defect, one phase-triggered fault of
the mix kept (`nemesis_keep`), the expected checker and rule. On Docker the
fault fires by the phase the cluster reaches, so whether it lands is the
cluster's business; the test holds the count to the attempts' results."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harness.cli import main
from tests.harness.cluster_fixtures import require_docker

pytestmark = pytest.mark.docker

PLAN = {
    "name": "pytest-attempts", "seed": 7, "backend": "sim", "nodes": ["n1", "n2", "n3", "n4", "n5"],
    "db": "ember", "workload": ["register", "change-peers"], "nemesis": ["mix"],
    "concurrency": 4, "rate_hz": 20.0, "time_limit_s": 8.0, "quiet_s": 3.0,
    "options": {
        "nemesis_mode": "both", "failpoints": {"raft.skip-catchup": {}},
        "nemesis_kinds": ["partition"], "nemesis_phases": ["joint"], "nemesis_keep": [0],
        "expect": {"checker": "raft", "rule": "joint-before-catchup"},
    },
}  # fmt: skip


def test_attempts_on_docker_count_the_runs_that_reproduce(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    require_docker()
    plan = tmp_path / "shrunk.json"
    plan.write_text(json.dumps(PLAN))
    code = main(["run", "--plan", str(plan), "--backend", "docker", "--attempts", "2",
                 "--store", str(tmp_path / "store"), "--no-progress"])  # fmt: skip
    out = capsys.readouterr().out
    counted = re.search(r"reproduced raft \(joint-before-catchup\) in (\d) of 2 attempts "
                        r"\(docker\)", out)  # fmt: skip
    assert counted, out
    runs = [Path(p) for p in re.findall(r"replay: faultline replay (\S+)", out)]
    assert len(runs) == 2, out
    reproduced = 0
    for run in runs:
        assert json.loads((run / "test.json").read_text())["backend"] == "docker"
        raft = json.loads((run / "results.json").read_text())["checkers"]["raft"]
        reproduced += "joint-before-catchup" in {a["kind"] for a in raft["anomalies"]}
        started = [op for op in map(json.loads, (run / "history.jsonl").read_text().splitlines())
                   if op.get("process") == "nemesis" and op["type"] == "invoke"
                   and not op["f"].startswith("heal")]  # fmt: skip
        assert len(started) <= 1, started  # only the kept fault may start
    assert int(counted.group(1)) == reproduced
    assert reproduced >= 1, out  # the planted defect shows on Docker too
    assert code == (1 if reproduced else 0)
