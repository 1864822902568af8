"""`faultline pipeline all` on a real Spark standalone cluster equals `local[*]`.

A master and two workers (one core each) start on 127.0.0.1 from the pyspark
package's own launcher (pipeline/standalone.py). The store holds real runs,
one on a Docker cluster of ember and two under the simulator, beside the
synthetic runs of conftest.py (invalid, crashed with a torn last line,
corrupt). Both pipelines run as `faultline` processes, as a user would run
them, and their lakes are compared row for row (the ingest id aside, which
names each ingest) with nightly.html byte for byte (its generation line
aside). The cluster stops even when the test fails (a context manager whose
`finally` ends each daemon's process session).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pipeline.standalone import cluster_env, standalone_cluster
from tests.harness.cluster_fixtures import require_docker
from tests.pipeline.conftest import Store

pytestmark = [pytest.mark.spark_cluster, pytest.mark.docker, pytest.mark.slow]

FAULTLINE = [sys.executable, "-m", "harness.cli"]
JOB_S = 900.0  # liveness bound for one pipeline process, not a speed assertion
RUN_S = 400.0


def _faultline(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*FAULTLINE, *args], capture_output=True, text=True, timeout=timeout,
                          env=cluster_env(), check=False)  # fmt: skip
    assert proc.returncode == 0, f"faultline {' '.join(args)}: {proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def real_store(store: Store, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The synthetic store plus one Docker run and two sim runs of ember."""
    require_docker()
    root = tmp_path_factory.mktemp("cluster") / "store"
    shutil.copytree(store.root, root, symlinks=True)
    _faultline("run", "--nodes", "3", "--workload", "register", "--nemesis", "partition",
               "--time-limit", "6", "--quiet-period", "2", "--seed", "11", "--store", str(root),
               "--name", "docker-real", "--no-progress", timeout=RUN_S)  # fmt: skip
    for seed in ("11", "12"):
        _faultline("run", "--backend", "sim", "--time-limit", "6", "--seed", seed,
                   "--store", str(root), "--name", "sim-real", "--no-progress",
                   timeout=RUN_S)  # fmt: skip
    return root


def _rows(path: Path) -> list[str]:
    """A table's rows (every Parquet file under `path`, partition columns from the
    path), each as canonical JSON without the ingest id, sorted."""
    import pyarrow.dataset as ds

    table = ds.dataset(str(path), format="parquet", partitioning="hive").to_table()
    if "ingest_id" in table.column_names:
        table = table.drop(["ingest_id"])
    return sorted(json.dumps(row, sort_keys=True, default=str) for row in table.to_pylist())


def _tables(lake: Path) -> dict[str, Path]:
    tables = {p.name: p for p in lake.iterdir() if p.is_dir() and p.name != "analysis"}
    tables |= {f"analysis/{p.stem}": p for p in (lake / "analysis").glob("*.parquet")}
    return tables


def _page(lake: Path) -> str:
    text = (lake / "nightly.html").read_text()
    return re.sub(r'<p class="meta">[^<]*</p>', "", text)


@pytest.fixture(scope="module")
def lakes(real_store: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The store through `pipeline all` on the cluster, then on local[*]."""
    work = tmp_path_factory.mktemp("lakes")
    with standalone_cluster(work / "cluster", workers=2, cores=1) as url:
        cluster = _faultline("pipeline", "all", "--master", url, "--store", str(real_store),
                             "--lake", str(work / "cluster-lake"), timeout=JOB_S)  # fmt: skip
        app_logs = sorted((work / "cluster").glob("worker-*/app-*/*/stderr"))
    _faultline("pipeline", "all", "--master", "local[*]", "--store", str(real_store),
               "--lake", str(work / "local-lake"), timeout=JOB_S)  # fmt: skip
    return {"cluster": work / "cluster-lake", "local": work / "local-lake",
            "cluster_stderr": cluster.stderr, "executor_logs": app_logs}  # fmt: skip


def test_the_jobs_ran_on_the_clusters_executors(lakes: dict[str, Any]) -> None:
    """Both workers launched executors for the app (not a silent local fallback)."""
    workers = {p.parts[-4] for p in lakes["executor_logs"]}
    assert workers == {"worker-0", "worker-1"}, lakes["executor_logs"]


def test_the_cluster_lake_equals_the_local_one_row_for_row(
    lakes: dict[str, Any], real_store: Path
) -> None:
    """Every table and analysis table, every row; the real runs are in it."""
    cluster, local = _tables(lakes["cluster"]), _tables(lakes["local"])
    assert sorted(cluster) == sorted(local)
    assert {"runs", "operations", "faults", "analysis/failure_rates"} <= set(cluster)
    for name in sorted(local):
        assert _rows(cluster[name]) == _rows(local[name]), name
    runs = [json.loads(r) for r in _rows(cluster["runs"])]
    backends = {r["backend"] for r in runs if r["test"] in ("docker-real", "sim-real")}
    assert backends == {"docker", "sim"}
    skipped = json.loads((lakes["cluster"] / "_skipped.json").read_text())
    assert skipped == json.loads((lakes["local"] / "_skipped.json").read_text())
    assert len(skipped) == 3  # conftest's corrupt runs


def test_nightly_html_equals_the_local_one(lakes: dict[str, Any]) -> None:
    """The same tables make the same page (only the generation line differs)."""
    assert _page(lakes["cluster"]) == _page(lakes["local"])
