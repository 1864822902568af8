"""The columns ingest engine: whole-file decoding, and none of the Spark
engine's known differences from the rows engine (pipeline/columnsingest.py).

test_engines.py compares its lakes with the rows engine's on the shared
stores; here are the histories Spark's reader takes differently (a number
where the format wants a string, a process id that is a string of digits, a
JSON string holding JSON text), which this engine must treat exactly as the
rows engine does, and the decoder's hand-offs one by one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from harness.synthetic import make_run
from pipeline.columnsingest import history_table
from pipeline.ingest import ingest
from pipeline.schemas import TABLES
from tests.pipeline.test_engines import _rewrite, _rows

LINES = [
    {"index": 0, "time": 10, "process": 0, "type": "invoke", "f": "put", "key": "k", "value": 1},
    {"index": 1, "time": 20, "process": 0, "type": "ok", "f": "put", "key": "k", "value": 1},
    {"index": 2, "time": 30, "process": "nemesis", "type": "invoke", "f": "kill",
     "value": ["n1"]},
    {"index": 3, "time": 40, "process": 1, "type": "invoke", "f": "get", "key": "k",
     "value": None},
    {"index": 4, "time": 50, "process": 1, "type": "ok", "f": "get", "key": "k",
     "value": "a \"quoted\" text"},
]  # fmt: skip


def _jsonl(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(msgspec.json.encode(ln) + b"\n" for ln in lines)


def test_a_history_becomes_its_columns() -> None:
    table = history_table(_jsonl(LINES))
    assert table is not None
    assert table.column("index").to_pylist() == [0, 1, 2, 3, 4]
    assert table.column("process").to_pylist() == ["0", "0", "nemesis", "1", "1"]
    # value is the JSON text as written; null and absent are null
    assert table.column("value").to_pylist() == ["1", "1", '["n1"]', None, '"a \\"quoted\\" text"']
    assert table.column("key").to_pylist() == ["k", "k", None, "k", "k"]
    assert table.column("revision").null_count == 5
    assert table.column("_corrupt_record").null_count == 5


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"", "empty"),
        (b"\n\n", "only blank lines"),
        (_jsonl(LINES)[:-7], "torn last line"),
        (_jsonl(LINES[:2]) + b"\n" + _jsonl(LINES[2:]), "a blank line inside"),
        (_jsonl([{**LINES[0], "f": 7}]), "a number where f is a string"),
        (_jsonl([{**LINES[0], "process": "3"}]), "a process id of digits as a string"),
        (_jsonl([{**LINES[0], "time": 2**64}]), "an integer beyond 64 bits"),
        (_jsonl([{**LINES[0], "index": 2**63}]), "an integer beyond int64"),
        (_jsonl([{k: v for k, v in LINES[0].items() if k != "time"}]), "no time"),
    ],
)
def test_what_the_decoder_hands_to_the_rows_engine(data: bytes, why: str) -> None:
    assert history_table(data) is None, why


def _spark_differences(root: Path) -> None:
    """Runs Spark's reader takes otherwise than the rows engine (pipeline/README.md)."""

    def run(seed: int) -> Path:
        return make_run(root, seed=seed, ops=60, name="odd", started=1_763_700_000 + seed).path

    _rewrite(run(1), lambda n, ev: {**ev, "f": 7} if n == 12 else ev)
    _rewrite(run(2), lambda n, ev: {**ev, "process": str(ev["process"])}
             if isinstance(ev["process"], int) else ev)  # fmt: skip
    _rewrite(run(3), lambda n, ev: {**ev, "value": json.dumps([1, 2])}
             if ev["type"] == "ok" and ev.get("value") is not None else ev)  # fmt: skip


def test_the_spark_engines_known_differences_are_not_the_columns_engines(
    spark: Any, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    _spark_differences(store)
    by_rows = ingest(spark, store, tmp_path / "rows", engine="rows")
    by_columns = ingest(spark, store, tmp_path / "columns", engine="columns")
    assert sorted(by_columns.skipped) == sorted(by_rows.skipped)
    assert by_rows.skipped, "the number where a string belongs is refused"
    assert by_columns.rows == by_rows.rows
    assert by_columns.by_rows == 2  # the number and the digits; the JSON text it reads itself
    for table in TABLES:
        assert _rows(spark, tmp_path / "columns", table) == _rows(spark, tmp_path / "rows", table)
