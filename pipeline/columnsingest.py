"""The columns ingest engine: each history decoded whole by msgspec in the task,
then the Spark engine's per-event derivation on its Arrow columns.

Theory of operation. Measured on this 2-core machine (pipeline/README.md),
the Spark engine's cost is mostly its JSON reader (the JVM parses every
line, then every row crosses to Python as Arrow), and the rows engine's is
per-line Python. Here Spark only spreads the run directories over tasks, as
the rows engine does; each task reads a run's history.jsonl in one piece and
decodes it in one msgspec call into typed structs (C, no per-line Python),
keeping `value` as its raw JSON text (`msgspec.Raw`), and turns the structs
into Arrow columns, one list comprehension per field. From there the run
goes through exactly the Spark engine's code (`sparkingest.RunWriter.take`): the same
screen, the same derived columns, the same Parquet files, the same small
tables.

The rows engine keeps the last word on anything irregular, as with the Spark
engine: a history msgspec refuses as a whole (a corrupt or torn line, a
field of the wrong type, a blank line inside it), an empty one, one whose
screen flags a broken rule, and one with a process id written as a string
of digits (the screen tells clients by their id's text) go to it. Because
msgspec decodes with the format's own types, where Spark's reader takes a
number for a string field as its text, this engine has none of the Spark
engine's known differences from the rows engine (pipeline/README.md).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec

from checkers.history import RawEvent
from pipeline.sparkingest import RunWriter, gather

_DECODER = msgspec.json.Decoder(list[RawEvent])
_DIGITS = re.compile(r"-?[0-9]+")


def history_table(data: bytes) -> Any:
    """A history's bytes as the Arrow table `sparkingest._columns` takes, or
    None when the rows engine must take it (see the module doc)."""
    import pyarrow as pa

    body = data.rstrip(b"\n")
    if not body:
        return None
    try:
        lines = _DECODER.decode(b"[" + body.replace(b"\n", b",") + b"]")
    except msgspec.DecodeError:
        return None
    # One comprehension per field, spelled out: a tenth of the cost of a
    # transpose (astuple, attrgetter, zip) on this machine. A run has few
    # process ids: each is looked at once.
    ids = [ln.process for ln in lines]
    names = {p: p if p.__class__ is str else str(p) for p in set(ids)}
    if any(p.__class__ is str and _DIGITS.fullmatch(p) for p in names):
        return None
    process = [names[p] for p in ids]
    value = [bytes(ln.value) for ln in lines]  # b"" when absent
    try:
        return pa.table(_arrays(lines, process, value))
    except (OverflowError, pa.ArrowInvalid):  # an integer beyond int64
        return None


def _null_if_none(texts: Any) -> Any:
    """JSON null, or no value, as null: what Spark's reader gives."""
    import pyarrow as pa
    import pyarrow.compute as pc

    none = pc.or_(pc.equal(texts, "null"), pc.equal(texts, ""))
    return pc.if_else(none, pa.scalar(None, pa.string()), texts)


def _arrays(lines: list[RawEvent], process: list[str], value: list[bytes]) -> dict[str, Any]:
    import pyarrow as pa

    s, i64 = pa.string(), pa.int64()
    return {
        "index": pa.array([ln.index for ln in lines], i64),
        "time": pa.array([ln.time for ln in lines], i64),
        "process": pa.array(process, s),
        "type": pa.array([ln.type for ln in lines], s),
        "f": pa.array([ln.f for ln in lines], s),
        "key": pa.array([ln.key for ln in lines], s),
        "value": _null_if_none(pa.array(value, s)),  # msgspec checked it is UTF-8
        "node": pa.array([ln.node for ln in lines], s),
        "error": pa.array([ln.error for ln in lines], s),
        "revision": pa.array([ln.revision for ln in lines], i64),
        "group": pa.array([ln.group for ln in lines], s),
        "_corrupt_record": pa.nulls(len(lines), s),
    }


def ingest_part(store: str, lake: str, ingest_id: str, task: int, dirs: list[str]) -> list[Any]:
    """One task: its runs' rows written, and each run's outcome."""
    part = RunWriter(store, lake, ingest_id, task)
    for run_dir in dirs:
        try:
            run = history_table((Path(run_dir) / "history.jsonl").read_bytes())
        except OSError:  # gone or unreadable: the rows engine names why
            run = None
        part.take(Path(run_dir), run)
    part.flush()
    return part.outcomes


def ingest_columns(
    spark: Any, store: str, lake: Path, todo: list[str], ingest_id: str
) -> tuple[dict[str, int], list[tuple[str, str]], list[str]]:
    """Ingests `todo` (run dirs, each with a history.jsonl); returns (rows per
    table, skipped runs, runs left to the rows engine)."""
    sc = spark.sparkContext
    where = str(lake)
    slices = max(1, min(len(todo), sc.defaultParallelism * 4))
    tasks = sc.parallelize(todo, slices).mapPartitionsWithIndex(
        lambda task, it: ingest_part(store, where, ingest_id, task, list(it))
    )
    outcomes = tasks.collect()
    return gather(outcomes, todo)
