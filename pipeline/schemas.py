"""The lake's tables: their columns, in order, with Spark SQL types.

Extraction (pipeline/extract.py) produces plain tuples in exactly this
column order, so it runs on executors without importing Spark; `spark_schema`
turns a table's columns into a Spark schema for `createDataFrame`.

Every table carries `run_id` (the run dir relative to the store, e.g.
`ember-default/20261121T120000-7`) and `ingest_id` (the ingest that wrote
the row: analysis only trusts child rows whose ingest also wrote the run's
`runs` row, so a crashed ingest's leftovers are ignored), plus the partition
columns `date`, `test` (the plan's name), `workload`, `nemesis`. Lake format
1 had no `test` partition; its `runs` kept `test` as a data column, which a
reader with these schemas still finds there (pipeline/lakeversion.py).
"""

from __future__ import annotations

from typing import Any

PARTITION_COLUMNS = ("date", "test", "workload", "nemesis")  # lake format 2
_KEYS = (("run_id", "string"), ("ingest_id", "string"))
_PARTS = tuple((c, "string") for c in PARTITION_COLUMNS)

TABLES: dict[str, tuple[tuple[str, str], ...]] = {
    "runs": (
        *_KEYS,
        ("started", "string"),
        ("seed", "long"),
        ("backend", "string"),
        ("nodes", "int"),
        ("version", "string"),
        ("git_rev", "string"),
        ("plan_key", "string"),  # hash of the plan without version fields: same test, same seed
        ("plan_json", "string"),
        ("valid", "string"),  # "true" / "false" / "unknown"
        ("checker_verdicts", "map<string,string>"),
        ("reasons", "array<string>"),
        ("ops", "long"),
        ("events", "long"),
        ("duration_s", "double"),
        ("check_elapsed_s", "double"),
        ("n_anomalies", "int"),
        ("n_faults", "int"),
        ("n_changes", "int"),
        *_PARTS,
    ),
    "operations": (
        *_KEYS,
        ("idx", "long"),
        ("time_ns", "long"),
        ("process", "string"),
        ("type", "string"),
        ("f", "string"),
        ("key", "string"),
        ("value", "string"),  # JSON
        ("node", "string"),
        ("error", "string"),
        ("revision", "long"),
        ("grp", "string"),
        # On completions only: the paired op's latency and what it overlapped.
        ("latency_ns", "long"),
        ("in_fault", "boolean"),
        ("in_change", "boolean"),
        *_PARTS,
    ),
    "faults": (
        *_KEYS,
        ("fault", "string"),
        ("start_ns", "long"),
        ("end_ns", "long"),
        ("unavailable_ms", "double"),
        ("phases", "array<string>"),  # protocol phases in force during the fault
        *_PARTS,
    ),
    "changes": (
        *_KEYS,
        ("grp", "string"),
        ("token", "string"),
        ("start_ns", "long"),
        ("end_ns", "long"),
        ("stages", "array<string>"),
        ("outcome", "string"),  # done / error:<status> / unfinished
        ("unavailable_ms", "double"),
        *_PARTS,
    ),
    "rebalances": (
        *_KEYS,
        ("node", "string"),
        ("kind", "string"),
        ("time_ns", "long"),
        ("zone", "string"),
        ("partition", "string"),
        ("keys", "array<string>"),
        ("revision", "long"),
        ("direction", "string"),
        ("outcome", "string"),
        *_PARTS,
    ),
    "anomalies": (
        *_KEYS,
        ("checker", "string"),
        ("kind", "string"),
        ("message", "string"),
        ("n_ops", "int"),
        ("time_ns", "double"),
        *_PARTS,
    ),
}
# Written in this order: `runs` last, as the commit record of an ingest.
WRITE_ORDER = ("operations", "faults", "changes", "rebalances", "anomalies", "runs")


def columns(table: str) -> list[str]:
    """The column names of `table`, in row order."""
    return [name for name, _ in TABLES[table]]


def spark_schema(table: str) -> Any:
    """The Spark StructType of `table` (pyspark is untyped: Any)."""
    from pyspark.sql import types as t

    simple = {"string": t.StringType(), "long": t.LongType(), "int": t.IntegerType(),
              "double": t.DoubleType(), "boolean": t.BooleanType()}  # fmt: skip
    kinds = simple | {
        "array<string>": t.ArrayType(t.StringType()),
        "map<string,string>": t.MapType(t.StringType(), t.StringType()),
    }
    return t.StructType([t.StructField(name, kinds[kind], True) for name, kind in TABLES[table]])


def arrow_type(kind: str) -> Any:
    """The Arrow type of a Spark SQL type name (as the schemas spell them)."""
    import pyarrow as pa

    return {
        "string": pa.string(), "long": pa.int64(), "int": pa.int32(), "double": pa.float64(),
        "boolean": pa.bool_(), "array<string>": pa.list_(pa.string()),
        "map<string,string>": pa.map_(pa.string(), pa.string()),
    }[kind]  # fmt: skip
