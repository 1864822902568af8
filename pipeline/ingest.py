"""The ingest job: store runs -> the Parquet lake.

Theory of operation. The driver lists the store's runs and drops those the
lake's `runs` table already holds (a run's id is its dir relative to the
store), so ingesting a run twice changes nothing. The rest go to one of three
engines writing the same lake. "columns" (the default,
pipeline/columnsingest.py) spreads run dirs over tasks, each decoding a
history whole with msgspec into Arrow columns; "spark"
(pipeline/sparkingest.py) reads every history with Spark's JSON reader; both
derive the per-event columns on Arrow batches with the same code, and hand
the runs they find irregular to "rows", which turns a run into rows with
pipeline/extract.py. A run no engine can trust becomes a `_skipped` row (its
id and the reason), which is logged and kept in `lake/_skipped.json`, never a
failed job. All write Parquet files in Spark's layout, partitioned by date, test,
workload and nemesis, a run's `runs` row after its other rows: a run is in
the lake once its `runs` row is. Child rows carry the `ingest_id` of the
ingest that wrote them, and readers keep only those whose (run_id,
ingest_id) is in `runs` (`read_table`), so an ingest that dies midway leaves
rows no reader sees, and the next ingest writes the run afresh.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.store import iter_runs
from pipeline.columnsingest import ingest_columns
from pipeline.extract import run_id
from pipeline.lakefiles import write_part
from pipeline.lakeversion import check_lake, write_marker
from pipeline.schemas import TABLES, spark_schema
from pipeline.sparkingest import ingest_spark

log = logging.getLogger("faultline.pipeline")
SKIPPED_FILE = "_skipped.json"
ENGINES = ("columns", "spark", "rows")  # pipeline/cli.py spells them too


@dataclass
class IngestReport:
    """What one ingest did."""

    ingest_id: str
    found: int = 0
    already: int = 0
    ingested: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)
    by_rows: int = 0  # runs extracted by the rows engine (with another engine, the irregular ones)
    elapsed_s: float = 0.0


def read_table(spark: Any, lake: Path, table: str, *, committed: bool = True) -> Any:
    """A lake table as a DataFrame (empty if never written).

    With `committed`, child tables keep only rows whose ingest also wrote the
    run's `runs` row (see the module doc).
    """
    path = lake / table
    if not path.is_dir():
        return spark.createDataFrame([], spark_schema(table))
    df = spark.read.schema(spark_schema(table)).parquet(str(path))
    if committed and table != "runs":
        runs = read_table(spark, lake, "runs").select("run_id", "ingest_id")
        df = df.join(runs, ["run_id", "ingest_id"], "left_semi")
    return df


def ingested_ids(spark: Any, lake: Path) -> set[str]:
    """The run ids the lake holds."""
    if not (lake / "runs").is_dir():
        return set()  # a new lake: skip a Spark job
    runs = read_table(spark, lake, "runs").select("run_id").distinct()
    return {row.run_id for row in runs.collect()}


def ingest(
    spark: Any, store: Path, lake: Path, *, progress: Any = None, engine: str = "columns"
) -> IngestReport:
    """Ingests the store's new runs into the lake; see the module doc.

    `engine` "columns" (the default) decodes each history whole into Arrow
    columns (pipeline/columnsingest.py), "spark" reads them with Spark's JSON
    reader (pipeline/sparkingest.py); both hand the runs they find irregular
    to "rows", which extracts each run with per-run Python
    (pipeline/extract.py). All three write the same lake
    (tests/pipeline/test_engines.py); "spark" reads a few malformed inputs
    the rows engine refuses (pipeline/README.md, "Three ingest engines").
    """
    if engine not in ENGINES:
        raise ValueError(f"unknown ingest engine {engine!r}: one of {', '.join(ENGINES)}")
    check_lake(lake, writing=True)  # before any file is written
    started = time.monotonic()
    report = IngestReport(ingest_id=time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8])
    paths = [str(r.path) for r in iter_runs(store)]
    report.found = len(paths)
    done = ingested_ids(spark, lake)
    todo = [p for p in paths if run_id(store, p) not in done]
    report.already = len(paths) - len(todo)
    report.rows = dict.fromkeys(TABLES, 0)
    if todo:
        write_marker(lake)
    if todo and engine != "rows":
        reader = "Spark's reader" if engine == "spark" else "whole-file decoding"
        if progress is not None:
            progress(f"ingesting {len(todo)} runs with {reader}")
        fast = ingest_spark if engine == "spark" else ingest_columns
        # A run without a history is the rows engine's to skip, with its reason.
        readable = [p for p in todo if (Path(p) / "history.jsonl").is_file()]
        if readable:
            counts, skipped, left = fast(spark, str(store), lake, readable, report.ingest_id)
            report.rows = counts
            report.skipped.extend(skipped)
            taken = set(readable)
            todo = [p for p in todo if p not in taken] + left
    if todo:
        report.by_rows = len(todo)
        _ingest_runs(spark, str(store), lake, todo, report, progress)
    report.ingested = report.rows["runs"]
    for rid, reason in report.skipped:
        log.warning("skipped run %s: %s", rid, reason)
    lake.mkdir(parents=True, exist_ok=True)
    listed = [{"run_id": rid, "reason": reason} for rid, reason in sorted(report.skipped)]
    (lake / SKIPPED_FILE).write_text(json.dumps(listed, indent=2) + "\n", encoding="utf-8")
    report.elapsed_s = time.monotonic() - started
    return report


def _ingest_runs(
    spark: Any, store: str, lake: Path, todo: list[str], report: IngestReport, progress: Any
) -> None:
    sc = spark.sparkContext
    ingest_id, where = report.ingest_id, str(lake)
    slices = max(1, min(len(todo), sc.defaultParallelism * 4))
    if progress is not None:
        progress(f"ingesting {len(todo)} runs in {slices} tasks")
    # Each task extracts its runs and writes their Parquet files itself (pipeline/lakefiles.py).
    parts = sc.parallelize(todo, slices).mapPartitionsWithIndex(
        lambda task, paths: [write_part(store, list(paths), where, ingest_id, task)]
    )
    counts: Counter[str] = Counter(report.rows)
    for part_counts, skipped in parts.collect():
        counts.update(part_counts)
        report.skipped.extend(skipped)
    report.rows = {t: counts[t] for t in TABLES}
