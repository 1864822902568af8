"""Ingest and analyze a synthetic store of 70 runs with a local Spark session.

Expected numbers come from the store itself, read with plain Python (the
runs' results.json and histories), and from how the store was built
(conftest.py), never from the pipeline's own code.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import pytest

from checkers.history import Event, pair
from pipeline.analyze import analyze
from pipeline.extract import IDLE, PHASES
from pipeline.ingest import SKIPPED_FILE, ingest, read_table
from tests.pipeline.conftest import GROUPS, Store


def _verdict(store: Store, rid: str) -> str:
    results = store.root / rid / "results.json"
    if not results.exists():
        return "crashed"
    valid = json.loads(results.read_text())["valid"]
    return {True: "true", False: "false"}.get(valid, "unknown")


def _events(store: Store, rid: str) -> list[Event]:
    """A run's history, keeping only whole lines (a crashed run's last is torn)."""
    out = []
    for line in (store.root / rid / "history.jsonl").read_bytes().splitlines():
        try:
            out.append(msgspec.json.decode(line, type=Event))
        except msgspec.DecodeError:
            continue
    return out


@pytest.fixture(scope="module")
def lake(spark: Any, store: Store, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The store ingested once, then ingested again, then analyzed."""
    path = tmp_path_factory.mktemp("lake") / "lake"
    first = ingest(spark, store.root, path)
    files = sorted(str(p.relative_to(path)) for p in path.rglob("*.parquet"))
    counts = {t: read_table(spark, path, t).count() for t in ("runs", "operations", "faults")}
    second = ingest(spark, store.root, path)
    tables = analyze(spark, path)
    return {"path": path, "first": first, "second": second, "files": files,
            "counts": counts, "tables": tables}  # fmt: skip


def test_ingest_takes_every_sound_run_and_skips_corrupt_ones(
    lake: dict[str, Any], store: Store
) -> None:
    """67 runs ingested; the 3 corrupt ones skipped, each with its reason."""
    first = lake["first"]
    assert first.found == len(store.runs) + len(store.corrupt) == 70
    assert first.ingested == len(store.runs) == 67
    assert len(first.skipped) == 3
    for rid, reason in first.skipped:
        assert reason.startswith(store.corrupt[rid]), (rid, reason)
    logged = json.loads((lake["path"] / SKIPPED_FILE).read_text())
    assert {r["run_id"] for r in logged} == set(store.corrupt)


def test_runs_table_holds_each_runs_verdict_and_version(spark: Any, lake: dict[str, Any],
                                                        store: Store) -> None:  # fmt: skip
    """Every run's verdict (crashed when unchecked) and version are in `runs`."""
    runs = read_table(spark, lake["path"], "runs").toPandas()
    assert sorted(runs["run_id"]) == sorted(store.runs)
    for row in runs.itertuples():
        assert row.valid == _verdict(store, row.run_id), row.run_id
        assert row.version == store.runs[row.run_id].version
    assert Counter(runs["valid"]) == {"true": 50, "false": 8, "unknown": 6, "crashed": 3}


def test_operations_table_holds_every_history_event(spark: Any, lake: dict[str, Any],
                                                    store: Store) -> None:  # fmt: skip
    """One row per event, with latency on exactly the client completions."""
    ops = read_table(spark, lake["path"], "operations")
    expected = sum(len(_events(store, rid)) for rid in store.runs)
    assert ops.count() == expected
    completions = sum(
        1 for rid in store.runs for op in pair(_events(store, rid))
        if op.complete_index is not None
    )  # fmt: skip
    assert ops.where("latency_ns is not null").count() == completions


def test_reingest_changes_nothing(spark: Any, lake: dict[str, Any]) -> None:
    """A second ingest adds no run, no row and no file."""
    second = lake["second"]
    assert (second.already, second.ingested) == (67, 0)
    path = lake["path"]
    assert sorted(str(p.relative_to(path)) for p in path.rglob("*.parquet")
                  if "analysis" not in p.parts) == lake["files"]  # fmt: skip
    for table, count in lake["counts"].items():
        assert read_table(spark, path, table).count() == count


def test_lake_is_partitioned_by_date_test_workload_and_nemesis(
    lake: dict[str, Any], store: Store
) -> None:
    """Parquet partitions are date=/test=/workload=/nemesis= directories, in every table."""
    dates = {p.name for p in (lake["path"] / "runs").iterdir() if p.is_dir()}
    assert dates == {"date=2026-11-18", "date=2026-11-19", "date=2026-11-20"}
    names = {json.loads((store.root / rid / "test.json").read_text())["name"]
             for rid in store.runs}  # fmt: skip
    for table in ("runs", "operations"):
        tests = {p.name for p in (lake["path"] / table).glob("date=*/test=*")}
        assert tests == {f"test={n}" for n in names}
    leaf = next((lake["path"] / "runs").glob("date=2026-11-18/test=*/workload=*/nemesis=*"))
    assert any(leaf.glob("*.parquet"))


def test_failure_rates_match_the_verdicts(lake: dict[str, Any], store: Store) -> None:
    """Per workload x nemesis x version: run counts and invalid / runs."""
    rates = lake["tables"]["failure_rates"]
    by_version = rates.groupby("version")[["runs", "valid", "invalid", "unknown", "crashed"]].sum()
    expected: Counter[tuple[str, str]] = Counter(
        (spec.version, _verdict(store, rid)) for rid, spec in store.runs.items()
    )
    for version in ("1.0", "1.1"):
        row = by_version.loc[version]
        assert row["invalid"] == expected[version, "false"]
        assert row["valid"] == expected[version, "true"]
        assert row["crashed"] == expected[version, "crashed"]
        assert row["runs"] == sum(n for (v, _), n in expected.items() if v == version)
    for row in rates.itertuples():
        assert row.failure_rate == pytest.approx(row.invalid / row.runs)


def test_flaky_seed_is_found(lake: dict[str, Any]) -> None:
    """Only the plan that came out valid one night and invalid the next is flaky."""
    flaky = lake["tables"]["flaky_seeds"]
    assert len(flaky) == 1
    row = flaky.iloc[0]
    assert (row["test"], row["seed"], row["version"]) == ("flaky", 30, "1.0")
    assert list(row["verdicts"]) == ["false", "true"]


def test_verdict_flip_between_versions_is_found(lake: dict[str, Any]) -> None:
    """Only the plan valid on 1.0 and invalid on 1.1 flipped."""
    flips = lake["tables"]["verdict_flips"]
    assert len(flips) == 1
    row = flips.iloc[0]
    assert (row["test"], row["seed"]) == ("flip", 40)
    assert (row["from_version"], row["from_verdict"]) == ("1.0", "true")
    assert (row["to_version"], row["to_verdict"]) == ("1.1", "false")


def test_anomaly_kinds_count_the_planted_stale_reads(lake: dict[str, Any]) -> None:
    """Every invalid run carries its one nonlinearizable anomaly."""
    kinds = lake["tables"]["anomaly_kinds"]
    lin = kinds[kinds["kind"] == "nonlinearizable"]
    assert lin["runs"].sum() == 8
    assert lin["anomalies"].sum() == 8


def test_coverage_shows_exercised_and_missing_phase_combinations(lake: dict[str, Any],
                                                                 store: Store) -> None:  # fmt: skip
    """The kill overlaps every change stage; nothing ever overlapped a cancel."""
    cov = lake["tables"]["coverage"].set_index(["fault", "phase"])
    assert set(cov.index) == {(f, p) for f in ("kill", "partition") for p in (*PHASES, IDLE)}
    both = sum(1 for spec in store.runs.values() if spec.group == (True, True))
    for phase in ("catching-up", "joint", "stable", "pending written"):
        assert cov.loc[("kill", phase), "runs"] == both
    assert cov.loc[("partition", IDLE), "runs"] == sum(1 for s in store.runs.values() if s.group[0])
    assert not cov.loc[("kill", "cancel"), "exercised"]
    assert not cov.loc[("partition", "joint"), "exercised"]


def test_latency_by_phase_counts_every_ok_client_op(lake: dict[str, Any], store: Store) -> None:
    """Phase buckets partition the ok client ops; quantiles are ordered."""
    lat = lake["tables"]["latency"]
    ok = sum(
        1 for rid in store.runs for op in pair(_events(store, rid))
        if isinstance(op.process, int) and op.type == "ok"
    )  # fmt: skip
    assert lat["ops"].sum() == ok
    assert set(lat["phase"]) == {"quiet", "fault", "change", "fault+change"}
    assert (lat["p50_ms"] <= lat["p90_ms"]).all()
    assert (lat["p90_ms"] <= lat["p99_ms"]).all()
    assert (lat["p99_ms"] <= lat["max_ms"]).all()


def test_unavailability_has_one_change_per_run_with_changes(lake: dict[str, Any],
                                                            store: Store) -> None:  # fmt: skip
    """Each synthetic change finishes; their counts match the runs that had one."""
    unav = lake["tables"]["unavailability"]
    with_changes = sum(1 for s in store.runs.values() if s.group[1])
    assert unav["changes"].sum() == with_changes
    assert unav["done"].sum() == with_changes
    assert (unav["max_unavailable_ms"] >= unav["mean_unavailable_ms"]).all()


def test_trends_have_one_row_per_night_and_group(lake: dict[str, Any]) -> None:
    """Three nights; each night's run counts add up to its runs."""
    trends = lake["tables"]["trends"]
    assert set(trends["date"]) == {"2026-11-18", "2026-11-19", "2026-11-20"}
    assert trends["runs"].sum() == 67
    assert len(GROUPS) <= trends.groupby("date").size().max()


def test_nightly_html_is_self_contained(lake: dict[str, Any]) -> None:
    """nightly.html inlines plotly and names the flaky seed and the flip."""
    page = Path(lake["path"] / "nightly.html").read_text()
    assert page.count("<script src=") == 0
    assert "Plotly.newPlot" in page
    assert "Flaky seeds" in page
    assert "flip" in page
    assert "Fault x phase combinations never exercised" in page


def test_a_verdict_that_changed_between_commits_is_a_flip_not_a_flaky_seed(spark: Any) -> None:
    """The package version is one number across commits (0.1.0): a plan valid at
    commit a and invalid at commit b flipped; only runs of one commit that
    disagree are flaky. Before, both commits read as one flaky 0.1.0."""
    from pipeline.analyze import flaky_seeds, verdict_flips

    cols = ("plan_key", "test", "seed", "db", "backend", "workload", "nemesis", "version",
            "git_rev", "valid", "started")  # fmt: skip
    cell = ("ember", "sim", "register", "mix")
    one, two, old = (
        ("k1", "mix", 15, *cell, "0.1.0"),
        ("k2", "mix", 16, *cell, "0.1.0"),
        ("k3", "old", 17, *cell, "1.0"),
    )
    rows = [(*one, "a", "true", "2026-12-07T22:44"), (*one, "b", "false", "2026-12-07T22:49"),
            (*one, "b", "false", "2026-12-07T22:50"),
            (*two, "b", "true", "x"), (*two, "b", "false", "y"),
            (*old, "unknown", "true", "x"), (*old, None, "false", "y")]  # fmt: skip
    runs = spark.createDataFrame(rows, ", ".join(f"{c} {'int' if c == 'seed' else 'string'}"
                                                 for c in cols))  # fmt: skip
    flips = verdict_flips(runs).toPandas()
    flipped = [(r.test, r.from_version, r.from_verdict, r.to_version, r.to_verdict)
               for r in flips.itertuples()]  # fmt: skip
    assert flipped == [("mix", "0.1.0@a", "true", "0.1.0@b", "false")]
    flaky = flaky_seeds(runs).toPandas()
    assert sorted((r.test, r.version) for r in flaky.itertuples()) == [
        ("mix", "0.1.0@b"), ("old", "1.0")]  # fmt: skip
