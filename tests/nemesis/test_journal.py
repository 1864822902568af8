"""The fault journal: written before a fault runs, healed faults marked, read back after a kill."""

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from harness.control import CommandError, CommandResult
from nemesis import journal
from nemesis.fault import apply


class DiskReadingRunner:
    """Runs nothing; remembers what the journal held when each script arrived."""

    def __init__(self, path: Path, fail_on: str | None = None) -> None:
        self.path = path
        self.fail_on = fail_on
        self.seen: list[tuple[str, list[dict[str, object]]]] = []

    def run_many(
        self, commands: Mapping[str, str], *, timeout_s: float = 60.0, check: bool = True
    ) -> dict[str, CommandResult]:
        out = {}
        for node, cmd in commands.items():
            self.seen.append((cmd, journal.read(self.path)))
            if self.fail_on and self.fail_on in cmd:
                raise CommandError(f"command on {node} exited 1: {cmd}")
            out[node] = CommandResult(node, cmd, 0, "", "")
        return out


def test_a_fault_is_on_disk_with_its_heal_before_its_commands_run(tmp_path: Path) -> None:
    """The runner sees the fault record (and its exact heal) already in faults.jsonl."""
    path = tmp_path / journal.FILE_NAME
    runner = DiskReadingRunner(path)
    j = journal.Journal(path)
    with journal.recording(j):
        fault = apply(runner, "partition", {"n1": ["iptables -A X"]}, {"n1": ["iptables -F X"]})
    cmd, on_disk = runner.seen[0]
    assert "iptables -A X" in cmd
    assert [r["type"] for r in on_disk] == ["fault"]
    assert on_disk[0]["heal"] == {"n1": ["iptables -F X"]}
    assert journal.unhealed(journal.read(path))[0]["kind"] == "partition"
    with journal.recording(j):
        fault.heal(runner)
    assert journal.unhealed(journal.read(path)) == []


def test_a_half_applied_fault_is_healed_and_journaled_healed(tmp_path: Path) -> None:
    """A fault whose commands fail runs its heal, and the journal says so."""
    path = tmp_path / journal.FILE_NAME
    runner = DiskReadingRunner(path, fail_on="boom")
    with journal.recording(journal.Journal(path)), pytest.raises(CommandError):
        apply(runner, "pause", {"n2": ["boom"]}, {"n2": ["kill -CONT 7"]})
    records = journal.read(path)
    assert [r["type"] for r in records] == ["fault", "heal"]
    assert journal.unhealed(records) == []


def test_nothing_to_heal_is_not_journaled_and_no_journal_is_a_noop(tmp_path: Path) -> None:
    """A start (no heal) writes nothing; outside a run the primitives write nothing."""
    path = tmp_path / journal.FILE_NAME
    runner = DiskReadingRunner(path)
    with journal.recording(journal.Journal(path)):
        apply(runner, "start", {"n1": ["start it"]}, {})
    assert journal.read(path) == []
    apply(runner, "kill", {"n1": ["kill -9 1"]}, {"n1": ["start it"]})
    assert journal.read(path) == []


def test_a_line_cut_by_a_kill_is_skipped_and_appending_after_it_works(tmp_path: Path) -> None:
    """Reading tolerates a torn last line; a later writer (clean) starts a fresh line."""
    path = tmp_path / journal.FILE_NAME
    journal.Journal(path).fault("kill", {"n1": ["start"]})
    with path.open("ab") as f:
        f.write(b'{"type": "fault", "id": 2, "ki')
    records = journal.read(path)
    assert len(records) == 1
    assert not journal.has_ended(records)
    journal.Journal(path).close(ended=True)
    assert journal.has_ended(journal.read(path))


def test_the_running_marker_lives_until_the_run_ends(tmp_path: Path) -> None:
    """A journal opened by a run leaves a marker in the store's .running/ until `end`."""
    running = tmp_path / journal.RUNNING_DIR
    j = journal.Journal(tmp_path / journal.FILE_NAME, running_dir=running)
    assert len(list(running.iterdir())) == 1
    j.close(ended=True)
    assert list(running.iterdir()) == []


def test_owner_state_tells_a_live_pid_from_a_dead_one() -> None:
    """This process is alive; a reaped child is dead; another host is not ours to judge."""
    me = journal.owner()
    assert journal.owner_state(me["host"], me["pid"], me["started"]) == "alive"
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert journal.owner_state(me["host"], child.pid) == "dead"
    assert journal.owner_state(me["host"], os.getpid(), "1") == "dead"  # a reused pid
    assert journal.owner_state("elsewhere.example", me["pid"]) == "elsewhere"
