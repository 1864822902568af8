"""Small state files: replaced whole, and a torn one does not stop a node."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ember.placement.plane import _read_mark
from ember.smallfile import replace_text


def test_replace_leaves_the_new_text_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "assignments.reported"
    replace_text(path, "41")
    replace_text(path, "42", durable=True)
    assert path.read_text() == "42"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["assignments.reported"]


def test_a_write_that_dies_before_the_rename_leaves_the_old_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a kill between write and rename leaves: the old record, whole."""
    path = tmp_path / "assignments.reported"
    replace_text(path, "41")

    def killed(*_args: object) -> None:
        raise KeyboardInterrupt  # stands in for the process dying here

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        replace_text(path, "42")
    assert path.read_text() == "41"


@pytest.mark.parametrize(("text", "expected"), [("", 0), ("garbage", 0), ("17", 17)])
def test_the_reported_mark_of_an_older_torn_write_is_ignored(
    tmp_path: Path, text: str, expected: int
) -> None:
    """The soak's seed 101: an empty mark file kept two nodes from starting."""
    path = tmp_path / "assignments.reported"
    path.write_text(text)
    assert _read_mark(path) == expected
    assert _read_mark(tmp_path / "absent") == 0
