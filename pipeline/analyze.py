"""The analyze job: the lake's runs -> summary tables and nightly.html.

Every table is grouped by db x backend x workload x nemesis (a night's
cell, harness.nightly's `Cell.key`: a sim run and a Docker run of one
workload x nemesis, or an ember run and an etcd run, are different cells) x
version unless it says otherwise, computed in Spark (so it scales with the lake), and written as
Parquet under `lake/analysis/<table>` (replaced whole on each analyze: the
tables are small and always recomputed from every run). The tables:

- failure_rates: runs and their verdicts; failure_rate = invalid / runs.
- anomaly_kinds: anomalies per checker and kind, and how many runs had them.
- latency: quantiles (ms) of ok client ops by phase: during a fault, a
  membership change, both, or neither ("quiet").
- unavailability: per membership change (audit events), the longest stretch
  without an ok client op, and how changes ended.
- verdict_flips: plans (same test, seed and settings) whose verdict changed
  from one build (version and git revision) to the next (ordered by when
  first run).
- flaky_seeds: plans whose runs of one build disagree (crashes aside).
- coverage: fault kind x protocol phase, with zero rows for combinations
  never exercised.
- trends: per night (date) x cell: runs, failure rate, p99.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import Window
from pyspark.sql import functions as F  # noqa: N812 -- Spark's own idiom; pyspark is untyped

from pipeline.extract import CRASHED, IDLE, PHASES
from pipeline.ingest import read_table

CELL = ("db", "backend", "workload", "nemesis")
GROUP = (*CELL, "version")
ANALYSIS_DIR = "analysis"
ANALYSIS_TABLES = (
    "failure_rates",
    "anomaly_kinds",
    "latency",
    "unavailability",
    "verdict_flips",
    "flaky_seeds",
    "coverage",
    "trends",
)
QUANTILES = (0.5, 0.9, 0.99)


def with_cell(runs: Any) -> Any:
    """The runs table with `db` (the plan's; runs from before `--db` existed were
    ember's) and `backend` always set, so both can key a group."""
    db = F.coalesce(F.get_json_object("plan_json", "$.db"), F.lit("ember"))
    return runs.withColumn("db", db).withColumn(
        "backend", F.coalesce(F.col("backend"), F.lit("unknown"))
    )


def _with_version(df: Any, runs: Any) -> Any:
    """A child table with its run's db, backend and version (child tables carry none)."""
    return df.join(runs.select("run_id", "db", "backend", "version"), "run_id")


def failure_rates(runs: Any) -> Any:
    """Runs per group and verdict; failure_rate = invalid runs / runs."""

    def count(value: str, name: str) -> Any:
        return F.sum(F.when(F.col("valid") == value, 1).otherwise(0)).alias(name)

    return (
        runs.groupBy(*GROUP)
        .agg(
            F.count("*").alias("runs"),
            count("true", "valid"),
            count("false", "invalid"),
            count("unknown", "unknown"),
            count(CRASHED, CRASHED),
        )
        .withColumn("failure_rate", F.col("invalid") / F.col("runs"))
        .orderBy(*GROUP)
    )


def anomaly_kinds(anomalies: Any, runs: Any) -> Any:
    """Anomalies per group, checker and kind, with the runs they appeared in."""
    return (
        _with_version(anomalies, runs)
        .groupBy(*GROUP, "checker", "kind")
        .agg(F.count("*").alias("anomalies"), F.countDistinct("run_id").alias("runs"))
        .orderBy(*GROUP, "checker", "kind")
    )


def ok_client_ops(operations: Any) -> Any:
    """The completions of ok client operations (client processes are integers)."""
    is_client = F.col("process").rlike("^[0-9]+$")
    return operations.where((F.col("type") == "ok") & F.col("latency_ns").isNotNull() & is_client)


def latency(ops: Any, runs: Any) -> Any:
    """Latency quantiles (ms) of ok client ops (`ops`) in faults, changes, both, or quiet."""
    phase = (
        F.when(F.col("in_fault") & F.col("in_change"), "fault+change")
        .when(F.col("in_fault"), "fault")
        .when(F.col("in_change"), "change")
        .otherwise("quiet")
    )
    q = F.percentile_approx(F.col("latency_ns") / 1e6, list(QUANTILES), 10_000)
    return (
        _with_version(ops.withColumn("phase", phase), runs)
        .groupBy(*GROUP, "phase")
        .agg(F.count("*").alias("ops"), q.alias("q"), F.max("latency_ns").alias("max_ns"))
        .select(
            *GROUP,
            "phase",
            "ops",
            *(F.col("q")[i].alias(f"p{round(x * 100)}_ms") for i, x in enumerate(QUANTILES)),
            (F.col("max_ns") / 1e6).alias("max_ms"),
        )
        .orderBy(*GROUP, "phase")
    )


def unavailability(changes: Any, runs: Any) -> Any:
    """Per group: membership changes, how they ended, and the unavailability they caused."""
    return (
        _with_version(changes, runs)
        .groupBy(*GROUP)
        .agg(
            F.count("*").alias("changes"),
            F.sum(F.when(F.col("outcome") == "done", 1).otherwise(0)).alias("done"),
            F.sum(F.when(F.col("outcome").startswith("error"), 1).otherwise(0)).alias("errors"),
            F.avg("unavailable_ms").alias("mean_unavailable_ms"),
            F.percentile_approx("unavailable_ms", 0.5, 10_000).alias("p50_unavailable_ms"),
            F.max("unavailable_ms").alias("max_unavailable_ms"),
            F.avg((F.col("end_ns") - F.col("start_ns")) / 1e6).alias("mean_duration_ms"),
        )
        .orderBy(*GROUP)
    )


def _plan_verdicts(runs: Any) -> Any:
    """One row per (plan, build): its runs' verdicts, crashes aside. The build
    is the version and, where the run recorded one, its git revision
    (`0.1.0@9598add39913`): the package version stays one number across
    commits, so runs of a regressing commit read as a flaky seed of 0.1.0
    instead of a verdict that flipped from one commit to the next."""
    known = F.col("git_rev").isNotNull() & (F.col("git_rev") != "unknown")
    build = F.when(known, F.concat("version", F.lit("@"), "git_rev")).otherwise(F.col("version"))
    return (
        runs.where(F.col("valid") != CRASHED)
        .withColumn("version", build)
        .groupBy("plan_key", "test", "seed", *GROUP)
        .agg(
            F.count("*").alias("runs"),
            F.array_sort(F.collect_set("valid")).alias("verdicts"),
            F.min("started").alias("first_started"),
        )
    )


def flaky_seeds(runs: Any) -> Any:
    """Plans whose runs of one version disagree: the same seed, different verdicts."""
    return (
        _plan_verdicts(runs)
        .where(F.size("verdicts") > 1)
        .drop("first_started")
        .orderBy("test", "seed", "version")
    )


def verdict_flips(runs: Any) -> Any:
    """Plans whose verdict differs between consecutive versions."""
    per = _plan_verdicts(runs).withColumn(
        "verdict", F.when(F.size("verdicts") > 1, "flaky").otherwise(F.col("verdicts")[0])
    )
    order = Window.partitionBy("plan_key").orderBy("first_started", "version")
    return (
        per.withColumn("from_version", F.lag("version").over(order))
        .withColumn("from_verdict", F.lag("verdict").over(order))
        .where(F.col("from_version").isNotNull() & (F.col("from_verdict") != F.col("verdict")))
        .select(
            "plan_key",
            "test",
            "seed",
            *CELL,
            "from_version",
            "from_verdict",
            F.col("version").alias("to_version"),
            F.col("verdict").alias("to_verdict"),
        )
        .orderBy("test", "seed", "to_version")
    )


def coverage(faults: Any, spark: Any) -> Any:
    """Fault kind x phase: how many faults and runs hit it; zeros were never exercised."""
    hits = (
        faults.select("run_id", "fault", F.explode("phases").alias("phase"))
        .groupBy("fault", "phase")
        .agg(F.count("*").alias("faults"), F.countDistinct("run_id").alias("runs"))
    )
    phases = spark.createDataFrame([(p,) for p in (*PHASES, IDLE)], "phase string")
    grid = faults.select("fault").distinct().crossJoin(phases)
    return (
        grid.join(hits, ["fault", "phase"], "left")
        .fillna(0, ["faults", "runs"])
        .withColumn("exercised", F.col("faults") > 0)
        .orderBy("fault", "phase")
    )


def trends(runs: Any, ok: Any) -> Any:
    """Per night x cell: runs, failure rate and p99 of ok client ops (`ok`)."""
    by_night = ("date", *CELL)
    ok = ok.join(runs.select("run_id", "db", "backend"), "run_id")
    rates = runs.groupBy(*by_night).agg(
        F.count("*").alias("runs"),
        F.avg(F.when(F.col("valid") == "false", 1.0).otherwise(0.0)).alias("failure_rate"),
    )
    p99 = ok.groupBy(*by_night).agg(
        F.percentile_approx(F.col("latency_ns") / 1e6, 0.99, 10_000).alias("p99_ms")
    )
    return rates.join(p99, list(by_night), "left").orderBy(*by_night)


def analyze(spark: Any, lake: Path, *, progress: Any = None) -> dict[str, Any]:
    """Computes every analysis table, writes them and nightly.html; returns them as pandas."""
    from pipeline.html import write_html
    from pipeline.lakeversion import check_lake

    check_lake(lake, writing=False)
    started = time.monotonic()
    runs = with_cell(read_table(spark, lake, "runs")).cache()
    # Both latency tables read the ok client completions: cache them once.
    ok = ok_client_ops(read_table(spark, lake, "operations")).cache()
    builders: dict[str, Callable[[], Any]] = {
        "failure_rates": lambda: failure_rates(runs),
        "anomaly_kinds": lambda: anomaly_kinds(read_table(spark, lake, "anomalies"), runs),
        "latency": lambda: latency(ok, runs),
        "unavailability": lambda: unavailability(read_table(spark, lake, "changes"), runs),
        "verdict_flips": lambda: verdict_flips(runs),
        "flaky_seeds": lambda: flaky_seeds(runs),
        "coverage": lambda: coverage(read_table(spark, lake, "faults"), spark),
        "trends": lambda: trends(runs, ok),
    }
    out: dict[str, Any] = {}
    for name, build in builders.items():
        if progress is not None:
            progress(f"analyzing {name}")
        # The results are small (one row per group): one Spark job each to
        # compute them, then pyarrow writes the Parquet file from pandas.
        out[name] = build().toPandas()
        _write_parquet(out[name], lake / ANALYSIS_DIR / f"{name}.parquet")
    runs.unpersist()
    ok.unpersist()
    write_html(out, lake / "nightly.html", elapsed_s=time.monotonic() - started)
    return out


def _write_parquet(df: Any, path: Path) -> None:
    """Writes a small pandas table as one Parquet file, atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), tmp)
    tmp.replace(path)
