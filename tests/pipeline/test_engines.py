"""The Spark and columns ingest engines write the lake the rows engine writes.

Every engine ingests the conftest store (valid, invalid, unknown, crashed runs
with a torn last line, corrupt ones) and a second store of histories only the
rows engine's parser would read the same way by accident: values written
with spaces, as strings and floats, and histories breaking each of the
format's rules. Every table must hold the same rows (ingest_id aside) and
the same runs must be skipped for the same reasons.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from harness.synthetic import make_run
from pipeline.ingest import ingest, read_table
from pipeline.schemas import TABLES
from tests.pipeline.conftest import Store


def _rows(spark: Any, lake: Path, table: str) -> list[str]:
    """A table's rows, ingest_id aside, as sorted canonical JSON."""
    df = read_table(spark, lake, table).drop("ingest_id")
    return sorted(json.dumps(r.asDict(recursive=True), sort_keys=True) for r in df.collect())


def _rewrite(run: Path, edit: Any) -> None:
    """Replaces the run's history lines by edit(line number, event) (None drops one)."""
    lines = (run / "history.jsonl").read_bytes().splitlines()
    out = []
    for n, line in enumerate(lines):
        new = edit(n, msgspec.json.decode(line))
        if new is not None:
            out.append(new if isinstance(new, str) else json.dumps(new))  # spaces after : and ,
    (run / "history.jsonl").write_text("\n".join(out) + "\n")


def _odd_store(root: Path) -> dict[str, str]:
    """Runs whose lines the two engines read differently unless they agree on purpose;
    returns run id -> what it tests."""
    made: dict[str, str] = {}

    def run(seed: int, what: str) -> Path:
        path = make_run(root, seed=seed, ops=60, name="odd", started=1_763_600_000 + seed).path
        made[f"odd/{path.name}"] = what
        return path

    def values(n: int, ev: dict[str, Any]) -> Any:
        if ev["process"] == 0 and ev.get("value") is not None:
            if n % 4 == 3:  # a nested float as no msgspec writer spells it
                return json.dumps({**ev, "value": [7, 8]}).replace("[7, 8]", '[1E3, "n1.x"]')
            ev["value"] = {0: 'a "quoted" é', 1: 1.5, 2: 1e21}.get(n % 4, ev["value"])
        return ev

    _rewrite(run(1, "spaced JSON, string, float values"), values)

    def swap(k: int) -> Any:
        return lambda n, ev: {**ev, "index": 0} if n == k else ev

    _rewrite(run(2, "index goes back"), swap(20))
    _rewrite(run(3, "time goes back"), lambda n, ev: {**ev, "time": 0} if n == 20 else ev)
    _rewrite(
        run(4, "a process invokes twice"),
        lambda n, ev: {**ev, "type": "invoke"} if n > 5 and ev["type"] == "ok" else ev,
    )
    _rewrite(
        run(5, "completion f differs"),
        lambda n, ev: {**ev, "f": "zzz"} if n > 5 and ev["type"] == "ok" else ev,
    )
    _rewrite(run(6, "a line is not JSON"), lambda n, ev: '{"index": 7,' if n == 8 else ev)
    torn = run(7, "torn last line, yet checked")
    (torn / "history.jsonl").write_bytes((torn / "history.jsonl").read_bytes()[:-15])
    (run(8, "empty history") / "history.jsonl").write_bytes(b"")
    return made


@pytest.fixture(scope="module")
def lakes(spark: Any, store: Store, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Both stores ingested by every engine."""
    base = tmp_path_factory.mktemp("engines")
    odd = base / "odd"
    out: dict[str, Any] = {"odd": _odd_store(odd)}
    for name, root in (("main", store.root), ("odd", odd)):
        for engine in ("rows", "spark", "columns"):
            lake = base / f"lake-{name}-{engine}"
            out[name, engine] = (lake, ingest(spark, root, lake, engine=engine))
    return out


@pytest.mark.parametrize("engine", ["spark", "columns"])
@pytest.mark.parametrize("store_name", ["main", "odd"])
def test_each_engine_writes_the_rows_engines_lake(
    spark: Any, lakes: dict[str, Any], store_name: str, engine: str
) -> None:
    """Same rows in every table, same runs skipped for the same reasons."""
    rows_lake, rows = lakes[store_name, "rows"]
    spark_lake, fast = lakes[store_name, engine]
    assert sorted(fast.skipped) == sorted(rows.skipped)
    assert fast.rows == rows.rows
    for table in TABLES:
        assert _rows(spark, spark_lake, table) == _rows(spark, rows_lake, table), table


@pytest.mark.parametrize("engine", ["spark", "columns"])
def test_the_comparison_has_something_to_compare(
    lakes: dict[str, Any], store: Store, engine: str
) -> None:
    """The fast engine took the regular runs itself (the rows engine only the
    crashed ones with a torn line and the one corrupt history), and both lakes
    hold every table."""
    _, rows = lakes["main", "rows"]
    _, fast = lakes["main", engine]
    crashed = sum(1 for spec in store.runs.values() if spec.crashed)
    assert fast.by_rows == crashed + 1 == 4
    assert rows.by_rows == rows.found == 70
    assert all(rows.rows[t] > 0 for t in TABLES), rows.rows


@pytest.mark.parametrize("engine", ["spark", "columns"])
def test_odd_histories_are_skipped_or_kept_as_the_rows_engine_does(
    lakes: dict[str, Any], engine: str
) -> None:
    """Every rule-breaking history is skipped as malformed; the run with odd
    values is ingested, by the fast engine itself."""
    made = lakes["odd"]
    _, fast = lakes["odd", engine]
    reasons = dict(fast.skipped)
    for rid, what in made.items():
        if what.startswith("spaced"):
            assert rid not in reasons
        elif what == "empty history":
            assert rid not in reasons  # an empty history is a run with no events
        else:
            assert reasons[rid].startswith("malformed history"), (what, reasons.get(rid))
    assert fast.ingested == 2
    assert fast.by_rows == len(made) - 1


def test_a_history_spark_splits_goes_to_the_rows_engine_once(
    spark: Any, store: Store, lakes: dict[str, Any], tmp_path: Path
) -> None:
    """With partitions smaller than most histories no task holds those runs
    whole: they go to the rows engine (once, though every block sees them),
    and the lake is the same."""
    settings = {"spark.sql.files.maxPartitionBytes": "16384",
                "spark.sql.files.openCostInBytes": "0"}  # fmt: skip
    before = {k: spark.conf.get(k) for k in settings}
    for k, v in settings.items():
        spark.conf.set(k, v)
    try:
        split = ingest(spark, store.root, tmp_path / "lake", engine="spark")
    finally:
        for k, v in before.items():
            spark.conf.set(k, v)
    rows_lake, rows = lakes["main", "rows"]
    assert 30 < split.by_rows < split.found
    assert sorted(split.skipped) == sorted(rows.skipped)
    assert split.rows == rows.rows
    for table in TABLES:
        assert _rows(spark, tmp_path / "lake", table) == _rows(spark, rows_lake, table), table
