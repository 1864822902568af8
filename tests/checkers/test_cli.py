"""`faultline check`: exit codes, results.json, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.cli import main
from tests.checkers.helpers import HistoryBuilder, write_run
from tests.checkers.strategies import RaftScript


def _audit(two_leaders: bool) -> dict[str, list[dict[str, Any]]]:
    script = RaftScript()
    script.elect("n1", duplicate="n2" if two_leaders else None)
    script.change(("n1", "n2", "n4"))
    return {n: e for n, e in script.events.items() if e}


def _run_dir(tmp_path: Path, *, two_leaders: bool = False, audit: bool = True) -> Path:
    history = HistoryBuilder().op(0, "write", key="k", value=1).lines()
    return write_run(
        tmp_path / "run",
        history,
        plan={"name": "cli-test", "seed": 42},
        audit=_audit(two_leaders) if audit else None,
    )


@pytest.mark.parametrize(("two_leaders", "code", "valid"), [(False, 0, True), (True, 1, False)])
def test_check_exits_by_verdict_and_writes_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], two_leaders: bool, code: int, valid: Any
) -> None:
    """Exit 0 for valid, 1 for invalid, with results.json in the run dir."""
    run = _run_dir(tmp_path, two_leaders=two_leaders)
    assert main(["check", str(run), "--checker", "raft"]) == code
    results = json.loads((run / "results.json").read_text())
    assert results["valid"] is valid
    assert results["test"] == "cli-test"
    assert results["seed"] == 42
    assert results["checkers"]["raft"]["valid"] is valid
    out = capsys.readouterr().out
    assert "raft" in out
    if two_leaders:
        assert "two-leaders: ['n1', 'n2'] were all leader of part-1 in term 1" in out


def test_check_exits_2_when_undecided(tmp_path: Path) -> None:
    """A checker that cannot decide (no audit logs) makes the exit code 2."""
    run = _run_dir(tmp_path, audit=False)
    assert main(["check", str(run / "history.jsonl"), "--checker", "raft"]) == 2
    assert json.loads((run / "results.json").read_text())["valid"] == "unknown"


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["check", "{tmp}/missing"], "no history at"),
        (["check", "{run}", "--model", "bogus"], "argument --model: invalid choice: 'bogus'"),
        (["check", "{run}", "--checker", "nope"], "argument --checker: invalid choice: 'nope'"),
        (["check", "{run}", "--bogus-flag"], "unrecognized arguments: --bogus-flag"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], expected: str
) -> None:
    """Missing files, bad flags and bad names: one stderr line, exit 2."""
    run = _run_dir(tmp_path)
    args = [a.format(tmp=tmp_path, run=run) for a in args]
    with pytest.raises(SystemExit) as exit_:  # noqa: PT012 - argparse exits, main returns
        code = main(args)
        raise SystemExit(code)
    assert exit_.value.code == 2
    assert expected in _one_line_error(capsys)


def test_malformed_history_names_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad history line is reported with its number, before any checking."""
    run = _run_dir(tmp_path)
    good = (run / "history.jsonl").read_bytes()
    (run / "history.jsonl").write_bytes(good + b'{"index": 9, "time": "late"}\n')
    assert main(["check", str(run)]) == 2
    assert "line 3: Expected `int`, got `str` - at `$.time`" in _one_line_error(capsys)
    assert not (run / "results.json").exists()


def test_malformed_plan_is_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A test.json that is not JSON is named, not a traceback."""
    run = _run_dir(tmp_path)
    (run / "test.json").write_text("{nope")
    assert main(["check", str(run)]) == 2
    assert "test.json" in _one_line_error(capsys)


def test_malformed_audit_event_names_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A broken events.jsonl line is reported with its file and number."""
    run = _run_dir(tmp_path)
    events = run / "nodes" / "n1" / "events.jsonl"
    events.write_bytes(events.read_bytes() + b'{"node": "n1"}\n')
    assert main(["check", str(run)]) == 2
    err = _one_line_error(capsys)
    assert "nodes/n1/events.jsonl: line" in err
    assert "event has no string 'kind'" in err


def test_default_checkers_depend_on_what_the_run_left(tmp_path: Path) -> None:
    """A run dir gets every checker; a bare history only the history ones."""
    run = _run_dir(tmp_path)
    main(["check", str(run)])
    ran = set(json.loads((run / "results.json").read_text())["checkers"])
    assert ran == {"linearizable", "raft", "revisions", "convergence", "stats"}
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "h.jsonl").write_bytes((run / "history.jsonl").read_bytes())
    main(["check", str(bare / "h.jsonl")])
    ran = set(json.loads((bare / "results.json").read_text())["checkers"])
    assert ran == {"linearizable", "revisions", "stats"}


def test_linearizability_verdict_reaches_the_exit_code(tmp_path: Path) -> None:
    """A register read that returns a value never written is invalid: exit 1."""
    h = HistoryBuilder().op(0, "write", key="k", value=1).op(1, "read", key="k", result=2)
    run = write_run(tmp_path / "run", h.lines())
    assert main(["check", str(run), "--checker", "linearizable", "--model", "register"]) == 1
    result = json.loads((run / "results.json").read_text())["checkers"]["linearizable"]
    assert result["anomalies"][0]["kind"] == "nonlinearizable"
    h2 = HistoryBuilder().op(0, "write", key="k", value=1).op(1, "read", key="k", result=1)
    run2 = write_run(tmp_path / "run2", h2.lines())
    assert main(["check", str(run2), "--checker", "linearizable", "--model", "register"]) == 0


def _full_run(tmp_path: Path, *, stale_read: bool) -> Path:
    """A run with traffic, a kill overlapping a change, a quiet tail, and audit logs."""
    second = 1_000_000_000
    h = HistoryBuilder()
    for i in range(6):
        h.op(i % 3, "put", key="k", value=i, dt=second // 10)
    h.op("nemesis", "kill", type_="info", value={"nodes": ["n3"]})
    h.op(100, "change-peers", value=["n1", "n2", "n4"])
    h.op("nemesis", "start", type_="info", value={"nodes": ["n3"]})
    for i in range(6):
        h.op(i % 3, "get", key="k", result=4 if stale_read and i == 5 else 5, dt=second)
    script = RaftScript(group="part-0")
    script.elect("n1")
    script.change(("n1", "n2", "n4"))
    audit = {n: e for n, e in script.events.items() if e}
    audit["n1"].append(
        {"kind": "assignments-written", "node": "n1", "zone": 1, "partition": 0,
         "revision": 9, "keys": {"stable": {"old": ["n1", "n2", "n3"], "new": ["n1", "n2", "n4"]}}}
    )  # fmt: skip
    plan = {"name": "e2e", "seed": 3, "workload": {"model": "kv"}}
    return write_run(tmp_path / "run", h.lines(), plan=plan, audit=audit)


def test_full_run_is_valid_and_a_stale_read_is_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every checker passes a clean run (exit 0); one stale read makes it invalid (exit 1)."""
    run = _full_run(tmp_path / "clean", stale_read=False)
    assert main(["check", str(run)]) == 0, capsys.readouterr().out
    results = json.loads((run / "results.json").read_text())
    assert {n: r["valid"] for n, r in results["checkers"].items()} == {
        "linearizable": True, "raft": True, "revisions": True, "convergence": True, "stats": True,
    }  # fmt: skip
    assert results["checkers"]["stats"]["figures"]["fault_change_overlaps"] == 1
    run = _full_run(tmp_path / "stale", stale_read=True)
    assert main(["check", str(run)]) == 1
    results = json.loads((run / "results.json").read_text())
    assert results["checkers"]["linearizable"]["valid"] is False
    assert results["checkers"]["raft"]["valid"] is True


def test_internal_error_is_one_line_unless_debugging(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug outside the checkers is one stderr line; FAULTLINE_DEBUG=1 re-raises it."""

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr("checkers.compose.check", broken)  # imported when the command runs
    run = _run_dir(tmp_path)
    assert main(["check", str(run)]) == 2
    assert "internal error: RuntimeError: boom" in _one_line_error(capsys)
    monkeypatch.setenv("FAULTLINE_DEBUG", "1")
    with pytest.raises(RuntimeError):
        main(["check", str(run)])


def test_check_parser_names_every_registered_checker() -> None:
    """The parser's checker names (kept apart for start-up) match the registry."""
    from checkers.cli import CHECKER_NAMES
    from checkers.compose import REGISTRY

    assert set(CHECKER_NAMES) == set(REGISTRY)


def test_checking_a_run_dir_again_gives_the_runs_own_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`faultline check RUN_DIR` reads timeline.json like the run did: the time
    rules (check quorum, stability after heal) place events instead of
    reporting -1, and every checker's figures equal the run's own."""
    store = tmp_path / "store"
    args = ["run", "--backend", "sim", "--seed", "1", "--time-limit", "6", "--store", str(store)]
    assert main([*args, "--no-progress"]) == 0, capsys.readouterr().out
    (run,) = [p.parent for p in store.rglob("results.json")]
    first = json.loads((run / "results.json").read_text())
    assert main(["check", str(run)]) == 0
    again = json.loads((run / "results.json").read_text())
    figures = _timeless({n: r.get("figures") for n, r in again["checkers"].items()})
    assert figures == _timeless({n: r.get("figures") for n, r in first["checkers"].items()})
    assert figures["raft"]["quorum-windows"] >= 0


def _timeless(doc: Any) -> Any:
    """The document without the checkers' own run times."""
    if isinstance(doc, dict):
        return {k: _timeless(v) for k, v in doc.items() if k != "elapsed_s"}
    if isinstance(doc, list):
        return [_timeless(v) for v in doc]
    return doc
