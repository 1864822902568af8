"""`faultline`, the command line: one argparse subcommand per module.

A subcommand lives in its own module exposing `add_parser(subparsers)`,
which adds its parser and sets `func` (args -> exit code) as a default;
adding one is a line in `COMMANDS`. This module owns the boundary rules:
bad input (a missing file, a bad flag, a malformed history) gets one line on
stderr naming what is wrong and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

# Modules exposing add_parser(subparsers), in the order `--help` lists them.
COMMANDS = (
    "harness.commands_run",
    "harness.commands_explore",
    "checkers.cli",
    "checkers.verify_cli",
    "harness.nightly",
    "pipeline.cli",
    "harness.commands_report",
    "harness.clean",
)
# Subcommands whose module is all the parser needs: `faultline check` on a
# small history must not pay for importing the runner, Docker and ember
# (0.7 s) just to build the other subcommands' parsers.
SOLE_MODULE = {"check": "checkers.cli", "verify": "checkers.verify_cli"}

EXIT_ERROR = 2


class CliError(Exception):
    """Bad input a subcommand reports to the user (one line, exit 2)."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr, exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


def _broken(name: str, exc: BaseException) -> Any:
    def func(args: argparse.Namespace) -> int:
        raise CliError(f"this command is unavailable: {name} failed to import: {exc}")

    return func


def build_parser(modules: Sequence[str] = COMMANDS) -> argparse.ArgumentParser:
    """The `faultline` parser with the subcommands of `modules` (default all)."""
    parser = _Parser(prog="faultline", description="Jepsen-style fault injection for ember")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in modules:
        try:
            module = importlib.import_module(name)
        except Exception as exc:  # one broken command must not break the others
            sub = subparsers.add_parser(name.rsplit(".", 1)[-1], help=f"(unavailable: {exc})")
            sub.set_defaults(func=_broken(name, exc))
            continue
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs `faultline`; returns the exit code (the console script exits with it)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    sole = SOLE_MODULE.get(argv[0]) if argv else None
    args = build_parser((sole,) if sole else COMMANDS).parse_args(argv)
    try:
        return int(args.func(args))
    except (CliError, OSError, ValueError) as exc:
        # HistoryError is a ValueError: it already names the file and line.
        message = str(exc)
        if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
            message = f"{exc.filename}: {exc.strerror}"
        print(f"faultline {args.command}: error: {message}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug, not bad input: still one line unless asked
        if os.environ.get("FAULTLINE_DEBUG"):
            raise
        print(
            f"faultline {args.command}: internal error: {type(exc).__name__}: {exc} "
            "(FAULTLINE_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        return EXIT_ERROR


if __name__ == "__main__":
    # Run through the package module, not __main__, so the subcommands'
    # `from harness.cli import CliError` names the same class caught above.
    from harness.cli import main as package_main

    sys.exit(package_main())
