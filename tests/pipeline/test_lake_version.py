"""The lake's format marker: a lake of another format is read or refused by name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from pipeline import lakeversion
from pipeline.analyze import analyze
from pipeline.ingest import ingest
from pipeline.lakeversion import MARKER, LakeVersionError, check_lake, lake_format
from pipeline.schemas import TABLES
from tests.pipeline.conftest import Store


def _lake(tmp_path: Path, marker: Any = None, tables: bool = True) -> Path:
    lake = tmp_path / "lake"
    lake.mkdir()
    if tables:
        (lake / "runs").mkdir()
    if marker is not None:
        text = marker if isinstance(marker, str) else json.dumps(marker)
        (lake / MARKER).write_text(text)
    return lake


def test_a_new_lake_and_a_lake_from_before_markers(tmp_path: Path) -> None:
    assert lake_format(tmp_path / "nowhere") == (None, "")
    legacy = _lake(tmp_path)
    assert lake_format(legacy)[0] == 1
    assert check_lake(legacy, writing=False) == 1  # read (format 1 is still readable)
    with pytest.raises(LakeVersionError, match="format 1"):
        check_lake(legacy, writing=True)  # never appended to: format 2 has another layout


def test_a_newer_lake_is_refused_naming_its_format_and_writer(tmp_path: Path) -> None:
    lake = _lake(tmp_path, {"format": 9, "written_by": "7.0"})
    for writing in (True, False):
        with pytest.raises(LakeVersionError, match=r"format 9, written by faultline 7\.0.*up to 2"):
            check_lake(lake, writing=writing)


def test_an_older_readable_lake_is_read_but_never_appended_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lakeversion, "LAKE_FORMAT", 2)
    monkeypatch.setattr(lakeversion, "READABLE", frozenset({1, 2}))
    monkeypatch.setitem(lakeversion.LAYOUTS, 2, "a layout of the future")
    lake = _lake(tmp_path, {"format": 1, "written_by": "0.1"})
    assert check_lake(lake, writing=False) == 1
    with pytest.raises(LakeVersionError, match=r"format 1, written by faultline 0\.1.*new lake"):
        check_lake(lake, writing=True)
    monkeypatch.setattr(lakeversion, "READABLE", frozenset({2}))
    with pytest.raises(LakeVersionError, match="reads formats \\[2\\]"):
        check_lake(lake, writing=False)


@pytest.mark.parametrize("marker", ["{not json", json.dumps({"written_by": "1"}), "[1]"])
def test_a_marker_that_is_not_ours_is_refused(tmp_path: Path, marker: str) -> None:
    with pytest.raises(LakeVersionError, match="is not a faultline lake marker"):
        check_lake(_lake(tmp_path, marker), writing=False)


def test_ingest_marks_the_lake_and_refuses_a_newer_one(
    spark: Any, store: Store, tmp_path: Path
) -> None:
    """The marker is written with the lake; a newer lake is refused before any file is."""
    lake = tmp_path / "lake"
    ingest(spark, store.root, lake)
    assert json.loads((lake / MARKER).read_text())["format"] == lakeversion.LAKE_FORMAT
    (tmp_path / "x").mkdir()
    newer = _lake(tmp_path / "x", {"format": 99, "written_by": "9"})
    before = sorted(newer.rglob("*"))
    with pytest.raises(LakeVersionError):
        ingest(spark, store.root, newer)
    assert sorted(newer.rglob("*")) == before


def test_cli_refuses_a_newer_lake_in_one_line(tmp_path: Path) -> None:
    lake = _lake(tmp_path, {"format": 99, "written_by": "9.9"})
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "pipeline", "analyze",
                           "--lake", str(lake), "--master", "local[1]"],
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert proc.returncode == 2
    assert "format 99, written by faultline 9.9" in proc.stderr
    assert "Traceback" not in proc.stderr


def _as_format_1(lake: Path, old: Path) -> None:
    """`lake` laid out as format 1 did it: no test= level, `test` a data column of runs."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for path in lake.rglob("*.parquet"):
        parts = list(path.relative_to(lake).parts)
        if parts[0] not in TABLES:
            continue  # analysis output
        level = next(p for p in parts if p.startswith("test="))
        parts.remove(level)
        test = unquote(level.removeprefix("test="))
        data = pq.ParquetFile(path).read()  # the file alone: no columns from its path
        if parts[0] == "runs":
            data = data.add_column(2, "test", pa.array([test] * len(data), pa.string()))
        parts[-1] = f"{test}-{parts[-1]}"  # one directory now holds every test's files
        dest = old.joinpath(*parts)
        dest.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(data, dest)
    (old / MARKER).write_text(json.dumps({"format": 1, "written_by": "0.1"}))


def test_a_format_1_lake_is_analyzed_as_its_format_2_twin_and_not_appended_to(
    spark: Any, store: Store, tmp_path: Path
) -> None:
    """Format 2 moved `test` from a data column of runs to a partition level of every
    table: a format-1 lake still gives the same analysis, and ingest refuses it."""
    lake, old = tmp_path / "lake", tmp_path / "old"
    ingest(spark, store.root, lake)
    assert lake_format(lake)[0] == 2
    _as_format_1(lake, old)
    assert not any(old.rglob("test=*"))
    new_tables, old_tables = analyze(spark, lake), analyze(spark, old)
    assert set(new_tables) == set(old_tables)
    for name, table in new_tables.items():
        assert len(table), name  # every analysis has rows to compare
        ordered = [c for c in table.columns if c in old_tables[name].columns]
        assert ordered == list(table.columns), name

        def rows(df: Any, cols: list[str] = ordered) -> list[str]:
            return sorted(df[cols].astype(str).agg("|".join, axis=1))

        assert rows(old_tables[name]) == rows(table), name
    with pytest.raises(LakeVersionError, match=r"format 1, written by faultline 0\.1.*new lake"):
        ingest(spark, store.root, old)
