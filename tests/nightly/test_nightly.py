"""`faultline nightly`: matrix parsing, running cells as subprocesses, JUnit XML."""

from __future__ import annotations

import itertools
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness import cli, nightly
from harness.nightly import (
    ERROR,
    FAILED,
    PASSED,
    SKIPPED,
    UNKNOWN,
    Matrix,
    MatrixError,
    Outcome,
    exit_code,
    junit_xml,
    load_matrix,
    parse_matrix,
    run_night,
)

STUB = Path(__file__).with_name("stub_run.py")
REPO = Path(__file__).resolve().parents[2]


def stub_matrix(tmp_path: Path, **overrides: object) -> Matrix:
    """A matrix whose runs are the stub script, storing under tmp_path."""
    raw: dict[str, object] = {
        "workloads": ["register"], "nemeses": ["partition"], "seeds": 1, "nodes": [3],
        "time_limit_s": 1, "grace_s": 120, "store": str(tmp_path / "store"),
        "junit": str(tmp_path / "junit.xml"), "command": [sys.executable, str(STUB)],
    }  # fmt: skip
    raw.update(overrides)
    return parse_matrix(raw)


def test_example_matrix_parses_into_every_combination() -> None:
    """The shipped example is a valid matrix; cells are the full product."""
    m = load_matrix(REPO / "examples" / "nightly.toml")
    assert len(m.cells()) == len(m.workloads) * len(m.nemeses) * len(m.nodes) * len(m.seeds)
    assert m.backend == "sim"


def test_seed_count_expands_from_seed_base() -> None:
    """`seeds = 3` with `seed_base = 10` runs seeds 10, 11 and 12."""
    m = parse_matrix({"workloads": ["w"], "nemeses": ["n"], "seeds": 3, "seed_base": 10})
    assert m.seeds == (10, 11, 12)
    assert m.junit == m.store / "nightly-junit.xml"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"workloads": ["w"], "nemeses": ["n"], "seedz": 3}, "unknown key 'seedz'"),
        ({"nemeses": ["n"]}, "missing key 'workloads'"),
        ({"workloads": "w", "nemeses": ["n"]}, "workloads must be"),
        ({"workloads": ["w"], "nemeses": []}, "nemeses must be"),
        ({"workloads": ["w"], "nemeses": ["n"], "backend": "k8s"}, "backend 'k8s'"),
        ({"workloads": ["w"], "nemeses": ["n"], "seeds": 0}, "seeds must be at least 1"),
        ({"workloads": ["w"], "nemeses": ["n"], "nodes": [3, True]}, "nodes must be"),
        ({"workloads": ["w"], "nemeses": ["n"], "budget_s": -1}, "budget_s must be positive"),
        ({"workloads": ["w"], "nemeses": ["n"], "command": "faultline run"}, "command must be"),
    ],
)
def test_bad_matrix_is_one_clear_error(raw: dict[str, object], message: str) -> None:
    """Every malformed matrix raises MatrixError naming what is wrong."""
    with pytest.raises(MatrixError, match=message):
        parse_matrix(raw)


def test_matrix_file_that_is_not_toml_names_the_file(tmp_path: Path) -> None:
    """A TOML syntax error names the file."""
    bad = tmp_path / "bad.toml"
    bad.write_text("workloads = [\n")
    with pytest.raises(MatrixError, match=r"bad\.toml is not valid TOML"):
        load_matrix(bad)


def test_night_survives_crashes_and_reports_each_verdict(tmp_path: Path) -> None:
    """Valid, invalid, unknown and crashed runs each get their own outcome."""
    m = stub_matrix(tmp_path, workloads=["register", "crash"], nemeses=["partition", "bug", "weak"])
    by_name = {(o.cell.workload, o.cell.nemesis): o for o in run_night(m)}
    assert by_name["register", "partition"].status == PASSED
    assert by_name["register", "bug"].status == FAILED
    assert by_name["register", "bug"].anomalies == {"linearizable:nonlinearizable": 1}
    assert by_name["register", "weak"].status == UNKNOWN
    for nemesis in ("partition", "bug", "weak"):
        crashed = by_name["crash", nemesis]
        assert crashed.status == ERROR
        assert crashed.run_dir is None
        assert "without leaving a run dir" in crashed.reasons[0]
    assert by_name["register", "bug"].run_dir is not None
    assert by_name["register", "bug"].exit_code == 1


def test_hung_run_is_killed_and_recorded_as_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that outlives its time limit plus grace gets SIGTERM, so it can heal and
    remove its cluster; one deaf to it is killed; the night goes on either way."""
    monkeypatch.setattr(nightly, "TERM_GRACE_S", 2.0)
    # 4 s: the stub must have its handler in place before the SIGTERM, even under load.
    m = stub_matrix(tmp_path, workloads=["slow", "hang", "register"], time_limit_s=0.1,
                    grace_s=4)  # fmt: skip
    slow, hung, ok = run_night(m)
    assert slow.status == ERROR
    assert slow.reasons[0].startswith("stopped (SIGTERM, after which it cleaned up) after 4s")
    assert "cleaned up after SIGTERM" in slow.output_tail
    assert (m.store / "cleaned-up").exists()
    assert hung.status == ERROR
    assert hung.reasons[0].startswith("killed (SIGKILL, 2s after a SIGTERM it did not end on)")
    assert "stub run: seed 1" in hung.output_tail
    assert ok.status == PASSED


def test_spent_budget_skips_the_remaining_runs(tmp_path: Path) -> None:
    """Once the budget is used up, the rest are skipped, not run."""
    ticks = itertools.count(0.0, 100.0)  # every clock read is 100 s later
    m = stub_matrix(tmp_path, seeds=[1, 2, 3], budget_s=250)
    outcomes = run_night(m, clock=lambda: next(ticks))
    assert [o.status for o in outcomes] == [PASSED, PASSED, SKIPPED]
    runs = (tmp_path / "store" / "register-partition-n3").iterdir()
    assert sorted(r.name.rsplit("-", 1)[1] for r in runs) == ["1", "2"]


def test_junit_xml_carries_verdict_anomalies_and_replay(tmp_path: Path) -> None:
    """One test case per run; failures and errors carry what CI needs."""
    m = stub_matrix(tmp_path, workloads=["register", "crash"], nemeses=["bug"], seeds=[7])
    outcomes = [*run_night(m), Outcome(m.cells()[0], SKIPPED, reasons=["budget"])]
    root = ET.fromstring(junit_xml(outcomes, m, "2026-11-21T00:00:00"))
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"),
            suite.get("skipped")) == ("3", "1", "1", "1")  # fmt: skip
    cases = suite.findall("testcase")
    assert [c.get("classname") for c in cases] == [
        "nightly.ember.sim.register.bug", "nightly.ember.sim.crash.bug",
        "nightly.ember.sim.register.bug",
    ]  # fmt: skip
    assert cases[0].get("name") == "n3-seed7"
    failure = cases[0].find("failure")
    assert failure is not None
    assert failure.get("message") == "invalid: linearizable:nonlinearizable x1"
    assert f"replay: faultline replay {outcomes[0].run_dir}" in (failure.text or "")
    error = cases[1].find("error")
    assert error is not None
    assert "replay: " in (error.text or "")
    assert "--workload crash" in (error.text or "")
    assert cases[2].find("skipped") is not None


def test_exit_code_ranks_failed_over_unknown_over_passed(tmp_path: Path) -> None:
    """1 if any run failed, else 2 if any was unknown or errored, else 0."""
    cell = stub_matrix(tmp_path).cells()[0]

    def night(*statuses: str) -> list[Outcome]:
        return [Outcome(cell, s) for s in statuses]

    assert exit_code(night(PASSED, SKIPPED)) == 0
    assert exit_code(night(PASSED, UNKNOWN)) == 2
    assert exit_code(night(ERROR, PASSED)) == 2
    assert exit_code(night(ERROR, FAILED, UNKNOWN)) == 1


def test_cli_writes_junit_and_prints_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`faultline nightly --matrix` runs the night, writes JUnit XML, exits 1 on a failure."""
    matrix = tmp_path / "night.toml"
    matrix.write_text(
        f'workloads = ["register"]\nnemeses = ["partition", "bug"]\nseeds = [4]\n'
        f"command = [{sys.executable!r}, {str(STUB)!r}]\n".replace("'", '"')
    )
    junit = tmp_path / "out" / "night.xml"
    code = cli.main(["nightly", "--matrix", str(matrix), "--junit", str(junit),
                     "--store", str(tmp_path / "store")])  # fmt: skip
    assert code == 1
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures")) == ("2", "1")
    out = capsys.readouterr().out
    assert "faultline nightly" in out
    assert "passed: 1" in out
    assert "failed: 1" in out


def test_cli_bad_matrix_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad matrix key is one line on stderr and exit code 2, no traceback."""
    matrix = tmp_path / "night.toml"
    matrix.write_text('workloads = ["w"]\nnemeses = ["n"]\nbudget = 5\n')
    assert cli.main(["nightly", "--matrix", str(matrix)]) == 2
    err = capsys.readouterr().err
    assert "unknown key 'budget'" in err
    assert "Traceback" not in err


def test_a_cell_can_explore_instead_of_running_once(tmp_path: Path) -> None:
    """explore_budget: each cell is a `faultline explore` of its plan (real
    simulated runs); a budget spent on valid seeds passes with explore's own
    summary, and the store's coverage table grows."""
    from harness.nightly import PASSED, cell_command, parse_matrix, run_args

    raw: dict[str, object] = {
        "backend": "sim", "workloads": ["register"], "nemeses": ["partition"], "nodes": [3],
        "seeds": 1, "time_limit_s": 4, "explore_budget": "2 runs",
        "store": str(tmp_path / "store"), "extra_args": ["--workers", "1"],
    }  # fmt: skip
    m = parse_matrix(raw)
    assert cell_command(m) == ("faultline", "explore")
    assert run_args(m, m.cells()[0])[:2] == ["--budget", "2 runs"]
    (outcome,) = run_night(m)
    assert outcome.status == PASSED, [*outcome.reasons, outcome.output_tail]
    assert any("explore: 2 runs" in r and "2 valid" in r for r in outcome.reasons)
    table = tmp_path / "store" / "explore" / "coverage.json"
    assert table.is_file()
    # The night's coverage is what its explores added to the store's table.
    from harness.coverage import Coverage
    from harness.nightly import night_coverage

    stored = Coverage.load(table)
    assert night_coverage(m, [outcome], Coverage()).hits == stored.hits
    assert night_coverage(m, [outcome], stored).hit == 0


@pytest.mark.parametrize(("raw", "message"), [
    ({"backend": "docker", "explore_budget": "2m"}, 'explore_budget needs backend "sim"'),
    ({"backend": "sim", "explore_budget": "soon"}, "explore_budget: 'soon'"),
])  # fmt: skip
def test_a_bad_explore_budget_is_one_clear_error(raw: dict[str, object], message: str) -> None:
    from harness.nightly import MatrixError, parse_matrix

    with pytest.raises(MatrixError, match=re.escape(message)):
        parse_matrix({"workloads": ["register"], "nemeses": ["kill"], **raw})


def _fault(kind: str, **value: object) -> str:
    import json

    op = {"process": "nemesis", "type": "ok", "f": "start", "value": {"kind": kind, **value}}
    return json.dumps(op, separators=(",", ":"))


def test_night_coverage_counts_the_applied_faults_of_its_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A night of plain runs: the cells of every run's applied faults, an
    `info` (not applied) fault hitting none; the summary prints the table."""
    from rich.console import Console

    from harness.coverage import Coverage
    from harness.nightly import coverage_table, night_coverage

    m = stub_matrix(tmp_path)
    runs = []
    for name, lines in {
        "a": [_fault("kill", target="group-leader"),
              _fault("partition", grouping="isolate", target="meta-leader",
                     trigger={"stage": "joint"})],
        "b": [_fault("kill", target="group-leader"), _fault("slow").replace('"ok"', '"info"')],
    }.items():  # fmt: skip
        (tmp_path / name).mkdir()
        (tmp_path / name / "history.jsonl").write_text("\n".join(lines) + "\n")
        runs.append(Outcome(m.cells()[0], PASSED, run_dir=tmp_path / name))
    runs.append(Outcome(m.cells()[0], ERROR))  # no run dir: nothing to count
    night = night_coverage(m, runs, Coverage())
    assert {c: n for c, n in night.hits.items() if n} == {
        ("kill", "timer", "group-leader"): 2, ("partition", "joint", "meta-leader"): 1,
    }  # fmt: skip
    Console(width=200).print(coverage_table(night))
    out = capsys.readouterr().out
    assert f"2 of {night.total} cells hit" in out
    rows = {line.split()[1]: line.split("│")[2:-1] for line in out.splitlines()
            if line.startswith("│")}  # fmt: skip
    # The timer column: a timed kill has five roles to land on (joining is not one).
    assert [c.strip() for c in rows["kill"]][-1] == "1/5"
    assert [c.strip() for c in rows["partition"]][1] == "1/7"  # joint
    # slow: the joining peer or, when the trigger names none, a random node
    assert [c.strip() for c in rows["slow"]] == ["0/2"] * 3 + ["0/1"] + ["0/2"] * 2 + ["0/1"]
    reach = [("kill", "timer", "group-leader"), ("kill", "joint", "group-leader")]
    Console(width=200).print(coverage_table(night, reach))
    caption = f"1 of the 2 cells the night's plans can reach hit (2 of {night.total} in all)"
    assert caption in capsys.readouterr().out
