"""The lake builds only the audit events it reads (pipeline.extract.LAKE_KINDS),
and what it derives from them is what it derives from all of them.

A simulated run of the default plan writes about six audit events for every
ten history events and the lake reads a sixth of them; building the rest was
half of a real run's ingest. `checkers.audit.read_events(kinds=...)` keeps the
kinds asked for plus what placing them on the harness's clock needs, and
still refuses a malformed line it would not keep.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from checkers.audit import load_audit, read_events
from checkers.history import HistoryError
from harness.synthetic import make_run
from pipeline import extract as extract_module
from pipeline.extract import LAKE_KINDS, extract

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two synthetic runs (one with its nodes' clocks set back by a slow setup
    and a restart) and one simulated run of ember's real code."""
    root = tmp_path_factory.mktemp("store")
    make_run(root, seed=4, ops=400)
    make_run(root, seed=5, ops=400, valid=False)
    subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", "--backend", "sim", "--time-limit", "8",
         "--seed", "3", "--store", str(root), "--name", "sim-real", "--no-progress"],
        cwd=REPO, check=False, capture_output=True, timeout=300,
    )  # fmt: skip
    return root


def _runs(store: Path) -> list[Path]:
    runs = sorted(p.parent for p in store.glob("*/*/history.jsonl"))
    assert any(r.parent.name == "sim-real" for r in runs), "the simulated run was not written"
    return runs


def test_the_lake_derives_the_same_rows_from_its_kinds_as_from_every_event(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for run in _runs(store):
        few = extract(str(store), str(run), "ingest-1")
        monkeypatch.setattr(extract_module, "LAKE_KINDS", None)
        every = extract(str(store), str(run), "ingest-1")
        monkeypatch.undo()
        assert few == every, run
        if run.parent.name == "sim-real":  # the run has something to compare
            assert few["changes"]
            assert few["rebalances"]


def test_only_the_kinds_asked_for_are_built_with_what_placing_them_needs(store: Path) -> None:
    run = next(r for r in _runs(store) if r.parent.name == "sim-real")
    every, few = load_audit(run), load_audit(run, LAKE_KINDS)
    assert every is not None
    assert few is not None
    assert every.keys() == few.keys()
    for node, events in every.items():
        kept = [ev for i, ev in enumerate(events)
                if ev["kind"] in LAKE_KINDS or "mono_origin_ns" in ev or i == 0]  # fmt: skip
        assert few[node] == kept  # placed alike: same walls, node_walls and boot ids
        assert len(few[node]) < len(events)


def _log(tmp_path: Path, lines: list[bytes]) -> Path:
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def test_a_process_start_is_kept_and_blank_lines_are_skipped(tmp_path: Path) -> None:
    enc = msgspec.json.encode
    path = _log(tmp_path, [
        enc({"kind": "leader", "mono_ns": 1}), enc({"kind": "started", "mono_origin_ns": 5}),
        b"", enc({"kind": "term"}), enc({"kind": "change-done", "node": "n9"}),
    ])  # fmt: skip
    got = read_events(path, "n1", LAKE_KINDS)
    assert [(ev["kind"], ev["node"]) for ev in got] == [
        ("leader", "n1"), ("started", "n1"), ("change-done", "n9")]  # fmt: skip
    assert read_events(path, "n1") == [{**msgspec.json.decode(line), "node": "n1"} for line in (
        enc({"kind": "leader", "mono_ns": 1}), enc({"kind": "started", "mono_origin_ns": 5}),
        enc({"kind": "term"}))] + [{"kind": "change-done", "node": "n9"}]  # fmt: skip


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (b'{"kind": "term"', "line 2: "),  # torn: not JSON
        (b'["term"]', "line 2: "),  # not an object
        (b'{"kind": 7}', "line 2: event has no string 'kind'"),
        (b'{"kind": "term"},{"kind": "term"}', "line 2: "),  # two events on one line
    ],
)
def test_a_malformed_line_the_lake_would_not_keep_is_still_refused(
    tmp_path: Path, bad: bytes, message: str
) -> None:
    path = _log(tmp_path, [b'{"kind": "leader"}', bad, b'{"kind": "change-done"}'])
    for kinds in (LAKE_KINDS, None):
        with pytest.raises(HistoryError, match=message):
            read_events(path, "n1", kinds)
