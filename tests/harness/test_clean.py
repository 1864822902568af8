"""`faultline clean` on run dirs, without Docker: refusals, idempotence, unreachable hosts."""

import subprocess
import sys
from pathlib import Path

import pytest

from harness.backends.base import NodeHandle, SshTarget
from harness.clean import leftovers
from harness.cli import main
from nemesis import journal


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _run_dir(tmp_path: Path, *, pid: int | None, faults: int = 1, ended: bool = False) -> Path:
    """A run dir in tmp_path/store as a run on SSH host 127.0.0.1:1 (nothing listens) left it."""
    run = tmp_path / "store" / "t" / "20260101T000000-1"
    run.mkdir(parents=True)
    j = journal.Journal(run / journal.FILE_NAME, running_dir=tmp_path / "store" / ".running")
    node = NodeHandle(name="n1", ip="127.0.0.1", ssh=SshTarget(host="127.0.0.1", port=1))
    j.start("ssh", None, [node])
    for i in range(faults):
        j.fault("partition", {"n1": [f"iptables -F FAULTLINE # {i}"]})
    if pid is not None:  # rewrite the owner as another (dead) process
        text = (run / journal.FILE_NAME).read_text()
        me = journal.owner()
        (run / journal.FILE_NAME).write_text(text.replace(f'"pid":{me["pid"]}', f'"pid":{pid}', 1))
    j.close(ended=ended)
    return run


def test_a_run_whose_owner_lives_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """This very process owns the journal: clean says the run is still going, exit 2."""
    run = _run_dir(tmp_path, pid=None)
    assert main(["clean", str(run)]) == 2
    err = capsys.readouterr().err
    assert "its run is still going" in err
    assert len(err.strip().splitlines()) == 1


def test_an_ended_journal_is_nothing_to_do_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run that healed itself: clean reports nothing to do, and again the second time."""
    run = _run_dir(tmp_path, pid=_dead_pid(), ended=True)
    for _ in range(2):
        assert main(["clean", str(run)]) == 0
        assert "nothing to do" in capsys.readouterr().out


def test_unreachable_hosts_leave_the_faults_on_the_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dead owner's faults on a host that does not answer: one error line naming the
    fault and node, exit 2, and the journal still lists the fault for the next try."""
    run = _run_dir(tmp_path, pid=_dead_pid(), faults=2)
    assert main(["clean", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "fault 2 (partition) not healed on n1" in err[0]
    assert "fault 1 (partition) not healed on n1" in err[0]
    records = journal.read(run / journal.FILE_NAME)
    assert len(journal.unhealed(records)) == 2
    assert not journal.has_ended(records)


def test_a_run_start_names_an_ssh_run_a_killed_owner_left(tmp_path: Path) -> None:
    """`faultline run` warns with the command that heals it; with no fault left
    (a kill before the first fault) it just closes the journal."""
    left = _run_dir(tmp_path, pid=_dead_pid(), faults=1)
    said: list[str] = []
    leftovers(tmp_path / "store", "ssh", said.append)
    assert said == [f"warning: a killed run may have left 1 faults on n1: faultline clean {left}"]
    (left / journal.FILE_NAME).write_text(
        "".join(
            ln + "\n"
            for ln in (left / journal.FILE_NAME).read_text().splitlines()
            if '"fault"' not in ln
        )
    )
    said.clear()
    leftovers(tmp_path / "store", "ssh", said.append)
    assert said == []
    assert journal.has_ended(journal.read(left / journal.FILE_NAME))
    assert list((tmp_path / "store" / ".running").iterdir()) == []


def test_clean_needs_to_be_told_what(capsys: pytest.CaptureFixture[str]) -> None:
    """No RUN_DIR, --cluster or --all-dead: a usage error, exit 2."""
    with pytest.raises(SystemExit) as exc:
        main(["clean"])
    assert exc.value.code == 2
    assert (
        "one of the arguments RUN_DIR --cluster --all-dead is required" in capsys.readouterr().err
    )
