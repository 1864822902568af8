"""A distributed pre-check of one history too large for a machine's memory.

Theory of operation. Spark's text reader reads history.jsonl split into
blocks across executors; each line reaches Python in an Arrow batch, is
decoded as the checkers' own `Event` type types it (`RawEvent`), and is
numbered from its block's place in the file (`_first_lines`).
Then two shuffles, each holding only a slice of the history in any one
place:

1. by process: each process's events, in index order, are checked against
   the checkers' rules for one process and paired into operations, many
   processes at once with array operations (pipeline/pairing.py), event by
   event through `HistoryValidator` and `pair` for a process that breaks one;
2. by key: each key's client operations go through the linearizability
   search (`checkers.linearizability.check`, the same code as `faultline
   check`) and the revision-order rules (`checkers.revisions.check_order`).

Because the kv models are P-compositional, a history is linearizable iff
every key's sub-history is, so the per-key verdicts merge (false > unknown >
true) into the history's. The revision rules compare pairs of operations, so
a violation within one key is a violation of the whole; the rules across
keys are covered by a global group-by (no two writes share a revision) but
not by a full real-time sweep, which is why this is a pre-check: a history
it passes may still break the cross-key stale-read rule. The global rules
that need one total order (index strictly increasing, time never going
back) are likewise checked only within each process.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from checkers.api import Validity, merge_validity
from checkers.history import Event, Operation, RawEvent
from pipeline.pairing import OP_SCHEMA, as_int, as_str, from_json, pair_processes, to_json
from pipeline.schemas import arrow_type

_EVENT = msgspec.json.Decoder(Event)
EVENT_SCHEMA = ("line long, idx long, time long, process string, is_client boolean, type string, "
                "f string, key string, value string, revision long, error string")  # fmt: skip
_EVENT_FIELDS = [c.split() for c in EVENT_SCHEMA.split(", ")]  # (name, type)
KEY_SCHEMA = ("key string, ops long, valid string, reason string, unplaceable array<long>, "
              "revision_anomalies array<string>")  # fmt: skip


@dataclass
class PrecheckResult:
    """The merged verdict and what each stage found."""

    valid: Validity
    events: int = 0
    ops: int = 0
    keys: int = 0
    bad_lines: list[str] = field(default_factory=list)
    process_problems: list[str] = field(default_factory=list)
    failed_keys: list[dict[str, Any]] = field(default_factory=list)
    unknown_keys: list[str] = field(default_factory=list)
    duplicate_revisions: list[int] = field(default_factory=list)
    elapsed_s: float = 0.0

    def summary(self) -> str:
        """A few lines for the terminal."""
        lines = [f"pre-check: {self.valid} ({self.events} events, {self.ops} client ops, "
                 f"{self.keys} keys, {self.elapsed_s:.1f} s)"]  # fmt: skip
        lines += [f"  malformed: {b}" for b in self.bad_lines[:5]]
        lines += [f"  process: {p}" for p in self.process_problems[:5]]
        for k in self.failed_keys[:5]:
            lines.append(f"  key {k['key']!r}: {k['valid']} {k['reason'] or ''} "
                         f"unplaceable={k['unplaceable']} {k['revision_anomalies']}")  # fmt: skip
        if self.unknown_keys:
            lines.append(f"  undecided keys: {', '.join(self.unknown_keys[:10])}")
        if self.duplicate_revisions:
            lines.append(f"  writes sharing a revision: {self.duplicate_revisions[:10]}")
        return "\n".join(lines)


def parse_lines(rows: Iterator[tuple[bytes, int]]) -> Iterator[tuple[Any, ...]]:
    """(text, line number) -> event rows; a malformed line -> a row with only `error`."""
    for text, line in rows:
        if not text.strip():
            continue
        try:
            ev = _EVENT.decode(text)
        except msgspec.DecodeError as exc:
            yield (line, None, None, None, None, None, None, None, None, None, str(exc))
            continue
        yield (line, ev.index, ev.time, str(ev.process), isinstance(ev.process, int),
               ev.type, ev.f, ev.key, to_json(ev.value), ev.revision, None)  # fmt: skip


def _first_lines(text: Any) -> dict[int, int]:
    """Block start -> the number of the line before the block's first (a block is
    the part of the file one task reads): rows per block, summed in file order."""
    counts = sorted(
        (int(r.block), int(r["count"])) for r in text.groupBy("block").count().collect()
    )
    before, total = {}, 0
    for block, n in counts:
        before[block], total = total, total + n
    return before


# A line it refuses goes through `parse_lines`, for Event's own words.
_LINE = msgspec.json.Decoder(RawEvent)


def _event_columns(texts: list[bytes], numbers: list[int]) -> list[list[Any]]:
    """One batch of lines as EVENT_SCHEMA columns (blank lines left out)."""
    kept = [i for i, text in enumerate(texts) if text.strip()]
    try:
        lines = [_LINE.decode(texts[i]) for i in kept]
    except msgspec.DecodeError:
        rows = list(parse_lines((texts[i], numbers[i]) for i in kept))
        return [list(c) for c in zip(*rows, strict=True)] if rows else [[] for _ in _EVENT_FIELDS]
    # One comprehension per field: a tenth of the cost of transposing rows.
    return [
        [numbers[i] for i in kept], [ln.index for ln in lines], [ln.time for ln in lines],
        [str(ln.process) for ln in lines], [ln.process.__class__ is int for ln in lines],
        [ln.type for ln in lines], [ln.f for ln in lines], [ln.key for ln in lines],
        [bytes(ln.value).decode() or None for ln in lines],  # absent: b""
        [ln.revision for ln in lines], [None] * len(lines),
    ]  # fmt: skip


def parse_batches(before: dict[int, int]) -> Any:
    """The mapInArrow function decoding a partition's lines (binary `text`, their
    `block`) into EVENT_SCHEMA rows, numbering each line by its block's place
    (`_first_lines`): a block's rows come whole and in file order."""

    def parse(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        schema = pa.schema([(name, arrow_type(kind)) for name, kind in _EVENT_FIELDS])
        seen: dict[int, int] = {}  # block -> its rows so far
        for batch in batches:
            numbers = []
            for block in batch.column("block").to_pylist():
                seen[block] = done = seen.get(block, 0) + 1
                numbers.append(before[block] + done)
            columns = _event_columns(batch.column("text").to_pylist(), numbers)
            if columns[0]:
                arrays = [pa.array(c, f.type) for c, f in zip(columns, schema, strict=True)]
                yield pa.RecordBatch.from_arrays(arrays, schema=schema)

    return parse


def key_ops(pdf: Any) -> list[Operation]:
    """One key's client operations (pandas rows of OP_SCHEMA, in invoke order: `per_group`)."""
    names = ("process", "f", "type", "invoke_index", "invoke_time", "complete_index",
             "complete_time", "key", "value", "result", "revision")  # fmt: skip
    return [
        Operation(process=int(p), f=f, type=ty, invoke_index=ii, invoke_time=it,
                  complete_index=as_int(ci), complete_time=as_int(ct), key=as_str(k),
                  value=from_json(v), result=from_json(r), revision=as_int(rev))
        for p, f, ty, ii, it, ci, ct, k, v, r, rev in zip(*(pdf[c].tolist() for c in names),
                                                         strict=True)
    ]  # fmt: skip


def check_key(
    pdf: Any, model: str, time_limit_s: float, revisions: Any = None
) -> list[tuple[Any, ...]]:
    """One key's client operations (pandas) -> its KEY_SCHEMA row: linearizability and
    revision verdicts (revision rules only where `revisions`, the history's
    declaration, puts them)."""
    from checkers import linearizability as lin
    from checkers.revision_fields import parse
    from checkers.revisions import check_order, revision_of

    ops = key_ops(pdf)
    key = ops[0].key
    try:
        # One worker: the executor is the unit of parallelism here, not a process pool.
        result = lin.check(lin.ops_from_history(ops, model), model, time_limit_s=time_limit_s,
                           workers=1)  # fmt: skip
        valid, reason = result.valid, None
        if result.valid == "unknown":
            reason = next((p.reason for p in result.partition_results if p.reason), None)
        stuck = [u.op.id for u in result.failure.unplaceable] if result.failure else []
    except lin.HistoryError as exc:
        valid, reason, stuck = "unknown", f"cannot check: {exc}", []
    fields = parse(revisions)
    revs = [(op, rev) for op in ops if (rev := revision_of(op, fields)) is not None]
    anomalies = [a.message for a in check_order(revs)]
    merged = merge_validity([valid, not anomalies])
    text = "true" if merged is True else "false" if merged is False else "unknown"
    return [(key, len(ops), text, reason, stuck, anomalies)]


def precheck(
    spark: Any, history: Path | str, *, model: str = "kv", key_time_limit_s: float = 60.0,
    out: Path | None = None, revisions: Any = None,
) -> PrecheckResult:  # fmt: skip
    """Pre-checks one history with Spark; see the module doc. `revisions` is the
    history's revision declaration (test.json's; checkers/revision_fields.py):
    without one no revision rule runs."""

    from checkers import linearizability as lin
    from checkers.revision_fields import parse

    if model not in lin.MODELS or not lin.MODELS[model].partitioned:
        keyed = sorted(n for n, m in lin.MODELS.items() if m.partitioned)
        raise ValueError(
            f"model {model!r} is not partitioned by key; use one of {', '.join(keyed)}"
        )
    fields = parse(revisions)  # a malformed declaration fails here, on the driver
    started = time.monotonic()
    staged = stage(spark, history)
    try:
        keys = per_group(staged.clients, "key", "invoke_index",
                         lambda pdf: check_key(pdf, model, key_time_limit_s, revisions),
                         KEY_SCHEMA).cache()  # fmt: skip
        if out is not None:
            keys.write.mode("overwrite").parquet(str(out))
        result = _merge(keys, staged.clients, staged.bad, staged.problems, _field_writes(fields))
        result.events = staged.events
        keys.unpersist()
    finally:
        staged.release()
    result.elapsed_s = time.monotonic() - started
    return result


@dataclass
class Staged:
    """A history read across executors and paired per process (the shared first
    stages of the pre-check and `faultline check --spark`)."""

    events: int  # well-formed lines
    bad: list[Any]  # the first malformed lines (line, error), in line order
    bad_count: int
    last_line: int  # the number of the history's last non-blank line
    problems: list[str]  # the first processes whose events break the history's rules
    ops: Any  # DataFrame (OP_SCHEMA): every process's operations (a problem row per bad one)
    clients: Any  # the client processes' operations
    _cached: list[Any] = field(default_factory=list)

    def release(self) -> None:
        """Drops the cached stages from the executors."""
        for df in self._cached:
            df.unpersist()


def stage(spark: Any, history: Path | str) -> Staged:
    """Reads `history` split across executors, decodes each line with the checkers'
    `Event` and pairs each process's events into operations."""
    from pyspark.sql import functions as F  # noqa: N812 -- Spark's own idiom

    # Spark's text reader splits the file into blocks; each line keeps its
    # bytes (msgspec names bad UTF-8) and the block it came from, whose place in
    # the file numbers it. Rows reach Python as Arrow, not one pickle each.
    text = spark.read.text(str(history)).select(
        F.col("value").cast("binary").alias("text"),
        F.col("_metadata.file_block_start").alias("block"),
    )
    events = text.mapInArrow(parse_batches(_first_lines(text)), EVENT_SCHEMA).cache()
    bad_col = F.col("error").isNotNull()
    tally = events.agg(F.count("*").alias("n"), F.count(F.when(bad_col, 1)).alias("bad"),
                       F.max("line").alias("last")).first()  # fmt: skip
    bad = events.where(bad_col).orderBy("line").limit(10).collect() if tally.bad else []
    ops = per_group(events.where(~bad_col).drop("error"), "process", "idx", pair_processes,
                    OP_SCHEMA, whole=True).cache()  # fmt: skip
    problems = [r.problem for r in ops.where(F.col("problem").isNotNull()).limit(10).collect()]
    clients = ops.where(F.col("is_client") & F.col("problem").isNull())
    return Staged(events=int(tally.n - tally.bad), bad=bad, bad_count=int(tally.bad),
                  last_line=int(tally.last or 0), problems=problems, ops=ops, clients=clients,
                  _cached=[ops, events])  # fmt: skip


def _field_writes(fields: Any) -> list[str]:
    """The writes (put, invoke) whose declared revision is the event's field."""
    return [f for f in ("put", "invoke") if fields is not None and fields.ops.get(f) == "revision"]


def _merge(
    keys: Any, clients: Any, bad: list[Any], problems: list[str], field_writes: list[str]
) -> PrecheckResult:
    """The history's verdict from the per-key ones and the global revision rule."""
    from pyspark.sql import functions as F  # noqa: N812 -- Spark's own idiom

    per_verdict = keys.groupBy("valid").agg(F.count("*").alias("keys"), F.sum("ops").alias("ops"))
    verdicts = {r.valid: (int(r.keys), int(r.ops)) for r in per_verdict.collect()}
    # Only the first few undecided or failing keys come back to the driver.
    flagged = keys.where(F.col("valid") != "true").orderBy("valid", "key").limit(20).collect()
    failed = [r.asDict() for r in flagged if r.valid == "false"]
    unknown = [str(r.key) for r in flagged if r.valid == "unknown"]
    # Writes sharing one revision, across all keys (ops declared to carry it in
    # the `revision` field; a revision only in the result is checked per key).
    writes = clients.where((F.col("type") == "ok") & F.col("f").isin(*field_writes))
    dup = (writes.where(F.col("revision").isNotNull()).groupBy("revision")
           .agg(F.countDistinct("invoke_index").alias("n")).where(F.col("n") > 1)
           .orderBy("revision").limit(10).collect())  # fmt: skip
    findings: list[Validity] = [
        not (verdicts.get("false") or dup or bad or problems),
        "unknown" if verdicts.get("unknown") else True,
    ]
    return PrecheckResult(
        valid=merge_validity(findings), ops=sum(n for _, n in verdicts.values()),
        keys=sum(k for k, _ in verdicts.values()),
        bad_lines=[f"line {b.line}: {b.error}" for b in bad], process_problems=problems,
        failed_keys=failed, unknown_keys=unknown,
        duplicate_revisions=[int(r.revision) for r in dup],
    )  # fmt: skip


def per_group(df: Any, column: str, order: str, fn: Any, schema: str, *, whole: bool = False
              ) -> Any:  # fmt: skip
    """`df.groupBy(column).applyInPandas(fn, schema)`, with one Python call per Arrow
    batch instead of per group: applyInPandas ships every group as its own batch,
    which at 10^3-10^4 processes or keys cost more than the work (bench/spark_check.py).
    Rows are co-located and sorted by (column, order), so each group is a run of
    consecutive rows, possibly across batches; `fn` gets each whole group once,
    in `order`, and returns its rows (tuples in `schema`'s order). With `whole`,
    `fn` gets many whole groups at once (a batch's) and returns a DataFrame of
    `schema`'s columns: for work done with array operations across groups."""
    import pandas as pd

    names = [c.split()[0] for c in schema.split(", ")]

    def each(batches: Iterator[Any]) -> Iterator[Any]:  # rows, or many groups (`whole`)
        held = None  # the last group of the previous batch: it may continue
        for pdf in batches:
            if held is not None:
                pdf = pd.concat([held, pdf], ignore_index=True)
            if pdf.empty:
                continue
            last = pdf[column].iloc[-1]
            tail = pdf[column].isna() if pd.isna(last) else pdf[column] == last
            held, done = pdf[tail], pdf[~tail]
            if whole:
                yield done
                continue
            for _, group in done.groupby(column, sort=False, dropna=False):
                yield fn(group)
        if held is not None and not held.empty:
            yield held if whole else fn(held)

    def groups(batches: Iterator[Any]) -> Iterator[Any]:
        if whole:
            for many in each(batches):
                if not many.empty:
                    yield fn(many)
            return
        out: list[tuple[Any, ...]] = []  # one Arrow batch per many groups, not per group
        for rows in each(batches):
            out.extend(rows)
            if len(out) >= 10_000:
                yield pd.DataFrame(out, columns=names)
                out = []
        if out:
            yield pd.DataFrame(out, columns=names)

    n = df.sparkSession.conf.get("spark.sql.shuffle.partitions")
    return df.repartition(int(n), column).sortWithinPartitions(column, order).mapInPandas(
        groups, schema
    )  # fmt: skip
