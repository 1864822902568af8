"""Our verdict equals porcupine's expected verdict on every fixture check."""

from __future__ import annotations

import pytest

from checkers.importers.porcupine import load
from checkers.linearizability import check
from tests.paths import PORCUPINE_FIXTURES

FIXTURES = PORCUPINE_FIXTURES


def _rows() -> list[tuple[str, str, str]]:
    if not (FIXTURES / "expected_verdicts.tsv").exists():
        return []
    rows = []
    for line in (FIXTURES / "expected_verdicts.tsv").read_text().splitlines():
        if line.startswith("#"):
            continue
        path, model, expected, _ = line.split("\t")
        rows.append((path, model, expected))
    return rows


ROWS = _rows()
CHECKS = [r for r in ROWS if r[2] in ("linearizable", "not-linearizable")]


def test_fixture_table_has_all_112_checks() -> None:
    """The verdict table lists 112 checks plus the empty etcd_095."""
    assert len(CHECKS) == 112
    assert len(ROWS) == 113


@pytest.mark.parametrize(
    ("path", "model", "expected"), CHECKS, ids=[f"{p}:{m}" for p, m, _ in CHECKS]
)
def test_verdict_matches_porcupine(path: str, model: str, expected: str) -> None:
    """Each fixture file gets the verdict porcupine's tests expect."""
    _, ops = load(FIXTURES / path)
    result = check(ops, model, time_limit_s=120, workers=1)
    assert result.valid is (expected == "linearizable"), result.failure


def test_empty_etcd_log_is_no_history() -> None:
    """etcd_095 is empty: no operations, trivially linearizable."""
    model, ops = load(FIXTURES / "jepsen/etcd_095.log")
    assert (model, ops) == ("etcd", [])
    assert check(ops, model).valid is True


def test_c50_bad_is_decided_with_the_whole_failure_report() -> None:
    """kv/c50-bad fails fast and reports a key, a prefix and the unplaceable op."""
    _, ops = load(FIXTURES / "kv/c50-bad.txt")
    result = check(ops, "kv", time_limit_s=60, workers=1)
    assert result.valid is False
    failure = result.failure
    assert failure is not None
    assert failure.key in {str(k) for k in range(10)}
    assert failure.linearized_prefix
    assert failure.unplaceable
    assert failure.unplaceable[0].op.key == failure.key
    assert failure.unplaceable[0].states_before
