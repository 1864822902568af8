"""`faultline check RUN_DIR|history.jsonl`: check a stored run standalone.

Reads the run (plan, history, audit events where present), runs the
selected checkers, writes results.json beside the history, prints one line
per checker, and exits 0 valid, 1 invalid, 2 unknown (or bad input).
"""

from __future__ import annotations

import argparse
from typing import Any

from checkers.compose import REGISTRY, Result, check, load_run, write_results
from checkers.linear import model_names
from checkers.sim import load_sim_report

EXIT_CODES = {True: 0, False: 1, "unknown": 2}


def add_parser(subparsers: Any) -> None:
    """Registers the `check` subcommand."""
    p = subparsers.add_parser(
        "check",
        help="check a run dir or a history.jsonl; exit 0 valid, 1 invalid, 2 unknown",
        description=__doc__,
    )
    p.add_argument("path", metavar="RUN_DIR|history.jsonl")
    p.add_argument(
        "--model", choices=model_names(), help="linearizability model (default: plan's, or kv)"
    )
    p.add_argument(
        "--time-limit",
        type=_positive,
        metavar="SECONDS",
        help="linearizability search budget (default 60); past it the verdict is unknown",
    )
    p.add_argument(
        "--checker",
        action="append",
        choices=sorted(REGISTRY),
        dest="checkers",
        help="run only this checker (repeatable; default: all that apply)",
    )
    p.add_argument("--no-write", action="store_true", help="do not write results.json")
    p.set_defaults(func=run)


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def summary(result: Result) -> list[str]:
    """One line per checker and one for the whole verdict."""
    lines = []
    for name, r in result.checkers.items():
        total = sum(r.figures.get("anomaly_counts", {}).values()) or len(r.anomalies)
        detail = r.error or (f"{total} anomalies" if total else "")
        lines.append(f"  {name:<14} {_word(r.valid):<8} {detail}".rstrip())
        if r.anomalies:  # the first one says what kind of thing went wrong
            first = r.anomalies[0]
            lines.append(f"    {first.kind}: {first.message}")
    lines.append(f"{_word(result.valid)}: {result.ops} ops checked in {result.elapsed_s:.2f}s")
    return lines


def _word(valid: object) -> str:
    if valid is True:
        return "valid"
    return "INVALID" if valid is False else "unknown"


def run(args: argparse.Namespace) -> int:
    """Checks the run and returns the exit code for its verdict."""
    plan, history, audit, run_dir = load_run(args.path)
    options: dict[str, Any] = {}
    if args.model:
        options["model"] = args.model
    if args.time_limit:
        options["lin_time_limit_s"] = args.time_limit
    if args.checkers:
        options["checkers"] = args.checkers
    result = check(plan, history, options, audit=audit, sim=load_sim_report(run_dir))
    if not args.no_write:
        write_results(result, run_dir)
    print("\n".join(summary(result)))
    return EXIT_CODES[result.valid]
