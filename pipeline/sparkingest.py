"""The Spark ingest engine: histories read by Spark, per-event columns on Arrow batches.

Theory of operation. The rows engine (pipeline/lakefiles.py) parses every
history line in Python; here Spark's JSON reader does, and Python only sees
Arrow columns. One Spark job, no shuffle:

1. Every history.jsonl is read at once with an explicit schema (`history_schema`),
   PERMISSIVE: a line the reader cannot take lands in `_corrupt_record`.
   Each row carries its file and the block of it the task reads.
2. `mapInArrow` takes each partition's rows one history file at a time (a
   file's rows are contiguous and in order in a partition; a file Spark split
   between partitions goes to the rows engine). Per run, `_flagged` screens
   it against the format's rules with numpy; the same
   `HistoryFacts` the rows engine builds are built from columns (only the
   nemesis and membership events, a handful, become Events, paired by
   `checkers.history.pair` for `checkers.stats`' windows), and the run's
   small tables come from `extract.small_tables`, the rows engine's code.
3. The run's `operations` batch is its columns plus latency (the time since
   the previous event of the same process: in a valid history, the
   completion's invoke) and whether that interval meets a fault or change
   window, computed with numpy.
4. Each task writes its runs' rows as the rows engine's tasks do, with
   pyarrow in Spark's layout (`lakefiles.write_arrow`, `write_table`), every
   FLUSH_ROWS events and at its end, `runs` last: a run is in the lake once
   its `runs` row is (pipeline/ingest.py). Spark's own Parquet writer was
   measured slower here (and wants the rows sorted by partition first), so
   the tasks only hand the driver each run's outcome.

The rows engine keeps the last word on anything irregular: a run whose
history the screen flags (a corrupt line, a rule broken, a crashed run's
torn last line) or that Spark read no event of goes to it, which gives the
same reason or the same rows as always. The screen only has to be at least
as strict as `HistoryValidator`; the format's messages stay in one place.

Known differences, all outside what the harness writes: a field that must
be a string but holds a number is read as its text where msgspec refuses the
line, a process id that is a string of digits counts as a client, and a
`value` that is a JSON string holding JSON text (say `"[1]"`) reads as that
JSON (Spark's reader does not keep a string's quotes).
"""

from __future__ import annotations

import contextlib
import itertools
import json
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
    collector_paused,
    partition,
    read_meta,
    run_id,
    small_tables,
    with_audit,
)
from pipeline.lakefiles import FLUSH_ROWS, write_arrow, write_table
from pipeline.schemas import TABLES, WRITE_ORDER, columns

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
    """One run's `operations` rows as an Arrow batch, partition columns aside
    (see the module doc, step 3); `keys` are its run_id and ingest_id."""
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
        meets["fault"], meets["change"],
    ]  # fmt: skip
    arrays = [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrays]
    return pa.RecordBatch.from_arrays(arrays, names=columns("operations")[: len(arrays)])


class RunWriter:
    """One task's runs, from Arrow columns to the lake, written as the rows
    engine writes a task's (see the module doc, step 4); the columns engine
    (pipeline/columnsingest.py) writes through it too."""

    def __init__(self, store: str, lake: str, ingest_id: str, task: int) -> None:
        self.store, self.lake, self.ingest_id, self.task = store, Path(lake), ingest_id, task
        self.small: dict[str, list[tuple[Any, ...]]] = {t: [] for t in WRITE_ORDER}
        self.ops: dict[tuple[str, ...], list[Any]] = {}  # partition -> operations batches
        self.held = self.flushes = 0
        # run id, outcome, skip reason, run dir, its rows per table (JSON)
        self.outcomes: list[tuple[str, str, str | None, str, str | None]] = []

    def run(self, run: Any) -> None:
        """One history file's rows as Spark read them (`_by_file`)."""
        file = run.column("_file")[0].as_py()
        size = run.column("_size")[0].as_py()
        whole = run.column("_start")[0].as_py() == 0 and run.column("_length")[0].as_py() == size
        # Spark split the file: no partition holds it whole, so the rows engine takes it.
        self.take(Path(unquote(urlparse(file).path)).parent, run if whole else None)

    def take(self, run_dir: Path, run: Any) -> None:
        """One run's history columns (None: hand the run to the rows engine):
        derives its rows, and flushes if enough are held."""
        rid = run_id(self.store, run_dir)
        outcome, reason, rows = "ok", None, None
        try:
            with collector_paused():
                outcome, reason, rows = self._derive(run, run_dir)
        except SkipRunError as exc:
            outcome, reason = "skip", str(exc)
        except Exception:  # let the rows engine word a run no reader foresaw
            outcome = "rows"
        self.outcomes.append((rid, outcome, reason, str(run_dir), rows))
        if self.held >= FLUSH_ROWS:  # only between runs: a run's rows share one flush
            self.flush()

    def _derive(self, run: Any, run_dir: Path) -> tuple[str, str | None, str | None]:
        meta = read_meta(self.store, str(run_dir))
        if run is None:
            return "rows", None, None
        cols = _columns(run)
        if cols is None or _flagged(cols):
            return "rows", None, None  # the rows engine gives the reason, or takes a torn crash
        meta = with_audit(meta)
        facts, ops = _facts(run, cols)
        small = small_tables(meta, facts, self.ingest_id)
        for table, rows in small.items():
            self.small[table].extend(rows)
        spans = {
            "fault": [(w["start"], w["end"]) for w in fault_windows(ops, facts.end)],
            "change": [(w["start"], w["end"]) for w in change_windows(ops, facts.end)],
        }
        batch = _operations(run, cols, spans, (meta.rid, self.ingest_id))
        self.ops.setdefault(partition(meta), []).append(batch)
        self.held += batch.num_rows
        counts = {t: len(r) for t, r in small.items()} | {"operations": batch.num_rows}
        return "ok", None, json.dumps(counts)

    def flush(self) -> None:
        """Writes what is held, `runs` last (pipeline/ingest.py)."""
        import pyarrow as pa

        name = f"part-{self.ingest_id}-s{self.task:05d}-{self.flushes:04d}"
        for part, batches in self.ops.items():
            write_arrow(self.lake, "operations", part, pa.Table.from_batches(batches), name)
        for table in WRITE_ORDER:
            if table != "operations" and self.small[table]:
                write_table(self.lake, table, self.small[table], name)
        self.small = {t: [] for t in WRITE_ORDER}
        self.ops, self.held, self.flushes = {}, 0, self.flushes + 1


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


# A run's outcome, from the tasks to the driver.
_OUTCOME = "run_id string, outcome string, reason string, run_dir string, rows string"
# With more paths than this, Spark lists them with a job of its own: seconds
# for files the driver has just listed itself.
_LISTING = {"spark.sql.sources.parallelPartitionDiscovery.threshold": str(2**31 - 1)}


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
    """Ingests `todo` (run dirs, each with a history.jsonl); returns (rows per
    table, skipped runs, runs left to the rows engine)."""
    from pyspark import TaskContext
    from pyspark.sql import functions as F  # noqa: N812 - pyspark's own idiom

    paths = [str(Path(p) / "history.jsonl") for p in todo]
    where = str(lake)

    def per_partition(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        task = TaskContext.get()
        if task is None:  # mapInArrow calls this only inside a task
            raise RuntimeError("per_partition ran outside a Spark task")
        part = RunWriter(store, where, ingest_id, task.partitionId())
        for run in _by_file(batches):
            part.run(run)
        part.flush()
        out = list(zip(*part.outcomes, strict=True)) or [()] * 5
        yield pa.RecordBatch.from_arrays(
            [pa.array(c, pa.string()) for c in out],
            names=["run_id", "outcome", "reason", "run_dir", "rows"],
        )

    with _settings(spark, _LISTING):
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
    outcomes = read.mapInArrow(per_partition, _OUTCOME).collect()
    return gather(outcomes, todo)


def gather(
    outcomes: list[Any], todo: list[str]
) -> tuple[dict[str, int], list[tuple[str, str]], list[str]]:
    """The tasks' run outcomes as (rows per table, skipped runs, runs left to
    the rows engine: those handed on, and any no task reported)."""
    counts: dict[str, int] = dict.fromkeys(TABLES, 0)
    skipped: dict[tuple[str, str], None] = {}  # sets in order: a store holds thousands of runs
    handed: dict[str, None] = {}
    handled = set()
    for rid, outcome, reason, run_dir, rows in outcomes:
        handled.add(Path(run_dir).resolve())
        # A file Spark split reports from every block: skip it or hand it on once.
        if outcome == "skip":
            skipped[rid, reason] = None
        elif outcome == "rows":
            handed[run_dir] = None
        else:
            for table, n in json.loads(rows).items():
                counts[table] += n
    handed.update((p, None) for p in todo if Path(p).resolve() not in handled)
    return counts, list(skipped), list(handed)
