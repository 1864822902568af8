"""The options a plan may carry (`Plan.options`), each with what its value must be.

Options come from `faultline run` flags, which check their own values, and
from plan files (`faultline run --plan FILE`), which nothing checked: a
misspelt option was silently ignored (the run used the default and said
nothing) and a wrong type raised deep inside a run, as a traceback. Every
option a reader in the code looks up is listed here (tests/harness_core/
test_plan_options.py holds the code to that), so `plan.validate` refuses an
unknown name, saying which known one it resembles, and a value of the wrong
kind, naming the option. Names that only some part of the system knows in
full (nemesis kinds, phases, targets, groupings; metastore traffic kinds;
failpoints) are checked by that part (`nemesis.generator`,
`workloads.meta_traffic`, `harness.honoured`); here only their shape.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

from harness.version import VERSION_LABELS

# A check returns why a value will not do, or None.
Check = Callable[[Any], str | None]


def _number(low: float, *, strict: bool) -> Check:
    def check(value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"expected a number, got {value!r}"
        if value < low or (strict and value == low):
            return f"expected a number {'above' if strict else 'at least'} {low:g}, got {value!r}"
        return None

    return check


def _integer(low: int) -> Check:
    def check(value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int):
            return f"expected a whole number, got {value!r}"
        return None if value >= low else f"expected at least {low}, got {value}"

    return check


def _kind(*types: type, what: str) -> Check:
    def check(value: Any) -> str | None:
        return None if isinstance(value, types) else f"expected {what}, got {value!r}"

    return check


def _names(value: Any) -> str | None:
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return None
    return f"expected a list of names, got {value!r}"


def _numbers(value: Any) -> str | None:
    if isinstance(value, list | tuple) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        return None
    return f"expected a list of fault numbers, got {value!r}"


def _traffic(value: Any) -> str | None:
    return None if isinstance(value, str) else _names(value)


def _expect(value: Any) -> str | None:
    if isinstance(value, dict) and isinstance(value.get("checker"), str):
        return None
    return f"expected {{'checker': NAME, 'rule': RULE}}, got {value!r}"


_POSITIVE = _number(0, strict=True)
_TEXT = _kind(str, what="text")
_FLAG = _kind(bool, what="true or false")
_MAPPING = _kind(dict, what="a mapping")

# name -> check of its value
OPTIONS: dict[str, Check] = {
    # the cluster and the workloads (harness.runner, harness.dbs)
    "hosts": _TEXT,
    "keys": _integer(1),
    "meta_keys": _integer(1),
    "meta_rate_hz": _POSITIVE,
    "meta_traffic": _traffic,
    "change_interval_s": _POSITIVE,
    "change_learners": _FLAG,
    "rebalance_interval_s": _POSITIVE,
    "cancel_interval_s": _POSITIVE,
    "failpoints": _MAPPING,
    # the nemesis's schedule (nemesis.generator) and what shrink kept of it
    "nemesis_mode": _TEXT,
    "nemesis_gap_s": _POSITIVE,
    "nemesis_phases": _names,
    "nemesis_kinds": _names,
    "nemesis_targets": _names,
    "nemesis_groupings": _names,
    "nemesis_keep": _numbers,
    # checker settings a plan may fix (`CheckContext.setting`)
    "checkers": _names,
    "model": _TEXT,
    "lin_time_limit_s": _POSITIVE,
    "availability_bound_s": _POSITIVE,
    "min_ok_ops": _integer(0),
    "quiet_s": _number(0, strict=False),
    "require_overlap": _FLAG,
    "shared_clock": _FLAG,
    "history_zero_wall": _number(0, strict=False),
    "revisions": _MAPPING,
    # what `faultline explore` expects a replay to find (harness.commands_run)
    "expect": _expect,
    # labels: what made a synthetic run (harness.synthetic); never read as settings
    "synthetic": _MAPPING,
    **{label: (lambda _v: None) for label in VERSION_LABELS},
}


class OptionError(ValueError):
    """A plan option that is unknown or has a value of the wrong kind."""


def check_options(options: dict[str, Any]) -> None:
    """Raises OptionError naming the first unknown option or bad value."""
    for name, value in options.items():
        check = OPTIONS.get(name)
        if check is None:
            near = difflib.get_close_matches(name, OPTIONS, n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise OptionError(f"unknown plan option {name!r}{hint}; known: "
                              f"{', '.join(sorted(OPTIONS))}")  # fmt: skip
        if value is None:
            continue  # absent, as the readers take it
        why = check(value)
        if why is not None:
            raise OptionError(f"plan option {name}: {why}")
