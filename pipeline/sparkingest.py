"""The Spark ingest engine: histories read by Spark, per-event columns on Arrow batches.

Theory of operation. The rows engine (pipeline/lakefiles.py) parses every
history line in Python; here Spark's JSON reader does, and Python only sees
Arrow columns. One Spark job:

1. Every history.jsonl is read at once with an explicit schema (`history_schema`),
   PERMISSIVE: a line the reader cannot take lands in `_corrupt_record`.
   Each row carries its file and the block of it the task reads.
2. `mapInArrow` takes each partition's rows one history file at a time (a
   file's rows are contiguous and in order in a partition; a file Spark split
   between partitions goes to the rows engine). Per run, `_flagged` screens
   it against the format's rules with vectorized pandas; the same
   `HistoryFacts` the rows engine builds are built from columns (only the
   nemesis and membership events, a handful, become Events, paired by
   `checkers.history.pair` for `checkers.stats`' windows), and the run's
   small tables come from `extract.small_tables`, the rows engine's code.
3. The run's `operations` batch is its columns plus latency (the time since
   the previous event of the same process: in a valid history, the
   completion's invoke) and whether that interval meets a fault or change
   window, computed with numpy; Spark writes the batches in the lake's
   layout.
4. Each task writes its small tables with pyarrow (`lakefiles.write_table`)
   when its partition is done, `runs` into `lake/_staging/<ingest>/`, and its
   runs' outcomes beside them. Once the job has committed `operations`, the
   driver moves the staged `runs` files in: a run is in the lake once its
   `runs` row is (pipeline/ingest.py), and a job that dies leaves rows no
   reader keeps.

The rows engine keeps the last word on anything irregular: a run whose
history the screen flags (a corrupt line, a rule broken, a crashed run's
torn last line) or that Spark read no event of goes to it, which gives the
same reason or the same rows as always. The screen only has to be at least
as strict as `HistoryValidator`; the format's messages stay in one place.

Known differences, both outside what the harness writes: a field that must
be a string but holds a number is read as its text where msgspec refuses the
line, and a `value` that is a JSON string holding JSON text (say `"[1]"`)
reads as that JSON (Spark's reader does not keep a string's quotes).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import unquote, urlparse

import msgspec

from checkers.history import Event, pair
from checkers.stats import MEMBERSHIP_FS, change_windows, fault_windows
from pipeline.extract import (
    HistoryFacts,
    SkipRunError,
    partition,
    read_meta,
    run_id,
    small_tables,
    with_audit,
)
from pipeline.lakefiles import write_table
from pipeline.schemas import PARTITION_COLUMNS, TABLES, WRITE_ORDER, columns, spark_schema

# The history line format (DESIGN.md, checkers.history.Event) as Spark reads it.
# `value` is any JSON: a string column holds its text.
_HISTORY_FIELDS = (
    ("index", "long"), ("time", "long"), ("process", "string"), ("type", "string"),
    ("f", "string"), ("key", "string"), ("value", "string"), ("node", "string"),
    ("error", "string"), ("revision", "long"), ("group", "string"),
    ("_corrupt_record", "string"),
)  # fmt: skip
_CLIENT = r"^-?[0-9]+$"  # an integer process id: a client (a string one is the nemesis)
_TYPES = ("invoke", "ok", "fail", "info")
STAGING = "_staging"  # lake/_staging/<ingest>/: `runs` rows until `operations` is committed
# A value already as msgspec writes it: an integer, true/false, or an array or
# object with no whitespace, no escape and no digit followed by `.`, `e` or
# `E` (a float msgspec may spell otherwise; a string like "n1.x" is just redone).
_CANONICAL = r"-?[0-9]+|true|false|[\[{](?:[^\s\\0-9]|[0-9]+(?:[^\s\\.eE0-9]|$))*"


def history_schema() -> Any:
    """The Spark schema of a history line (plus `_corrupt_record`)."""
    from pyspark.sql import types as t

    kinds = {"long": t.LongType(), "string": t.StringType()}
    return t.StructType([t.StructField(n, kinds[k], True) for n, k in _HISTORY_FIELDS])


class _Columns(NamedTuple):
    """A run's columns as numpy arrays, in file order (`_columns`)."""

    index: Any
    time: Any
    client: Any  # an integer process id
    invoke: Any
    ok: Any
    info: Any
    f: Any  # codes: equal codes, equal f
    prev: Any  # the row of the previous event of the same process, or -1


def _columns(run: Any) -> _Columns | None:
    """The run's columns, or None when a line was unreadable or lacked a field."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = run.num_rows
    if run.column("_corrupt_record").null_count != n:
        return None
    if any(run.column(c).null_count for c in ("index", "time", "process", "type", "f")):
        return None
    types = run.column("type")
    if not pc.all(pc.is_in(types, value_set=pa.array(_TYPES))).as_py():
        return None

    def codes(name: str) -> Any:
        return run.column(name).combine_chunks().dictionary_encode().indices.to_numpy()

    def mask(values: Any) -> Any:
        return values.to_numpy(zero_copy_only=False).astype(bool)

    process = codes("process")
    order = np.argsort(process, kind="stable")  # by process, file order within one
    prev = np.full(n, -1, dtype=np.int64)
    same = process[order[1:]] == process[order[:-1]]
    prev[order[1:][same]] = order[:-1][same]
    return _Columns(
        index=run.column("index").to_numpy(), time=run.column("time").to_numpy(),
        client=mask(pc.match_substring_regex(run.column("process"), _CLIENT)),
        invoke=mask(pc.equal(types, "invoke")), ok=mask(pc.equal(types, "ok")),
        info=mask(pc.equal(types, "info")), f=codes("f"), prev=prev,
    )  # fmt: skip


def _flagged(cols: _Columns | None) -> bool:
    """Whether a run's events (in file order) may break the history format.

    As strict as checkers.history.HistoryValidator, vectorized: a line Spark
    could not read or that lacks a required field (`_columns` is None), index
    not increasing, time going back, and per process: an invoke while one is
    open or (a client) after its info, a completion with no open invoke or
    another f."""
    import numpy as np

    if cols is None:
        return True
    if (np.diff(cols.index) <= 0).any() or (np.diff(cols.time) < 0).any():
        return True
    has = cols.prev >= 0
    prev = np.where(has, cols.prev, 0)
    after_invoke = has & cols.invoke[prev]
    after_info = has & cols.info[prev]
    same_f = has & (cols.f[prev] == cols.f)
    bad_invoke = cols.invoke & (after_invoke | (cols.client & after_info))
    bad_done = ~cols.invoke & (~after_invoke | ~same_f)
    return bool((bad_invoke | bad_done).any())


def _event(row: dict[str, Any], client: bool) -> Event:
    value = row["value"]
    if value is not None:
        with contextlib.suppress(msgspec.DecodeError):  # else a JSON string, as its text
            value = msgspec.json.decode(value)
    process = int(row["process"]) if client else row["process"]
    return Event(index=row["index"], time=row["time"], process=process,
                 type=row["type"], f=row["f"], value=value)  # fmt: skip


def _facts(run: Any, cols: _Columns) -> tuple[HistoryFacts, list[Any]]:
    """HistoryFacts of a screened run, and its ops with the nemesis's and
    membership changes' among them (only those events become Events)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    membership = pc.is_in(run.column("f"), value_set=pa.array(sorted(MEMBERSHIP_FS)))
    control = np.flatnonzero(~cols.client | membership.to_numpy(zero_copy_only=False))
    rows = run.select(["index", "time", "process", "type", "f", "value"]).take(control)
    events = [_event(row, bool(cols.client[i]))
              for row, i in zip(rows.to_pylist(), control, strict=True)]  # fmt: skip
    ops = pair(events)
    times, invoke = cols.time, cols.invoke
    facts = HistoryFacts(
        events=len(times), end=int(times[-1]), client_ops=int((invoke & cols.client).sum()),
        ok_times=sorted(times[cols.ok & cols.client].tolist()), ops=ops,
        invoked=dict(zip(cols.index[invoke].tolist(), times[invoke].tolist(), strict=True)),
    )  # fmt: skip
    return facts, ops


def _canonical(values: Any) -> Any:
    """The `value` column as msgspec writes it (what the rows engine stores):
    only values not already so (whitespace, escapes, floats, strings, whose
    quotes Spark drops) are decoded and encoded again."""
    import pyarrow as pa
    import pyarrow.compute as pc

    values = values.cast(pa.string())
    fine = pc.match_substring_regex(values, f"^(?:{_CANONICAL})$")
    redo = pc.fill_null(pc.and_kleene(pc.is_valid(values), pc.invert(fine)), False)
    redo = redo.to_numpy(zero_copy_only=False)
    if not redo.any():
        return values

    def canon(text: str) -> str:
        try:
            return msgspec.json.encode(msgspec.json.decode(text)).decode()
        except msgspec.DecodeError:  # a JSON string: Spark dropped its quotes
            return msgspec.json.encode(text).decode()

    texts = values.to_pylist()
    return pa.array([canon(t) if r else t for t, r in zip(texts, redo, strict=True)], pa.string())


def _operations(run: Any, cols: _Columns, spans: dict[str, list[tuple[int, int]]],
                keys: tuple[str, ...]) -> Any:  # fmt: skip
    """One run's `operations` rows as an Arrow batch (see the module doc, step 3)."""
    import numpy as np
    import pyarrow as pa

    n, time = run.num_rows, cols.time
    done = ~cols.invoke
    # In a valid history a completion's previous event in its process is its invoke.
    since = np.where(cols.prev >= 0, time[np.maximum(cols.prev, 0)], -1)
    latency = np.where(done, time - since, 0)
    meets = {}
    for kind, windows in spans.items():
        hit = np.zeros(n, dtype=bool)
        for start, end in windows:
            hit |= (start <= time) & (since <= end)
        meets[kind] = pa.array(hit, mask=~done)

    def col(name: str, kind: Any) -> Any:
        return run.column(name).cast(kind)

    s, i64 = pa.string(), pa.int64()
    arrays = [
        pa.repeat(keys[0], n), pa.repeat(keys[1], n), col("index", i64), col("time", i64),
        col("process", s), col("type", s), col("f", s), col("key", s),
        _canonical(run.column("value")), col("node", s), col("error", s),
        col("revision", i64), col("group", s), pa.array(latency, mask=~done),
        meets["fault"], meets["change"], *(pa.repeat(v, n) for v in keys[2:]),
    ]  # fmt: skip
    arrays = [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrays]
    return pa.RecordBatch.from_arrays(arrays, names=columns("operations"))


class _Partition:
    """One Spark partition's runs: their operations batches out, their small
    tables written at the end (see the module doc, steps 2 and 4)."""

    def __init__(self, store: str, lake: str, ingest_id: str) -> None:
        self.store, self.lake, self.ingest_id = store, Path(lake), ingest_id
        self.small: dict[str, list[tuple[Any, ...]]] = {t: [] for t in WRITE_ORDER}
        self.outcomes: list[tuple[str, str, str | None, str]] = []  # run id, outcome, reason, dir
        self.events = 0  # operations rows out

    def run(self, run: Any) -> Any:
        """One history file's rows -> its operations batch, or None."""
        file = run.column("_file")[0].as_py()
        run_dir = Path(unquote(urlparse(file).path)).parent
        rid = run_id(self.store, run_dir)
        outcome, reason, batch = "ok", None, None
        try:
            outcome, reason, batch = self._derive(run, run_dir)
        except SkipRunError as exc:
            outcome, reason = "skip", str(exc)
        except Exception:  # let the rows engine word a run no reader foresaw
            outcome = "rows"
        self.outcomes.append((rid, outcome, reason, str(run_dir)))
        self.events += 0 if batch is None else batch.num_rows
        return batch

    def _derive(self, run: Any, run_dir: Path) -> tuple[str, str | None, Any]:
        meta = read_meta(self.store, str(run_dir))
        size = run.column("_size")[0].as_py()
        if run.column("_start")[0].as_py() != 0 or run.column("_length")[0].as_py() != size:
            return "rows", None, None  # Spark split the file: no partition holds it whole
        cols = _columns(run)
        if cols is None or _flagged(cols):
            return "rows", None, None  # the rows engine gives the reason, or takes a torn crash
        meta = with_audit(meta)
        facts, ops = _facts(run, cols)
        for table, rows in small_tables(meta, facts, self.ingest_id).items():
            self.small[table].extend(rows)
        spans = {
            "fault": [(w["start"], w["end"]) for w in fault_windows(ops, facts.end)],
            "change": [(w["start"], w["end"]) for w in change_windows(ops, facts.end)],
        }
        keys = (meta.rid, self.ingest_id, *partition(meta))
        return "ok", None, _operations(run, cols, spans, keys)

    def finish(self, task: int) -> None:
        """Writes the small tables (`runs` staged, for the driver to move in
        after `operations` is committed) and this partition's outcomes."""
        name = f"part-{self.ingest_id}-s{task:05d}"
        staging = self.lake / STAGING / self.ingest_id
        for table in WRITE_ORDER:
            if self.small[table]:
                where = staging if table == "runs" else self.lake
                write_table(where, table, self.small[table], name)
        staging.mkdir(parents=True, exist_ok=True)
        rows = {t: len(r) for t, r in self.small.items()} | {"operations": self.events}
        out = {"outcomes": self.outcomes, "rows": rows}
        tmp = staging / f".{name}.json"
        tmp.write_text(json.dumps(out), encoding="utf-8")
        os.replace(tmp, staging / f"{name}.json")


def _by_file(batches: Iterator[Any]) -> Iterator[Any]:
    """A partition's rows as one Arrow table per history file (a file's rows
    are contiguous in a partition, in file order)."""
    import numpy as np
    import pyarrow as pa

    held: list[Any] = []
    for batch in batches:
        if batch.num_rows == 0:
            continue
        files = batch.column("_file")
        codes = files.dictionary_encode().indices.to_numpy(zero_copy_only=False)
        starts = [0, *(np.flatnonzero(np.diff(codes)) + 1).tolist(), batch.num_rows]
        for lo, hi in itertools.pairwise(starts):
            piece = batch.slice(lo, hi - lo)
            if held and held[0].column("_file")[0].as_py() != piece.column("_file")[0].as_py():
                yield pa.Table.from_batches(held)
                held = []
            held.append(piece)
    if held:
        yield pa.Table.from_batches(held)


# Measured at 10^6 events (bench/pipeline.py): without them the write sorts
# every event by partition first though each batch is one run, thus one
# partition (about 20% of the job), and the driver lists the histories with
# a Spark job of its own once there are more than 32.
_WRITE_SETTINGS = {
    "spark.sql.optimizer.plannedWrite.enabled": "false",
    "spark.sql.maxConcurrentOutputFiles": "64",  # open writers per task, then it sorts
    "spark.sql.sources.parallelPartitionDiscovery.threshold": str(2**31 - 1),
}


@contextlib.contextmanager
def _settings(spark: Any, settings: dict[str, str]) -> Iterator[None]:
    """Session settings for one job, restored after it."""
    before = {k: spark.conf.get(k, None) for k in settings}
    for k, v in settings.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


def ingest_spark(
    spark: Any, store: str, lake: Path, todo: list[str], ingest_id: str
) -> tuple[dict[str, int], list[tuple[str, str]], list[str]]:
    """Ingests `todo` (run dirs); returns (rows per table, skipped runs, runs
    left to the rows engine)."""
    from pyspark import TaskContext
    from pyspark.sql import functions as F  # noqa: N812 - pyspark's own idiom

    left = [p for p in todo if not (Path(p) / "history.jsonl").is_file()]
    paths = [str(Path(p) / "history.jsonl") for p in todo if p not in left]
    counts: dict[str, int] = dict.fromkeys(TABLES, 0)
    skipped: list[tuple[str, str]] = []
    if not paths:
        return counts, skipped, left
    where = str(lake)

    def per_partition(batches: Iterator[Any]) -> Iterator[Any]:
        part = _Partition(store, where, ingest_id)
        for run in _by_file(batches):
            batch = part.run(run)
            if batch is not None:
                yield batch
        part.finish(TaskContext.get().partitionId())

    with _settings(spark, _WRITE_SETTINGS):
        read = (
            spark.read.schema(history_schema())
            .option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", "_corrupt_record")
            .json(paths)
        )
        meta = F.col("_metadata")
        read = read.select(
            "*", meta.file_path.alias("_file"), meta.file_block_start.alias("_start"),
            meta.file_block_length.alias("_length"), meta.file_size.alias("_size"),
        )  # fmt: skip
        ops = read.mapInArrow(per_partition, spark_schema("operations"))
        ops.write.mode("append").partitionBy(*PARTITION_COLUMNS).parquet(str(lake / "operations"))
    # `operations` is committed: the staged `runs` rows go in (module doc, step 4).
    staging = lake / STAGING / ingest_id
    handled = set()
    for summary in sorted(staging.glob("part-*.json")):
        got = json.loads(summary.read_text(encoding="utf-8"))
        for table, n in got["rows"].items():
            counts[table] += n
        for rid, outcome, reason, run_dir in got["outcomes"]:
            handled.add(Path(run_dir).resolve())
            if outcome == "skip":
                skipped.append((rid, reason))
            elif outcome == "rows":
                left.append(run_dir)
    for staged in sorted((staging / "runs").rglob("*.parquet")):
        dest = lake / "runs" / staged.relative_to(staging / "runs")
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staged, dest)
    shutil.rmtree(staging)
    left += [p for p in todo if p not in left and Path(p).resolve() not in handled]
    return counts, skipped, left
