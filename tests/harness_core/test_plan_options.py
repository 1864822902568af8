"""A plan's options are known by name and checked by kind (harness/plan_options.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from harness.plan import Plan, PlanError, validate
from harness.plan_options import OPTIONS
from harness.version import VERSION_LABELS

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("harness", "checkers", "workloads", "nemesis", "reports", "pipeline")
# How the code looks an option up: plan.options.get("x"), opts["x"],
# ctx.setting("x"), with_options(plan, x=...).
_READS = (
    re.compile(r"\bopt(?:ion)?s\.get\(\s*[\"'](\w+)[\"']"),
    re.compile(r"\bopt(?:ion)?s\[\s*[\"'](\w+)[\"']\s*\]"),
    re.compile(r"\.setting\(\s*[\"'](\w+)[\"']"),
    re.compile(r"with_options\([^)]*?\b(\w+)="),
)


def _read_in_code() -> set[str]:
    names: set[str] = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            for pattern in _READS:
                names.update(pattern.findall(text))
    return names


def test_every_option_the_code_reads_is_known() -> None:
    read = _read_in_code()
    assert read, "the patterns found no reader: they no longer match the code"
    assert sorted(read - set(OPTIONS)) == []


def test_every_known_option_is_read_somewhere() -> None:
    """No entry outlives its reader (labels are written, never read as settings)."""
    unread = set(OPTIONS) - _read_in_code() - VERSION_LABELS - {"synthetic"}
    assert sorted(unread) == []


def _plan(**options: Any) -> Plan:
    return Plan(backend="sim", workload=("register",), nemesis=(), options=options)


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"rebalance_intervals": 4.0}, "unknown plan option 'rebalance_intervals' "
                                       "(did you mean rebalance_interval_s?)"),
        ({"keys": "forty"}, "plan option keys: expected a whole number, got 'forty'"),
        ({"keys": 0}, "plan option keys: expected at least 1, got 0"),
        ({"meta_rate_hz": -1}, "plan option meta_rate_hz: expected a number above 0, got -1"),
        ({"change_learners": "yes"}, "plan option change_learners: expected true or false"),
        ({"nemesis_kinds": "kill"}, "plan option nemesis_kinds: expected a list of names"),
        ({"nemesis_keep": [1, "2"]}, "plan option nemesis_keep: expected a list of fault numbers"),
        ({"expect": "linearizable"}, "plan option expect: expected {'checker'"),
    ],
)  # fmt: skip
def test_a_bad_option_is_refused_by_name(options: dict[str, Any], words: str) -> None:
    with pytest.raises(PlanError) as err:
        validate(_plan(**options))
    assert str(err.value).startswith(words), str(err.value)


def test_good_options_and_labels_pass() -> None:
    plan = _plan(keys=8, meta_rate_hz=2, change_learners=True, nemesis_keep=[1, 3],
                 meta_traffic="all", nemesis_gap_s=None, ember_version="1.0", git_rev="abc",
                 expect={"checker": "linearizable", "rule": "stale-read"})  # fmt: skip
    assert validate(plan) is plan


def test_a_plan_file_with_a_misspelt_option_is_refused_with_its_path(tmp_path: Path) -> None:
    import msgspec

    doc = msgspec.to_builtins(_plan())
    doc["options"] = {"kyes": 8}
    path = tmp_path / "test.json"
    path.write_bytes(msgspec.json.encode(doc))
    from harness.plan import load

    with pytest.raises(PlanError, match=r"unknown plan option 'kyes' \(did you mean keys\?\)"):
        load(path)
