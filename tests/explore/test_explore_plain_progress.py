"""`faultline explore` off a terminal (a nightly's log, nohup) prints a plain
tally line as it goes, not nothing until its summary; `--no-progress`
prints none."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness import commands_explore
from harness.cli import main

pytestmark = pytest.mark.slow

TALLY = re.compile(r"^explore: \d+ s, (\d+) runs \([\d.]+/s, [\d.]+ simulated s/s\): "
                   r"\d+ valid, \d+ invalid, \d+ unknown; coverage \d+/\d+ reachable cells$",
                   re.M)  # fmt: skip


def _explore(tmp_path: Path, *extra: str) -> int:
    return main(["explore", "--budget", "2 runs", "--workers", "1", "--seed", "3",
                 "--time-limit", "5", "--store", str(tmp_path / "store"), *extra])  # fmt: skip


def test_plain_lines_off_a_terminal(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setattr(commands_explore, "PLAIN_EVERY_S", 0.0)
    assert _explore(tmp_path) == 0
    out = capsys.readouterr().out
    lines = TALLY.findall(out)
    assert lines, out  # one at least, with the runs counted so far
    assert [int(n) for n in lines] == sorted(int(n) for n in lines)
    assert out.index("explore: 2 runs in") > TALLY.search(out).start()  # type: ignore[union-attr]


def test_no_progress_prints_no_tally(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setattr(commands_explore, "PLAIN_EVERY_S", 0.0)
    assert _explore(tmp_path, "--no-progress") == 0
    assert not TALLY.search(capsys.readouterr().out)
