"""The distributed per-key pre-check, and the pipeline CLI's boundaries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness import cli
from harness.synthetic import make_run
from pipeline.precheck import _first_lines, precheck, stage


def _line(index: int, process: int, type_: str, f: str, key: str, **extra: Any) -> str:
    return json.dumps({"index": index, "time": index * 1000, "process": process, "type": type_,
                       "f": f, "key": key, **extra})  # fmt: skip


def _history(tmp_path: Path) -> Path:
    """Keys with one problem each, a malformed line and a process breaking the rules."""
    lines = [
        _line(0, 1, "invoke", "put", "fine", value=1), _line(1, 1, "ok", "put", "fine", value=1,
                                                             revision=1),
        _line(2, 1, "invoke", "get", "fine"), _line(3, 1, "ok", "get", "fine", value=1, revision=1),
        # "stale": a get returns the value a completed put had overwritten.
        _line(4, 2, "invoke", "put", "stale", value=1), _line(5, 2, "ok", "put", "stale", value=1,
                                                               revision=2),
        _line(6, 2, "invoke", "put", "stale", value=2), _line(7, 2, "ok", "put", "stale", value=2,
                                                               revision=3),
        _line(8, 2, "invoke", "get", "stale"), _line(9, 2, "ok", "get", "stale", value=1,
                                                     revision=3),
        # "rev": a write's revision is below one that completed before it began.
        _line(10, 3, "invoke", "put", "rev", value=1), _line(11, 3, "ok", "put", "rev", value=1,
                                                             revision=5),
        _line(12, 3, "invoke", "put", "rev", value=2), _line(13, 3, "ok", "put", "rev", value=2,
                                                             revision=4),
        # "dup": its write shares revision 5 with one on "rev".
        _line(14, 4, "invoke", "put", "dup", value=1), _line(15, 4, "ok", "put", "dup", value=1,
                                                             revision=5),
        "{this is not json",
        # process 5 invokes twice without a completion in between.
        _line(16, 5, "invoke", "get", "x"), _line(17, 5, "invoke", "get", "x"),
    ]  # fmt: skip
    path = tmp_path / "history.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_precheck_finds_each_kind_of_problem_on_its_key(spark: Any, tmp_path: Path) -> None:
    """Per-key verdicts: a stale read, a revision going back, shared revisions, bad lines."""
    out = tmp_path / "keys"
    # The history carries its revisions in the events' `revision` field.
    declared = {"ops": {"put": "revision", "get": "revision"}}
    result = precheck(spark, _history(tmp_path), out=out, revisions=declared)
    assert result.valid is False
    assert result.events == 18  # the malformed line is not an event
    assert result.bad_lines == [result.bad_lines[0]]
    assert result.bad_lines[0].startswith("line 17:")
    assert len(result.process_problems) == 1
    assert "process 5 invokes again" in result.process_problems[0]
    assert result.duplicate_revisions == [5]
    keys = {r["key"]: r for r in spark.read.parquet(str(out)).toPandas().to_dict("records")}
    assert {k: r["valid"] for k, r in keys.items()} == {
        "fine": "true", "stale": "false", "rev": "false", "dup": "true"
    }  # fmt: skip
    assert list(keys["stale"]["unplaceable"]) == [8]
    assert len(keys["rev"]["revision_anomalies"]) == 1
    assert "is not above" in keys["rev"]["revision_anomalies"][0]
    assert {k["key"] for k in result.failed_keys} == {"stale", "rev"}


def test_precheck_agrees_with_the_checkers_on_a_planted_stale_read(
    spark: Any, tmp_path: Path
) -> None:
    """The invalid key is the one the run's own linearizability verdict names."""
    run = make_run(tmp_path, seed=11, ops=600, valid=False, rebalance=False)
    message = json.loads(run.results.read_text())["checkers"]["linearizable"]["anomalies"][0]
    result = precheck(spark, run.history)
    assert result.valid is False
    assert [f"key {k['key']!r}" for k in result.failed_keys] == [message["message"].split(":")[0]]


def test_cli_precheck_passes_a_valid_run(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`faultline pipeline precheck RUN` exits 0 on a linearizable history."""
    run = make_run(tmp_path, seed=12, ops=600)
    assert json.loads(run.results.read_text())["checkers"]["linearizable"]["valid"] is True
    assert cli.main(["pipeline", "precheck", str(run.path), "--master", "local[2]"]) == 0
    assert "pre-check: True" in capsys.readouterr().err


def test_precheck_refuses_a_model_not_partitioned_by_key(spark: Any, tmp_path: Path) -> None:
    """Only per-key models can be split across executors."""
    with pytest.raises(ValueError, match="not partitioned by key"):
        precheck(spark, _history(tmp_path), model="kv-nopart")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["pipeline", "ingest", "--store", "/nonexistent/store"], "no run store at"),
        (["pipeline", "analyze", "--lake", "/nonexistent/lake"], "no lake at"),
        (["pipeline", "precheck", "/nonexistent/h.jsonl"], "no history at"),
    ],
)
def test_cli_bad_paths_are_one_line_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Missing inputs are named on one line with exit 2, before Spark starts."""
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_lines_are_numbered_across_the_blocks_spark_splits_a_history_into(
    spark: Any, tmp_path: Path
) -> None:
    """Each task reads a block of the file; a bad line's number, the last line's
    and the events counted are the file's own however many blocks it is read in."""
    from pyspark.sql import functions as F  # noqa: N812 -- Spark's own idiom

    lines = [_line(2 * i + j, i % 7, t, "put", f"k{i % 5}", value=i)
             for i in range(150) for j, t in enumerate(("invoke", "ok"))]  # fmt: skip
    lines[3] = ""  # blank lines are numbered but are no event
    lines[4] = "   "
    bad = {10: '{"index": "ten"}', 151: "not json", 298: '{"index": 298, "time": 1}'}
    for at, text in bad.items():
        lines[at] = text
    path = tmp_path / "history.jsonl"
    path.write_bytes(("\n".join(lines[:200]) + "\r\n" + "\n".join(lines[200:]) + "\n").encode())
    settings = {"spark.sql.files.maxPartitionBytes": "2048", "spark.sql.files.openCostInBytes": "0"}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        text = spark.read.text(str(path)).select(F.col("_metadata.file_block_start").alias("block"))
        assert len(_first_lines(text)) > 10  # the file really was split
        staged = stage(spark, path)
        try:
            assert [b.line for b in staged.bad] == [at + 1 for at in sorted(bad)]
            assert staged.bad[0].error.startswith("Expected `int`, got `str`")
            assert staged.bad_count == len(bad)
            assert staged.last_line == len(lines)
            assert staged.events == len(lines) - 2 - len(bad)
        finally:
            staged.release()
    finally:
        for key in settings:
            spark.conf.unset(key)
