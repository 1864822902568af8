"""`faultline check --spark`: the local checker's verdict JSON, decided per key on Spark.

Each case is checked twice, by `checkers.compose.check` (what `faultline
check` runs) and by `pipeline.spark_check` on the session's local Spark, and
the linearizable checker's results are compared field by field where the
two must agree (verdict, model, ops and partitions per part, the failing key
and its unplaceable ops), never against numbers taken from the code under test.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from checkers.compose import check, load_run
from checkers.verify_cli import SPARK_NO_WITNESS
from harness.synthetic import make_run
from pipeline.spark_check import SparkCheckError, spark_check

AGREE = ("valid", "model", "ops", "partitions")


def _local(path: Path) -> dict[str, Any]:
    plan, history, audit, _ = load_run(path, [])
    result = check(plan, history, {"checkers": ["linearizable"]}, audit=audit)
    return json.loads(json.dumps(result.checkers["linearizable"].figures, default=str))


def _spark(spark: Any, path: Path, notes: list[str] | None = None) -> Any:
    history = path / "history.jsonl" if path.is_dir() else path
    return spark_check(spark, history, model=None, time_limit_s=30.0, master="local[2]",
                       notes=notes if notes is not None else [])  # fmt: skip


def _parts(figures: dict[str, Any]) -> dict[str, dict[str, Any]]:
    if "model" in figures:
        return {"": figures}
    return {k: v for k, v in figures.items() if isinstance(v, dict)}


def _assert_agree(local: dict[str, Any], ours: Any) -> None:
    figures = json.loads(json.dumps(ours.checkers["linearizable"].figures, default=str))
    lp, sp = _parts(local), _parts(figures)
    assert sorted(lp) == sorted(sp)
    for part in lp:
        assert {k: sp[part].get(k) for k in AGREE} == {k: lp[part].get(k) for k in AGREE}, part
        if lp[part]["valid"] is False:
            assert sp[part]["failure"]["key"] == lp[part]["failure"]["key"]
            assert sp[part]["failure"]["unplaceable"] == lp[part]["failure"]["unplaceable"]
            assert sp[part]["counterexample"]["key"] == lp[part]["counterexample"]["key"]


@pytest.mark.parametrize("valid", [True, False])
def test_a_kv_history_gets_the_local_verdict(spark: Any, tmp_path: Path, valid: bool) -> None:
    """A synthetic run (a planted stale read when invalid): same verdict, same failure."""
    run = make_run(tmp_path, seed=3, ops=300, valid=valid, started=1_763_500_000).path
    local = _local(run)
    assert local["valid"] is valid
    ours = _spark(spark, run)
    assert ours.valid is valid
    _assert_agree(local, ours)
    if not valid:
        assert [a.kind for a in ours.checkers["linearizable"].anomalies] == ["nonlinearizable"]
    assert SPARK_NO_WITNESS in ours.notes


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real ember run under the simulator: register and metastore traffic mixed."""
    store = tmp_path_factory.mktemp("sim-store")
    cmd = [sys.executable, "-m", "harness.cli", "run", "--backend", "sim", "--time-limit", "6",
           "--seed", "11", "--store", str(store), "--no-progress"]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    return next(store.glob("*/*-11"))


def test_a_mixed_register_and_metastore_history_is_split_as_locally(
    spark: Any, sim_run: Path
) -> None:
    """Register keys per key with kv, the metastore's ops as one search on
    revisions ranked by the same watch record (checkers/meta_ranks.py)."""
    local = _local(sim_run)
    assert set(_parts(local)) == {"register", "metastore"}
    ours = _spark(spark, sim_run)
    _assert_agree(local, ours)
    revisions = ours.checkers["linearizable"].figures["metastore"]["revisions"]
    assert revisions == local["metastore"]["revisions"]
    assert revisions.startswith("ranked by the watch record")


def test_a_mixed_history_invalid_only_on_ranks_is_invalid_under_spark_too(
    spark: Any, tmp_path: Path
) -> None:
    """A read naming the older write's revision: found only on revisions ranked
    by the watch record, by both checks, with the same failure and message."""
    from tests.checkers.helpers import foreign_writers_history

    b = foreign_writers_history(10)
    b.op(0, "put", key="k1", value=3, result=None)  # register traffic: the history is mixed
    (tmp_path / "history.jsonl").write_bytes(b.lines())
    local = _local(tmp_path)
    assert local["metastore"]["valid"] is False
    ours = _spark(spark, tmp_path)
    _assert_agree(local, ours)
    plan, history, audit, _ = load_run(tmp_path, [])
    mine = check(plan, history, {"checkers": ["linearizable"]}, audit=audit)
    assert [a.message for a in ours.checkers["linearizable"].anomalies] == \
        [a.message for a in mine.checkers["linearizable"].anomalies]  # fmt: skip


@pytest.mark.parametrize(("recorded", "lost"), [(True, 0), (False, 0), (False, 1), (False, 4)])
def test_revisions_the_check_did_not_judge_are_named_under_spark_too(
    spark: Any, tmp_path: Path, recorded: bool, lost: int
) -> None:
    """An op past the watch record, or no record at all: the notes the summary
    prints (`compose.Basis.notes`) cross Spark's result rows unchanged; and
    transactions of unknown outcome comparing revisions, writing in both
    branches, are checked each way there too (checkers/meta_branches.py), or,
    more than `MAX_SPLIT` of them, leave the part unknown for the same reason."""
    from checkers.meta_branches import MAX_SPLIT
    from tests.checkers.helpers import HistoryBuilder, watch_op

    assert lost in (0, 1, MAX_SPLIT + 1)
    b = HistoryBuilder()
    if recorded:
        watch_op(b, 1, [(2, "m/0", "put", 1), (5, "m/1", "put", 2)])
    b.op(1, "put", key="m/0", value=1, result=2)
    b.op(1, "put", key="m/1", value=2, result=5)
    b.op(1, "get", key="m/0", result={"value": 1, "mod_revision": 2, "revision": 20})
    cond = {"key": "m/0", "target": "mod_revision", "op": "gt", "value": 3}
    for process in range(2, 2 + lost):
        spec = {"if": [cond], "then": [{"op": "delete", "key": "m/0"}],
                "else": [{"op": "put", "key": "m/1", "value": 4}]}  # fmt: skip
        b.add(process, "invoke", "invoke", key="m/0", value=spec)
        b.add(process, "info", "invoke", key="m/0", value=None)
    b.op(0, "put", key="k1", value=3, result=None)  # register traffic: the history is mixed
    (tmp_path / "history.jsonl").write_bytes(b.lines())
    local = _local(tmp_path)
    ours = json.loads(json.dumps(_spark(spark, tmp_path).checkers["linearizable"].figures,
                                 default=str))  # fmt: skip
    assert ours["notes"] == local["notes"]
    assert ours["metastore"]["revisions"] == local["metastore"]["revisions"]
    note = local["notes"][0]
    if recorded:
        assert "the revisions of 1 of 3 operations not checked" in note, note
    else:
        assert "revisions not checked (values and outcomes only)" in note, note
    assert ours["metastore"]["valid"] == local["metastore"]["valid"]
    assert ours["metastore"].get("reason") == local["metastore"].get("reason")
    assert ours["metastore"].get("branches") == local["metastore"].get("branches")
    if lost == 1:
        assert local["metastore"]["valid"] is True
        assert local["metastore"]["branches"]["tried"] == [{"then": [6], "valid": True}]
        assert "checked each way" in local["notes"][1]
    if lost > 1:
        assert local["metastore"]["valid"] == "unknown"
        assert f"{lost} transactions of unknown outcome compare" in local["metastore"]["reason"]


def _kv_lines(n: int) -> list[str]:
    out = []
    for i in range(n):
        for t in ("invoke", "ok"):
            event = {"index": len(out), "time": len(out) * 10, "process": i % 3, "type": t,
                     "f": "put", "key": f"k{i % 4}", "value": i}  # fmt: skip
            out.append(json.dumps(event))
    return out


def test_a_torn_last_line_is_skipped_with_a_note(spark: Any, tmp_path: Path) -> None:
    lines = _kv_lines(20)
    path = tmp_path / "history.jsonl"
    path.write_text("\n".join(lines) + "\n" + lines[0][:15])  # the writer died mid-line
    notes: list[str] = []
    result = _spark(spark, path, notes)
    assert result.valid is True
    assert any("line 41 is torn" in n and "checked the 40 lines" in n for n in notes)


def test_a_corrupt_middle_line_is_refused_naming_it(spark: Any, tmp_path: Path) -> None:
    lines = _kv_lines(20)
    lines[7] = '{"index": "seven"}'
    path = tmp_path / "history.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SparkCheckError, match="line 8:"):
        _spark(spark, path)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness.cli", "check", *args],
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--master", "local[2]"], "--master needs --spark"),
        (["--spark", "--checker", "raft"], "--spark runs the linearizable checker only"),
        (["--spark", "--revisions", "{}"], "--spark runs no revision rules"),
    ],
)
def test_flags_spark_cannot_honour_are_refused_in_one_line(
    tmp_path: Path, flags: list[str], message: str
) -> None:
    run = make_run(tmp_path, seed=1, ops=20, started=1_763_500_000).path
    proc = _cli(str(run), *flags)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_cli_writes_results_that_verify_refuses_for_want_of_a_witness(tmp_path: Path) -> None:
    """End to end: exit code, results.json in the local shape, verify's one-line refusal."""
    run = make_run(tmp_path, seed=2, ops=60, started=1_763_500_000).path
    proc = _cli(str(run), "--spark", "--master", "local[1]")
    assert proc.returncode == 0, proc.stderr[-2000:]
    # pipeline/log4j2.properties: none of Spark's start-up warnings above the summary
    for noise in ("Setting default log level", "WARN Utils", "NativeCodeLoader", "log4j"):
        assert noise not in proc.stderr, proc.stderr[-2000:]
    results = json.loads((run / "results.json").read_text())
    assert results["valid"] is True
    assert list(results["checkers"]) == ["linearizable"]
    assert results["history"] == "history.jsonl"
    verify = subprocess.run([sys.executable, "-m", "harness.cli", "verify", str(run)],
                            capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert verify.returncode == 2
    assert "keeps no witness" in verify.stderr
