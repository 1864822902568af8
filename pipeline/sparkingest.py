"""The Spark ingest engine: histories read by Spark, per-event columns as DataFrame operations.

Theory of operation. The rows engine (pipeline/lakefiles.py) parses every
history line in Python; here the JVM does the per-event work:

1. Every history.jsonl is read at once by Spark's JSON reader with an
   explicit schema (`HISTORY`), PERMISSIVE, a line it cannot read landing in
   `_corrupt_record`. Rows keep their file and their place in it (`_pos`).
2. Per run (`applyInPandas` grouped by file), a few columns of every event
   go to `_derive`, which screens the history against the format's rules
   with vectorized pandas, then builds the same `HistoryFacts` the rows
   engine builds, from columns rather than per-line objects: only the
   nemesis and membership events (a handful per run) become Events, paired by
   `checkers.history.pair` for `checkers.stats`' windows. The run's small
   tables (runs, faults, changes, rebalances, anomalies) come from
   `extract.small_tables`, the code the rows engine runs. It returns one row
   per run: the fault and change spans, the pickled small rows, or why the run
   is skipped, or that the rows engine must take it.
3. `operations` is the read joined to those spans: latency is the time since
   the previous event of the same process (in a valid history, a
   completion's invoke), `in_fault`/`in_change` whether that interval meets a
   span; written by Spark's Parquet writer in the lake's layout.
4. The small tables are written from the driver with pyarrow
   (`lakefiles.write_table`), `runs` last: a run is in the lake once its
   `runs` row is (pipeline/ingest.py).

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
import pickle
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import msgspec
import pandas as pd  # at the top: pandas_udf reads `_canonical`'s hints at run time

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
from pipeline.schemas import PARTITION_COLUMNS, TABLES, WRITE_ORDER, columns

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
# Run outcome column of `_derive` (one row per run).
_DERIVED = (
    "_file string, run_id string, outcome string, reason string, date string, "
    "workload string, nemesis string, fault_spans array<struct<s:long,e:long>>, "
    "change_spans array<struct<s:long,e:long>>, small binary"
)
# A value already as msgspec writes it: an integer, true/false, or compact
# JSON with no whitespace, escape, or number with a fraction or exponent.
_CANONICAL = r"-?[0-9]+|true|false|[\[{][^\s\\]*"


def history_schema() -> Any:
    """The Spark schema of a history line (plus `_corrupt_record`)."""
    from pyspark.sql import types as t

    kinds = {"long": t.LongType(), "string": t.StringType()}
    return t.StructType([t.StructField(n, kinds[k], True) for n, k in _HISTORY_FIELDS])


def _flagged(pdf: Any) -> bool:
    """Whether a run's events (in file order) may break the history format.

    As strict as checkers.history.HistoryValidator, vectorized: a line Spark
    could not read or that lacks a required field, index not increasing, time
    going back, and per process: an invoke while one is open or (a client)
    after its info, a completion with no open invoke or another f."""
    import numpy as np

    required = pdf[["index", "time", "process", "type", "f"]]
    if pdf["_corrupt"].any() or required.isna().to_numpy().any():
        return True
    if not pdf["type"].isin(_TYPES).all():
        return True
    idx, tm = pdf["index"].to_numpy(), pdf["time"].to_numpy()
    if (np.diff(idx) <= 0).any() or (np.diff(tm) < 0).any():
        return True
    by_proc = pdf.groupby("process", sort=False)
    prev_type, prev_f = by_proc["type"].shift(1), by_proc["f"].shift(1)
    invoke = pdf["type"] == "invoke"
    client = pdf["process"].str.match(_CLIENT)
    bad_invoke = invoke & ((prev_type == "invoke") | (client & (prev_type == "info")))
    bad_done = ~invoke & ((prev_type != "invoke") | (prev_f != pdf["f"]))
    return bool((bad_invoke | bad_done).any())


def _event(row: Any, client: bool) -> Event:
    value = row.value
    if value is not None:
        with contextlib.suppress(msgspec.DecodeError):  # else a JSON string, as its text
            value = msgspec.json.decode(value)
    process = int(row.process) if client else row.process
    return Event(index=int(row.index), time=int(row.time), process=process,
                 type=row.type, f=row.f, value=value)  # fmt: skip


def _facts(pdf: Any) -> tuple[HistoryFacts, list[Any]]:
    """HistoryFacts of a screened run's events (in file order), and its ops
    with the nemesis's and membership changes' among them."""
    client = pdf["process"].str.match(_CLIENT).to_numpy()
    types, times = pdf["type"].to_numpy(), pdf["time"].to_numpy()
    invoke = types == "invoke"
    control = ~client | pdf["f"].isin(MEMBERSHIP_FS).to_numpy()
    events = [_event(row, bool(c)) for row, c in zip(pdf[control].itertuples(), client[control],
                                                      strict=True)]  # fmt: skip
    ops = pair(events)
    invoked = dict(zip(pdf["index"].to_numpy()[invoke].tolist(), times[invoke].tolist(),
                       strict=True))  # fmt: skip
    facts = HistoryFacts(
        events=len(pdf), end=int(times[-1]), client_ops=int((invoke & client).sum()),
        ok_times=sorted(times[(types == "ok") & client].tolist()), ops=ops, invoked=invoked,
    )  # fmt: skip
    return facts, ops


def _derive(store: str, ingest_id: str, pdf: Any) -> Any:
    """One run's events -> its row of `_DERIVED` (see the module doc)."""
    import pandas as pd

    file = pdf["_file"].iloc[0]
    run_dir = Path(unquote(urlparse(file).path)).parent
    out: dict[str, Any] = {"_file": file, "run_id": run_id(store, run_dir), "outcome": "ok",
                           "reason": None, "date": None, "workload": None, "nemesis": None,
                           "fault_spans": None, "change_spans": None, "small": None}  # fmt: skip
    try:
        meta = read_meta(store, str(run_dir))
        pdf = pdf.sort_values("_pos", kind="stable")
        if _flagged(pdf):
            out["outcome"] = "rows"  # the rows engine gives the reason, or takes a torn crash
            return pd.DataFrame([out])
        meta = with_audit(meta)
        facts, ops = _facts(pdf)
    except SkipRunError as exc:
        out["outcome"], out["reason"] = "skip", str(exc)
        return pd.DataFrame([out])
    except Exception:  # let the rows engine word a run no reader foresaw
        out["outcome"] = "rows"
        return pd.DataFrame([out])
    out["date"], out["workload"], out["nemesis"] = partition(meta)
    spans = [{"s": w["start"], "e": w["end"]} for w in fault_windows(ops, facts.end)]
    changes = [{"s": w["start"], "e": w["end"]} for w in change_windows(ops, facts.end)]
    out["fault_spans"], out["change_spans"] = spans, changes
    out["small"] = pickle.dumps(small_tables(meta, facts, ingest_id))
    return pd.DataFrame([out])


def _canonical(values: pd.Series) -> pd.Series:
    """`value` texts as msgspec writes them (what the rows engine stores);
    only those not already so (whitespace, escapes, floats, strings) are redone."""
    redo = values.notna() & ~values.str.fullmatch(_CANONICAL, na=True).astype(bool)

    def canon(text: str) -> str:
        try:
            return msgspec.json.encode(msgspec.json.decode(text)).decode()
        except msgspec.DecodeError:  # a JSON string: Spark dropped its quotes
            return msgspec.json.encode(text).decode()

    values = values.copy()
    values[redo] = values[redo].map(canon)
    return values


def ingest_spark(
    spark: Any, store: str, lake: Path, todo: list[str], ingest_id: str
) -> tuple[dict[str, int], list[tuple[str, str]], list[str]]:
    """Ingests `todo` (run dirs); returns (rows per table, skipped runs, runs
    left to the rows engine)."""
    from pyspark.sql import functions as F  # noqa: N812 - pyspark's own idiom

    left = [p for p in todo if not (Path(p) / "history.jsonl").is_file()]
    paths = [str(Path(p) / "history.jsonl") for p in todo if p not in left]
    counts: dict[str, int] = dict.fromkeys(TABLES, 0)
    skipped: list[tuple[str, str]] = []
    if not paths:
        return counts, skipped, left
    read = (
        spark.read.schema(history_schema())
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", "_corrupt_record")
        .json(paths)
        .select("*", F.col("_metadata.file_path").alias("_file"))
        .withColumn("_pos", F.monotonically_increasing_id())  # file order, within a file
    )
    narrow = read.select(
        "_file", "_pos", "index", "time", "process", "type", "f",
        F.when(~F.col("process").rlike(_CLIENT) | F.col("f").isin(*MEMBERSHIP_FS),
               F.col("value")).alias("value"),
        F.col("_corrupt_record").isNotNull().alias("_corrupt"),
    )  # fmt: skip
    derived = narrow.groupBy("_file").applyInPandas(
        lambda pdf: _derive(store, ingest_id, pdf), schema=_DERIVED
    )
    done = derived.collect()  # one row per run: the lake's small tables, not its events
    seen = {Path(unquote(urlparse(r["_file"]).path)).parent for r in done}
    left += [p for p in todo if p not in left and Path(p).resolve() not in seen]
    good = []
    for r in done:
        if r["outcome"] == "skip":
            skipped.append((r["run_id"], r["reason"]))
        elif r["outcome"] == "rows":
            left.append(str(Path(unquote(urlparse(r["_file"]).path)).parent))
        else:
            good.append(r)
    if not good:
        return counts, skipped, left
    spans = spark.createDataFrame(
        [(r["_file"], r["run_id"], ingest_id, r["date"], r["workload"], r["nemesis"],
          r["fault_spans"], r["change_spans"]) for r in good],
        "_file string, run_id string, ingest_id string, date string, workload string, "
        "nemesis string, fault_spans array<struct<s:long,e:long>>, "
        "change_spans array<struct<s:long,e:long>>",
    )  # fmt: skip
    _write_operations(read.join(F.broadcast(spans), "_file"), lake)
    tables: dict[str, list[tuple[Any, ...]]] = {t: [] for t in WRITE_ORDER if t != "operations"}
    for r in good:
        for table, rows in pickle.loads(r["small"]).items():
            tables[table].extend(rows)
    for table in tables:  # WRITE_ORDER: `runs` last
        if tables[table]:
            write_table(lake, table, tables[table], f"part-{ingest_id}-driver")
        counts[table] = len(tables[table])
    n_events = columns("runs").index("events")
    counts["operations"] = sum(row[n_events] for row in tables["runs"])
    return counts, skipped, left


def _write_operations(events: Any, lake: Path) -> None:
    """Writes `operations` from the joined read (see the module doc, step 3)."""
    from pyspark.sql import functions as F  # noqa: N812 - pyspark's own idiom
    from pyspark.sql.functions import pandas_udf
    from pyspark.sql.window import Window

    canonical = pandas_udf(_canonical, "string")
    # Higher-order functions cannot hold a window function: the lag is a column first.
    since = F.col("_since")
    events = events.withColumn(
        "_since", F.lag("time").over(Window.partitionBy("_file", "process").orderBy("index"))
    )
    done = F.col("type") != "invoke"

    def meets(spans: str) -> Any:
        return F.exists(spans, lambda w: (w.s <= F.col("time")) & (since <= w.e))

    ops = events.select(
        "run_id", "ingest_id", F.col("index").alias("idx"), F.col("time").alias("time_ns"),
        "process", "type", "f", "key", canonical("value").alias("value"), "node", "error",
        "revision", F.col("group").alias("grp"),
        F.when(done, F.col("time") - since).alias("latency_ns"),
        F.when(done, meets("fault_spans")).alias("in_fault"),
        F.when(done, meets("change_spans")).alias("in_change"),
        *PARTITION_COLUMNS,
    )  # fmt: skip
    ops.write.mode("append").partitionBy(*PARTITION_COLUMNS).parquet(str(lake / "operations"))
