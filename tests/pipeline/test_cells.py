"""nightly.html keys its cells by db and backend too (issue 23): a sim run and a Docker
run of one workload x nemesis, and an ember run and an etcd run, are separate figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from harness.synthetic import make_run
from pipeline.analyze import analyze
from pipeline.ingest import ingest

# (backend, db, valid) of three runs of one test name: same workload x nemesis.
RUNS = (("sim", "ember", True), ("docker", "ember", False), ("docker", "etcd", True))


def _store(root: Path) -> None:
    for seed, (backend, db, valid) in enumerate(RUNS, start=1):
        run = make_run(root, seed=seed, ops=120, valid=valid, name="cells",
                       started=1_763_500_000 + seed * 60)  # fmt: skip
        plan: dict[str, Any] = msgspec.json.decode(run.plan.read_bytes())
        plan["backend"], plan["db"] = backend, db
        run.plan.write_bytes(msgspec.json.encode(plan))


def test_cells_are_keyed_by_db_and_backend(spark: Any, tmp_path: Path) -> None:
    """Three rows where workload x nemesis alone would give one, and the page names them."""
    _store(tmp_path / "store")
    ingest(spark, tmp_path / "store", tmp_path / "lake")
    tables = analyze(spark, tmp_path / "lake")
    rates = tables["failure_rates"]
    got = {(r.db, r.backend): (r.runs, r.invalid) for r in rates.itertuples()}
    assert got == {
        ("ember", "sim"): (1, 0), ("ember", "docker"): (1, 1), ("etcd", "docker"): (1, 0)
    }  # fmt: skip
    assert len(set(zip(rates["workload"], rates["nemesis"], strict=True))) == 1
    assert set(zip(tables["trends"]["db"], tables["trends"]["backend"], strict=True)) == set(got)
    page = (tmp_path / "lake" / "nightly.html").read_text()
    workload, nemesis = rates["workload"].iloc[0], rates["nemesis"].iloc[0]
    for db, backend in got:  # the figure's x labels (plotly's JSON writes "/" as \u002f)
        assert f"{db} {backend}: {workload} \\u002f {nemesis}" in page
    assert "<th>db</th>" in page
    assert "<th>backend</th>" in page  # and the tables' columns
