"""Composing checkers: verdict merging, failures as unknown, selection."""

from __future__ import annotations

from typing import Any

import pytest

from checkers.api import (
    MAX_ANOMALIES_PER_KIND,
    UNKNOWN,
    Anomaly,
    CheckContext,
    CheckerResult,
    NoopChecker,
    merge_validity,
    verdict,
)
from checkers.compose import check, select
from checkers.history import Event, Operation
from checkers.linear import model_for
from tests.checkers.helpers import HistoryBuilder


class _Fixed:
    def __init__(self, name: str, valid: Any) -> None:
        self.name = name
        self.valid = valid

    def check(self, ctx: CheckContext) -> CheckerResult:
        return CheckerResult(name=self.name, valid=self.valid)


class _Broken:
    name = "broken"

    def check(self, ctx: CheckContext) -> CheckerResult:
        raise RuntimeError("boom")


def _history() -> list[Event]:
    return [Event(**e) for e in HistoryBuilder().op(0, "read", key="k", result=None).events]


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([], True),
        ([True, True], True),
        ([True, UNKNOWN], UNKNOWN),
        ([UNKNOWN, False, True], False),
        ([False, UNKNOWN], False),
    ],
)
def test_verdicts_merge_false_over_unknown_over_true(values: list[Any], expected: Any) -> None:
    """One invalid checker makes the run invalid; else one undecided makes it unknown."""
    assert merge_validity(values) == expected


def test_checker_exception_becomes_unknown_with_the_error() -> None:
    """A raising checker yields unknown naming the error; the others still run."""
    result = check(
        {"name": "t", "seed": 7},
        _history(),
        checkers={"broken": _Broken(), "noop": NoopChecker(), "ok": _Fixed("ok", True)},
    )
    assert result.valid == UNKNOWN
    assert result.checkers["broken"].error == "RuntimeError: boom"
    assert result.checkers["noop"].valid is True
    assert result.reasons == ["broken: RuntimeError: boom"]
    assert (result.test, result.seed, result.ops) == ("t", 7, 1)


def test_invalid_checker_wins_over_a_broken_one() -> None:
    """An exception never hides a proven anomaly."""
    result = check(None, _history(), checkers={"b": _Broken(), "f": _Fixed("f", False)})
    assert result.valid is False


def test_selection_skips_audit_checkers_without_audit_events() -> None:
    """A bare history gets only the history checkers; a run dir gets all."""
    assert "raft" not in select(None, {}, has_audit=False)
    assert "raft" in select(None, {}, has_audit=True)
    assert select(None, {"checkers": ["raft"]}, has_audit=False) == ["raft"]


def test_selecting_an_unknown_checker_names_it() -> None:
    """A checker name that is not registered is a clear error."""
    with pytest.raises(ValueError, match="unknown checker 'nope'"):
        select(["nope"], {}, has_audit=True)


def test_verdict_keeps_a_bounded_sample_of_each_kind() -> None:
    """Thousands of anomalies of one kind keep 50 in results and count them all."""
    many = [Anomaly(kind="stale", message=str(i)) for i in range(1000)]
    result = verdict("x", [*many, Anomaly(kind="other", message="-")])
    assert result.valid is False
    assert len(result.anomalies) == MAX_ANOMALIES_PER_KIND + 1
    assert result.figures["anomaly_counts"] == {"stale": 1000, "other": 1}


def test_settings_come_from_options_then_plan_then_plan_options() -> None:
    """A caller's option wins over the plan's field, which wins over the plan's extras."""
    ctx = CheckContext(plan={"quiet_s": 10, "options": {"quiet_s": 3, "min_ok_ops": 2}})
    assert ctx.setting("quiet_s") == 10
    assert ctx.setting("min_ok_ops") == 2
    assert ctx.setting("absent", 7) == 7
    ctx = CheckContext(plan={"quiet_s": 10}, options={"quiet_s": 1})
    assert ctx.setting("quiet_s") == 1


def _ops(*fs: str) -> list[Operation]:
    return [
        Operation(process=0, f=f, type="ok", invoke_index=i, invoke_time=i, complete_index=i,
                  complete_time=i)
        for i, f in enumerate(fs)
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("plan", "options", "fs", "model"),
    [
        ({}, {}, (), "kv"),
        ({"workload": ["register"]}, {}, ("get", "put", "cas"), "kv"),
        ({}, {}, ("read", "write", "cas"), "cas-register"),
        ({}, {}, ("get", "invoke"), "metastore"),
        ({"workload": {"model": "etcd"}}, {}, ("get",), "etcd"),
        ({}, {"model": "register"}, ("get",), "register"),
        ({"options": {"model": "kv-nopart"}}, {}, ("get",), "kv-nopart"),
    ],
)
def test_model_is_named_or_inferred_from_the_ops(
    plan: Any, options: Any, fs: tuple[str, ...], model: str
) -> None:
    """--model or the plan names the model; else the ops' fs pick the one that reads them."""
    assert model_for(CheckContext(plan=plan, options=options), _ops(*fs)) == model
