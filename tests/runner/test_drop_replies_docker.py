"""drop-replies on Docker (marked docker): the nemesis switches ember's
`http.drop-reply` failpoint on at the metastore leader over the admin API
and off at the heal; the harness's metastore writes that lose their answer
are sent again with their session, and ember applies each once, so the run
is valid. The node's audit log shows the failpoint's toggles and how many
answers it swallowed. With the planted `metastore.ignore-sessions` this plan
(30 s) was invalid by linearizability in seeds 1-4 and valid without it in
seeds 2-4 (share 0.1-0.5); at 0.1-0.8, on revisions ranked by the watch
record, seeds 1-4 were invalid by linearizability and by revisions'
`watch-write-applied-twice`, and valid without it. The simulator pins the
planted case (tests/sim/test_meta_resend.py).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

from harness.cli import main
from tests.harness.cluster_fixtures import require_docker

pytestmark = pytest.mark.docker

PLAN = {
    "name": "pytest-drop-replies", "seed": 1, "backend": "docker",
    "nodes": ["n1", "n2", "n3"], "db": "ember",
    "workload": ["register", "metastore"], "nemesis": ["drop-replies"],
    "concurrency": 6, "rate_hz": 30.0, "time_limit_s": 25.0, "quiet_s": 3.0,
    "options": {"nemesis_mode": "periodic", "nemesis_targets": ["meta-leader"],
                "nemesis_gap_s": 1.5, "meta_traffic": ["delete", "range", "resend"],
                "meta_rate_hz": 30.0},
}  # fmt: skip


def test_dropped_answers_are_resent_and_applied_once(tmp_path: Path) -> None:
    require_docker()
    (tmp_path / "plan.json").write_text(json.dumps(PLAN))
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["run", "--plan", str(tmp_path / "plan.json"),
                     "--store", str(tmp_path / "store"), "--no-progress"])  # fmt: skip
    out = printed.getvalue()
    found = re.search(r"replay: faultline replay (\S+)", out)
    assert found, out
    run = Path(found.group(1))
    ops = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    faults = [o for o in ops if o.get("process") == "nemesis" and o["f"] == "drop-replies"
              and o["type"] != "invoke"]  # fmt: skip
    assert faults, out
    assert all(o["type"] == "ok" for o in faults), faults
    heals = [o for o in ops if o.get("process") == "nemesis" and o["f"] == "heal-drop-replies"
             and o["type"] == "ok"]  # fmt: skip
    assert heals, "no drop-replies fault was healed"
    # The failpoint was on where the ops say, and swallowed answers there.
    swallowed = 0
    for node in {o["value"]["node"] for o in faults}:
        for line in (run / "nodes" / node / "events.jsonl").read_text().splitlines():
            ev = json.loads(line)
            if ev.get("kind") == "failpoint" and ev.get("name") == "http.drop-reply":
                swallowed += 0 if ev["enabled"] else ev["params"]["hits"]
    assert swallowed > 0, "the failpoint never dropped an answer"
    resent = (run / "harness.log").read_text().count("after an unknown outcome")
    assert resent > 0, "no metastore write was sent again"
    results = json.loads((run / "results.json").read_text())
    assert results["checkers"]["linearizable"]["valid"] is True, out
    basis = results["checkers"]["linearizable"]["figures"]["metastore"]["revisions"]
    assert basis.startswith("ranked by the watch record"), basis
    # The closing watch covers the final reads and the last ops on real time too.
    assert "the revisions of 0 of " in basis, basis
    assert results["valid"] is True, out
    assert code == 0, out
