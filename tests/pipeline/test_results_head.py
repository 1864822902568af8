"""The lake reads only a head of results.json (pipeline.extract._results_head),
and every run's rows are what reading the whole file gives.

A simulated run's results.json is half a megabyte, almost all of it the
linearizability checker's per-key figures, which no table holds; decoding
them into dicts was a few percent of a real run's ingest. A file whose shape
the head does not take (a checker's result that is not an object, say) is
read whole, so the rows and the skip reasons stay those of the whole file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from harness.synthetic import make_run
from pipeline import extract as extract_module
from pipeline.extract import SkipRunError, extract, read_meta


def _whole(data: bytes) -> dict[str, Any]:
    raise msgspec.ValidationError("read the whole file")  # `_decode`'s fallback


def _both(store: Path, run: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """extract()'s rows (or why it failed) with the head, then from the whole file."""
    out = []
    for head in (extract_module._results_head, _whole):
        monkeypatch.setattr(extract_module, "_results_head", head)
        try:
            out.append(extract(str(store), str(run), "ingest-1"))
        except SkipRunError as exc:
            out.append(f"skip: {exc}")
        except Exception as exc:  # what extract_rows records as "unexpected ..."
            out.append(f"{type(exc).__name__}: {exc}")
    monkeypatch.undo()
    return out[0], out[1]


@pytest.fixture
def run(tmp_path: Path) -> Path:
    made = make_run(tmp_path, seed=7, ops=300, valid=False)  # anomalies to place
    return made.path


def _edit_results(run: Path, edit: Any) -> None:
    path = run / "results.json"
    path.write_text(json.dumps(edit(json.loads(path.read_text())), indent=2))


def test_a_real_results_file_gives_the_same_rows_and_its_figures_are_not_read(
    run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def with_figures(results: dict[str, Any]) -> dict[str, Any]:
        for res in results["checkers"].values():
            res["figures"] = {"partition_results": [{"key": f"k{i}"} for i in range(500)]}
        return results

    _edit_results(run, with_figures)
    head, whole = _both(run.parent.parent, run, monkeypatch)
    assert head == whole
    assert head["anomalies"], "the run should carry anomalies to compare"
    kept = read_meta(str(run.parent.parent), str(run)).results
    assert kept["valid"] is False
    assert all(set(res) <= {"valid", "anomalies"} for res in kept["checkers"].values())


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda r: {**r, "checkers": {**r["checkers"], "x": None}}, id="null-checker"),
        pytest.param(lambda r: {**r, "checkers": [1, 2]}, id="checkers-a-list"),
        pytest.param(lambda r: {k: v for k, v in r.items() if k != "checkers"}, id="no-checkers"),
        pytest.param(lambda r: {"valid": True}, id="only-valid"),
        pytest.param(lambda r: [r], id="not-an-object"),
        pytest.param(lambda r: {**r, "elapsed_s": "soon", "reasons": None}, id="odd-types"),
    ],
)
def test_odd_shapes_give_what_the_whole_file_gives(
    run: Path, edit: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _edit_results(run, edit)
    head, whole = _both(run.parent.parent, run, monkeypatch)
    assert head == whole


def test_a_file_that_is_not_json_is_skipped_with_the_same_reason(
    run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (run / "results.json").write_text('{"valid": true, "checkers": {')
    head, whole = _both(run.parent.parent, run, monkeypatch)
    assert head == whole
    assert str(head).startswith("skip: results.json is not valid JSON")
