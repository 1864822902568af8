"""Writing the lake's Parquet files from an executor, with pyarrow.

Why not `DataFrame.write`: the rows start in Python (one run's extraction),
and handing millions of Python tuples to the JVM row by row costs far more
than extracting them (measured in bench/pipeline.py). So each ingest task
extracts its share of runs, builds Arrow tables column by column and writes
them in Spark's own layout, which Spark then reads like any Parquet table:

    <lake>/<table>/date=<d>/test=<t>/workload=<w>/nemesis=<n>/part-<ingest>-<task>-<flush>.parquet

Partition values are escaped as Spark escapes them; partition columns live
in the path, not in the file. A file is written under a name starting with
`.` (which readers skip) and renamed into place, so a reader never sees half
a file, and a retried task overwrites its own files rather than adding more.
Within a task, `runs` rows are written after every other table's (see
pipeline/ingest.py for why that order makes an ingest safe to interrupt).
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from pipeline.extract import extract_rows
from pipeline.schemas import PARTITION_COLUMNS, TABLES, WRITE_ORDER, arrow_type

# Buffered rows per task before its tables are flushed to files: bounds memory.
FLUSH_ROWS = 500_000
# Characters Spark percent-escapes in partition directory names.
_ESCAPE = set("\"#%'*/:=?\\\x7f{[]^") | {chr(c) for c in range(32)}


def escape(value: str) -> str:
    """A partition value as Spark writes it in a directory name."""
    return "".join(f"%{ord(c):02X}" if c in _ESCAPE else c for c in value)


def write_table(lake: Path, table: str, rows: list[tuple[Any, ...]], name: str) -> None:
    """Writes `rows` of `table`, one file per partition they fall in."""
    import pyarrow as pa

    columns = TABLES[table]
    n_data = len(columns) - len(PARTITION_COLUMNS)  # partition columns come last
    groups: dict[tuple[str, ...], list[tuple[Any, ...]]] = defaultdict(list)
    for row in rows:
        groups[tuple(str(v) for v in row[n_data:])].append(row)
    fields = [pa.field(c, arrow_type(k)) for c, k in columns[:n_data]]
    for part, members in groups.items():
        cols = list(zip(*members, strict=True))[:n_data]
        data = pa.table([pa.array(col, f.type) for col, f in zip(cols, fields, strict=True)],
                        schema=pa.schema(fields))  # fmt: skip
        write_arrow(lake, table, part, data, name)


def write_arrow(lake: Path, table: str, part: tuple[str, ...], data: Any, name: str) -> None:
    """Writes the Arrow table `data` (no partition columns) as one file of the
    partition `part` of `table`, under a hidden name first."""
    import pyarrow.parquet as pq

    where = lake / table
    for column, value in zip(PARTITION_COLUMNS, part, strict=True):
        where = where / f"{column}={escape(value)}"
    where.mkdir(parents=True, exist_ok=True)
    tmp = where / f".{name}.parquet.tmp"
    pq.write_table(data, tmp)
    os.replace(tmp, where / f"{name}.parquet")


def write_part(
    store: str, paths: list[str], lake: str, ingest_id: str, task: int
) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Extracts `paths` and writes their rows; returns (rows per table, skipped runs)."""
    counts: Counter[str] = Counter()
    skipped: list[tuple[str, str]] = []
    buffered: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    flushes = 0

    def flush() -> None:
        nonlocal flushes
        for table in WRITE_ORDER:  # `runs` last
            if buffered[table]:
                name = f"part-{ingest_id}-{task:05d}-{flushes:04d}"
                write_table(Path(lake), table, buffered[table], name)
        buffered.clear()
        flushes += 1

    held = 0
    for path in paths:
        for table, row in extract_rows(store, path, ingest_id):
            counts[table] += 1
            if table == "_skipped":
                skipped.append((str(row[0]), str(row[1])))
                continue
            buffered[table].append(row)
            held += 1
        if held >= FLUSH_ROWS:  # only between runs: a run's rows share one flush
            flush()
            held = 0
    flush()
    return dict(counts), skipped
