"""`faultline check --spark`: the linearizability verdict of a history too large
for one process, decided per key across Spark executors.

Theory of operation. The history is read and paired per process as the
pre-check does (pipeline/precheck.py `stage`: lines decoded with the checkers'
`Event`, each process validated and paired by the checkers' own code). The
model's operations (checkers.linear.model_ops' rule: client processes, no
membership changes, watches, past reads or compactions) are grouped by key,
and each key is checked on an executor by `checkers.linearizability.check`,
the local checker's search, with its own time budget (`--time-limit` is per
key here). P-compositionality makes the merge exact: the history is
linearizable iff every key is. Each executor returns its key's `LinResult`
as JSON; the driver merges them into one `LinResult` and turns it into the
`linearizable` checker's result with the same function the local checker
uses, so results.json has the local shape and verdict. In a history that
mixes register and metastore traffic, the metastore's ops are one group, on
revisions ranked by the watch record (checkers/meta_ranks.py) that the
driver builds from the watch ops, as the local check ranks them; the
record holds one entry per write under the prefix.

What differs, and is said in the result's notes: only the linearizability
checker runs (the others need the whole history in one process); every key
is searched (the local check stops at its first failing key), so
`partitions_skipped` is 0 and the failure reported is the smallest failing
key; and no witness is collected (it would bring every operation back to
the driver, the one place that must not hold the history), so `faultline
verify` cannot re-check a valid verdict from it.

Bad input is refused as `faultline check` refuses it: a malformed line names
its line number, unless it is the file's torn last line (no newline), which
is skipped with a note.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import msgspec

from checkers.api import merge_validity
from checkers.compose import METASTORE_PREFIX as META_PREFIX
from checkers.compose import Basis, split_result
from checkers.linear import NOT_MODELLED, checker_result, infer_model
from checkers.stats import MEMBERSHIP_FS
from checkers.verify_cli import SPARK_NO_WITNESS

RESULT_SCHEMA = "part string, result string, basis string"
# The group of every metastore op: the metastore model is not partitioned by
# key (its revisions are global), so that traffic is one task's search.
META_GROUP = "\x00metastore"


class SparkCheckError(ValueError):
    """A history `check --spark` refuses (one line naming what is wrong)."""


def check_group(
    pdf: Any, model: str, record: Any, time_limit_s: float
) -> list[tuple[str, str, str]]:
    """One group's operations (pandas, OP_SCHEMA: a key's, or all the metastore's)
    -> its row: (its part, its LinResult as JSON, what the metastore's revisions
    were as JSON: `compose.Basis`; "" for a key's). `record` is the
    watch record of a mixed history (`compose.watch_record`), else None."""
    from checkers import linearizability as lin
    from checkers.linearizability.types import LinResult
    from checkers.meta_branches import decide
    from pipeline.precheck import key_ops

    ops = key_ops(pdf)
    meta = pdf["group"].iloc[0] == META_GROUP
    if meta:
        model = "metastore"

    def search(ops: list[Any], bound: Any) -> LinResult:
        started = time.monotonic()
        try:
            # One worker: the executor is the unit of parallelism here, not a process pool.
            return lin.check(lin.ops_from_history(ops, model), bound or model,
                             time_limit_s=time_limit_s, workers=1)  # fmt: skip
        except lin.HistoryError as exc:
            elapsed = time.monotonic() - started
            return LinResult(valid="unknown", model=model, ops=len(ops), partitions=1,
                             states_explored=0, cache_size=0, elapsed_s=elapsed,
                             reason=f"cannot check: {exc}")  # fmt: skip

    basis = ""
    if meta and record is not None:
        result, ranks = decide(ops, record, search)
        basis = msgspec.json.encode(ranks).decode()
    else:
        result = search(ops, None)
    result.witness = []  # see the module doc
    part = "metastore" if meta else "register"
    return [(part, msgspec.json.encode(result).decode(), basis)]


def merge(results: list[Any], model: str, elapsed_s: float) -> Any:
    """Per-key `LinResult`s -> the history's (see the module doc)."""
    from checkers.linearizability.types import LinResult

    valid = merge_validity(r.valid for r in results)
    # The local check reports the first failing key it meets, smallest first.
    failing = sorted((r for r in results if r.valid is False), key=lambda r: r.ops)
    first = failing[0] if failing else None
    reasons = sorted({r.reason for r in results if r.reason})
    return LinResult(
        valid=valid, model=model, ops=sum(r.ops for r in results),
        partitions=sum(r.partitions for r in results),
        states_explored=sum(r.states_explored for r in results),
        cache_size=max((r.cache_size for r in results), default=0), elapsed_s=elapsed_s,
        failure=first.failure if first else None,
        partition_results=[p for r in results for p in r.partition_results],
        reason="; ".join(reasons) or None,
        counterexample=first.counterexample if first else None,
        # The metastore is one group, so at most one result checked lost
        # transactions each way.
        branches=next((r.branches for r in results if r.branches), None),
    )  # fmt: skip


def _torn_last_line(history: Path, staged: Any) -> bool:
    """Is the only malformed line the file's last, written without its newline?"""
    if staged.bad_count != 1 or staged.bad[0].line != staged.last_line:
        return False
    try:
        with history.open("rb") as fh:
            fh.seek(-1, 2)
            return fh.read(1) != b"\n"
    except OSError:  # not a local file: cannot tell a tear from a corrupt line
        return False


def spark_check(
    spark: Any, history: Path, *, model: str | None, time_limit_s: float, master: str,
    notes: list[str],
) -> Any:  # fmt: skip
    """Checks `history`; returns the `Result` results.json holds (checkers.compose)."""
    from pyspark.sql import functions as F  # noqa: N812 -- Spark's own idiom

    from checkers import linearizability as lin
    from checkers.api import CheckerResult
    from checkers.compose import Result
    from checkers.linearizability.types import LinResult
    from pipeline.precheck import per_group, stage

    started = time.monotonic()
    staged = stage(spark, history)
    try:
        if staged.bad and not _torn_last_line(history, staged):
            first = staged.bad[0]
            raise SparkCheckError(f"{history}: line {first.line}: {first.error}")
        if staged.bad:
            line, error = staged.bad[0].line, staged.bad[0].error
            notes.append(f"{history.name}: line {line} is torn (the writer stopped mid-line: "
                         f"{error}); checked the {line - 1} lines before it")  # fmt: skip
        if staged.problems:
            raise SparkCheckError(f"{history}: {staged.problems[0]}")
        modelled = staged.clients.where(
            ~F.col("f").isin(*sorted(MEMBERSHIP_FS | NOT_MODELLED))
        ).withColumn("is_meta", F.coalesce(F.col("key"), F.lit("")).startswith(META_PREFIX))
        counts = {r.is_meta: (int(r.n), r.fs) for r in modelled.groupBy("is_meta").agg(
            F.count("*").alias("n"), F.collect_set("f").alias("fs")).collect()}  # fmt: skip
        mixed = bool(counts.get(True)) and bool(counts.get(False))
        if model is None:
            model = infer_model(set(counts[False][1])) if False in counts else "metastore"
        register_model = model
        if False in counts and (model not in lin.MODELS or not lin.MODELS[model].partitioned):
            keyed = sorted(n for n, m in lin.MODELS.items() if m.partitioned)
            raise SparkCheckError(
                f"model {model!r} is not partitioned by key; --spark takes {', '.join(keyed)}"
            )
        record = _watch_record(staged.clients) if mixed else None
        group = F.when(F.col("is_meta"), F.lit(META_GROUP)).otherwise(F.col("key"))
        checked = per_group(modelled.withColumn("group", group), "group", "invoke_index",
                            lambda pdf: check_group(pdf, register_model, record, time_limit_s),
                            RESULT_SCHEMA)  # fmt: skip
        decoder = msgspec.json.Decoder(LinResult)
        parts: dict[str, list[Any]] = {"register": [], "metastore": []}
        basis = ""
        for row in checked.toLocalIterator():
            parts[row.part].append(decoder.decode(row.result))
            basis = basis or row.basis
        all_ops = staged.ops.where(F.col("problem").isNull()).count()
    finally:
        staged.release()
    elapsed = time.monotonic() - started
    lin_result = (
        split_result(_part_result(parts["register"], register_model, elapsed),
                     _part_result(parts["metastore"], "metastore", elapsed),
                     msgspec.json.decode(basis, type=Basis))
        if mixed else
        _part_result(parts["metastore"] or parts["register"],
                     "metastore" if parts["metastore"] else register_model, elapsed)
    )  # fmt: skip
    lin_result.figures.setdefault("elapsed_s", round(elapsed, 6))
    notes += [
        f"checked with Spark ({master}): linearizability per key on the executors, "
        f"{time_limit_s:g} s budget per key",
        "not run under --spark: raft, revisions, convergence, stats, sim "
        "(each needs the whole history in one process)",
        SPARK_NO_WITNESS,
    ]
    checkers: dict[str, CheckerResult] = {"linearizable": lin_result}
    reasons = [f"linearizable: {lin_result.error}"] if lin_result.valid == "unknown" else []
    return Result(valid=lin_result.valid, checkers=checkers, reasons=reasons, ops=all_ops,
                  elapsed_s=round(time.monotonic() - started, 6), notes=notes)  # fmt: skip


def _watch_record(clients: Any) -> Any:
    """The metastore prefix's watch record (`compose.watch_record`), built on the
    driver from the watch ops alone: it holds one entry per write under the
    prefix, which the metastore's one search needs anyway."""
    from pyspark.sql import functions as F  # noqa: N812 -- Spark's own idiom

    from checkers.compose import watch_record
    from pipeline.precheck import key_ops

    watches = clients.where(F.col("f") == "watch").orderBy("invoke_index").toPandas()
    return watch_record(key_ops(watches) if len(watches) else [])


def _part_result(results: list[Any], model: str, elapsed_s: float) -> Any:
    """One part's (register or metastore) per-group results as the checker's result."""
    result = checker_result(merge(results, model, elapsed_s), model)
    result.figures["elapsed_s"] = round(elapsed_s, 6)
    return result
