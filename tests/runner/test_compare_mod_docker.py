"""compare-mod on Docker (marked docker): ember's metastore transactions that
compare mod revisions, judged on the watch record's ranks against real
time. Clean, the run is valid with every op's revisions checked; with the
planted `metastore.compare-create-revision` (create_revision compared where
mod_revision was asked) the same plan is invalid by the metastore's
linearizability. Seeds 1-2 were caught that way and seed 1 was valid
without it (3 nodes, 30 s); the simulator pins more seeds
(tests/sim/test_whole_system.py).
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

FLAGS = ["--seed", "1", "--time-limit", "30", "--nodes", "3",
         "--workload", "register,metastore", "--meta-traffic", "delete,range,compare-mod",
         "--no-progress"]  # fmt: skip


def _run(tmp_path: Path, *extra: str) -> tuple[int, str, dict[str, object]]:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["run", *FLAGS, *extra, "--store", str(tmp_path / "store")])
    out = printed.getvalue()
    found = re.search(r"replay: faultline replay (\S+)", out)
    assert found, out
    return code, out, json.loads((Path(found.group(1)) / "results.json").read_text())


@pytest.mark.parametrize("planted", [False, True])
def test_mod_revision_comparisons_are_judged_on_real_time(tmp_path: Path, planted: bool) -> None:
    require_docker()
    extra = ["--failpoint", "metastore.compare-create-revision"] if planted else []
    code, out, results = _run(tmp_path, *extra)
    lin: dict[str, object] = results["checkers"]["linearizable"]  # type: ignore[index,assignment]
    basis = lin["figures"]["metastore"]["revisions"]  # type: ignore[index]
    assert basis.startswith("ranked by the watch record"), basis
    if planted:
        assert (code, results["valid"], lin["valid"]) == (1, False, False), out
        [anomaly] = lin["anomalies"]  # type: ignore[misc]
        assert anomaly["message"].startswith("metastore: "), anomaly
    else:
        assert "the revisions of 0 of " in basis, basis
        assert (code, results["valid"]) == (0, True), out
