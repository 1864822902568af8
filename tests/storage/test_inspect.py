"""`python -m ember.storage`: read-only inspection with clear errors and exit codes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ember.raft.messages import Entry, HardState
from ember.storage import NodeStorage
from ember.storage.__main__ import main


def make_store(path: Path) -> Path:
    with NodeStorage(path) as store:
        for i in range(1, 4):
            store.group("g1").save([Entry(term=2, index=i, data=b"v")], HardState(term=2, commit=i))
            store.group("g2").save([Entry(term=1, index=i)])
            store.commit()
    (segment,) = path.glob("wal-*.log")
    return segment


def test_healthy_store_is_summarised(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each group's term, commit and indexes appear; exit code 0."""
    make_store(tmp_path)
    assert main([str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["groups"]["g1"]["last_index"] == 3
    assert report["groups"]["g1"]["commit"] == 3
    assert report["groups"]["g2"]["term"] == 0
    assert main([str(tmp_path), "--group", "g1"]) == 0
    assert "       3 term=2 kind=normal bytes=1" in capsys.readouterr().out


def test_torn_tail_is_reported_but_not_repaired(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A torn tail is a warning, exit 0, and the file is left as it was."""
    segment = make_store(tmp_path)
    os.truncate(segment, segment.stat().st_size - 3)
    size = segment.stat().st_size
    assert main([str(tmp_path)]) == 0
    assert "torn tail at byte offset" in capsys.readouterr().err
    assert segment.stat().st_size == size


def test_corrupt_store_exits_1_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Mid-file damage prints one error line naming file and offset, exit code 1."""
    segment = make_store(tmp_path)
    data = bytearray(segment.read_bytes())
    data[40] ^= 0xFF
    segment.write_bytes(bytes(data))
    assert main([str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"error: {segment}: corrupt record at byte offset ")


@pytest.mark.parametrize("case", ["missing", "empty", "unknown-group"])
def test_bad_input_exits_2_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    """A missing directory, a non-store, or an unknown group is one error line, exit 2."""
    argv = {
        "missing": [str(tmp_path / "nope")],
        "empty": [str(tmp_path)],
        "unknown-group": [str(tmp_path / "store"), "--group", "g9"],
    }[case]
    if case == "unknown-group":
        make_store(tmp_path / "store")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert err.count("\n") == 1
