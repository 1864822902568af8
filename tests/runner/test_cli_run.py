"""`faultline run` / `faultline replay` at the command line (no Docker needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main


def _faultline(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "import sys; from harness.cli import main; sys.exit(main())", *args],
        capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=300,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--nemesis", "bogus"], "--nemesis: unknown 'bogus'"),
        (["--workload", "change-peers"], "must include exactly one of register"),
        (["--rate", "0"], "--rate must be positive"),
        (["--time-limit", "soon"], "--time-limit must be a number"),
        (["--backend", "ssh"], "--backend ssh needs --hosts"),
        (["--db", "mysql"], "invalid choice"),
        (["--failpoint", "x={"], "not JSON"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(
    flags: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad flag value names itself on one stderr line; no traceback."""
    try:
        code = main(["run", *flags])
    except SystemExit as exc:  # argparse's own type errors exit from the parser
        code = int(exc.code or 0)
    assert code == 2
    err = capsys.readouterr().err
    assert needle in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) <= 2  # argparse adds its usage line


def test_an_unreachable_ssh_host_is_one_precise_error(tmp_path: Path) -> None:
    """A host refusing SSH: exit 2, stderr names the node and address."""
    hosts = tmp_path / "hosts"
    hosts.write_text("a root@127.0.0.1:1\nb root@127.0.0.1:1\nc root@127.0.0.1:1\n")
    out = _faultline("run", "--backend", "ssh", "--hosts", str(hosts), "--no-progress",
                     "--store", str(tmp_path / "store"), "--seed", "3")  # fmt: skip
    assert out.returncode == 2
    assert "error: the run could not start: cannot reach node a at 127.0.0.1:1" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert "Traceback" not in out.stderr + out.stdout
    # No run dir that the store, the index or the lake could count as a run.
    assert not any(p.name in ("test.json", "results.json", "history.jsonl")
                   for p in (tmp_path / "store").rglob("*"))  # fmt: skip
    assert out.stdout.strip() == "seed 3"


def test_no_docker_engine_is_one_precise_error(tmp_path: Path) -> None:
    """Without a Docker engine the run says so in one line and exits 2."""
    out = _faultline("run", "--no-progress", "--store", str(tmp_path), "--seed", "4",
                     env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "faultline run: error: the run could not start: cannot reach the Docker engine at "
        "unix:///nonexistent/docker.sock: [Errno 2] No such file or directory"
    ]
    assert list(tmp_path.rglob("*.json*")) == []  # no phantom run dir, no replay line
    assert out.stdout.strip() == "seed 4"


def _replay_line_dir(stdout: str) -> Path:
    line = next(x for x in stdout.splitlines() if x.startswith("replay: faultline replay "))
    return Path(line.split()[-1])


def test_a_sim_run_prints_seed_first_and_report_last_and_replays_exactly(tmp_path: Path) -> None:
    """--backend sim writes a store run and its report; replaying gives the same plan and trace."""
    store = tmp_path / "store"
    out = _faultline("run", "--backend", "sim", "--time-limit", "3", "--seed", "99",
                     "--no-progress", "--store", str(store))  # fmt: skip
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "seed 99"
    assert lines[-2].startswith("replay: faultline replay ")
    run_dir = _replay_line_dir(out.stdout)
    assert lines[-1] == f"report: {run_dir / 'report.html'}"
    assert "<html" in (run_dir / "report.html").read_text()[:2000].lower()
    assert run_dir.name in (store / "index.html").read_text()
    options = json.loads((run_dir / "test.json").read_text())["options"]
    assert options["ember_version"]
    assert options["git_rev"]
    results = json.loads((run_dir / "results.json").read_text())
    assert out.returncode == {True: 0, False: 1}.get(results["valid"], 2)
    assert (run_dir / "nodes" / "n1" / "events.jsonl").stat().st_size > 0
    again = _faultline("replay", str(run_dir), "--no-progress")
    second = _replay_line_dir(again.stdout)
    assert second != run_dir
    assert (second / "test.json").read_text() == (run_dir / "test.json").read_text()
    assert f"replay: byte-identical to {run_dir}" in again.stdout
    assert (second / "history.jsonl").read_bytes() == (run_dir / "history.jsonl").read_bytes()


def test_replay_of_a_missing_run_is_one_error(tmp_path: Path) -> None:
    """Replaying something that is not a run dir exits 2 naming it."""
    out = _faultline("replay", str(tmp_path / "nope"))
    assert out.returncode == 2
    assert "is not a run directory" in out.stderr
