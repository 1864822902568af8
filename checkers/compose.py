"""Composing checkers into one run verdict, and loading a run to check.

Theory of operation: `check(plan, history, options)` pairs the history into
operations, builds one `CheckContext`, and runs each selected checker on it.
A checker that raises yields `unknown` with the error (a broken checker must
never make a run look valid, nor crash the others). The verdicts merge as
false > unknown > true into `Result`, which is what results.json holds.

Which checkers run: the `checkers` option if given, else the plan's
`checkers` list, else every registered checker whose inputs exist (the
audit-event checkers need nodes' events.jsonl, so a bare history.jsonl gets
the history-only ones).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import msgspec

from checkers.api import CheckContext, Checker, CheckerResult, Validity, merge_validity
from checkers.audit import load_audit
from checkers.convergence import ConvergenceChecker
from checkers.history import Event, load_history, pair
from checkers.linear import LinearizabilityChecker
from checkers.raft import RaftChecker
from checkers.revisions import RevisionChecker
from checkers.stats import StatsChecker

# name -> factory; a new checker is one line here.
REGISTRY: dict[str, Callable[[], Checker]] = {
    "linearizable": LinearizabilityChecker,
    "raft": RaftChecker,
    "revisions": RevisionChecker,
    "convergence": ConvergenceChecker,
    "stats": StatsChecker,
}
# Checkers that need audit events; skipped by default on a bare history.
NEEDS_AUDIT = frozenset({"raft", "convergence"})


class Result(msgspec.Struct, kw_only=True):
    """The composed verdict of a run: results.json."""

    valid: Validity
    checkers: dict[str, CheckerResult]
    # Why the verdict is unknown: one line per undecided checker.
    reasons: list[str] = msgspec.field(default_factory=list)
    test: str | None = None
    seed: int | str | None = None
    ops: int = 0
    elapsed_s: float = 0.0


def select(names: Iterable[str] | None, plan: Mapping[str, Any], has_audit: bool) -> list[str]:
    """The checker names to run (see module doc); raises ValueError on an unknown name."""
    chosen = list(names) if names else None
    if chosen is None and isinstance(plan.get("checkers"), list):
        chosen = [str(n) for n in plan["checkers"]]
    if chosen is None:
        return [n for n in REGISTRY if has_audit or n not in NEEDS_AUDIT]
    unknown = [n for n in chosen if n not in REGISTRY]
    if unknown:
        raise ValueError(
            f"unknown checker {unknown[0]!r}; expected one of {', '.join(sorted(REGISTRY))}"
        )
    return chosen


def run_one(checker: Checker, ctx: CheckContext) -> CheckerResult:
    """Runs one checker; an exception becomes an `unknown` result naming it."""
    started = time.perf_counter()
    try:
        result = checker.check(ctx)
    except Exception as exc:  # any checker failure must become unknown, never a crash
        result = CheckerResult(
            name=checker.name, valid="unknown", error=f"{type(exc).__name__}: {exc}"
        )
    result.figures.setdefault("elapsed_s", round(time.perf_counter() - started, 6))
    return result


def check(
    plan: Mapping[str, Any] | None,
    history: list[Event],
    options: Mapping[str, Any] | None = None,
    *,
    audit: dict[str, list[dict[str, Any]]] | None = None,
    checkers: Mapping[str, Checker] | None = None,
) -> Result:
    """Checks one run's (validated) history and audit events; see the module doc.

    `checkers` overrides the registry (name -> checker instance), for tests
    and for callers with checkers of their own.
    """
    started = time.perf_counter()
    plan = plan or {}
    options = options or {}
    ctx = CheckContext(
        plan=plan, events=history, operations=pair(history), audit=audit, options=options
    )
    if checkers is None:
        names = select(options.get("checkers"), plan, audit is not None)
        checkers = {n: REGISTRY[n]() for n in names}
    results = {name: run_one(c, ctx) for name, c in checkers.items()}
    reasons = [
        f"{name}: {r.error or 'undecided'}" for name, r in results.items() if r.valid == "unknown"
    ]
    seed = plan.get("seed")
    return Result(
        valid=merge_validity(r.valid for r in results.values()),
        checkers=results,
        reasons=reasons,
        test=str(plan["name"]) if "name" in plan else None,
        seed=seed if isinstance(seed, int | str) else None,
        ops=len(ctx.operations),
        elapsed_s=round(time.perf_counter() - started, 6),
    )


def load_run(path: str | Path) -> tuple[dict[str, Any], list[Event], Any, Path]:
    """Reads a run dir (or a bare history.jsonl): plan, history, audit, out dir.

    Raises HistoryError for a malformed history or audit log, OSError for a
    missing file, ValueError for a malformed test.json.
    """
    path = Path(path)
    if path.is_dir():
        history_path, run_dir = path / "history.jsonl", path
    else:
        history_path, run_dir = path, path.parent
    if not history_path.is_file():
        raise FileNotFoundError(f"no history at {history_path}")
    plan: dict[str, Any] = {}
    plan_path = run_dir / "test.json"
    if path.is_dir() and plan_path.is_file():
        try:
            plan = msgspec.json.decode(plan_path.read_bytes(), type=dict[str, Any])
        except msgspec.DecodeError as exc:
            raise ValueError(f"{plan_path}: {exc}") from None
    audit = load_audit(run_dir) if path.is_dir() else None
    return plan, load_history(history_path), audit, run_dir


def write_results(result: Result, run_dir: Path) -> Path:
    """Writes results.json into `run_dir` (atomically: a reader never sees half)."""
    out = run_dir / "results.json"
    tmp = out.with_suffix(".json.tmp")
    tmp.write_bytes(msgspec.json.format(msgspec.json.encode(result), indent=2) + b"\n")
    tmp.replace(out)
    return out
