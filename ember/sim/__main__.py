"""`python -m ember.sim`: an alias of `faultline run --backend sim`.

There is one simulator: the whole system (every node running the daemon's
own `serve`, the harness's workloads, nemesis and checkers) on one
deterministic loop. This entry point keeps the old command line working:
every argument goes to `faultline run --backend sim`, and `--bug NAME`
(repeatable or comma-separated) plants a core defect on every node, as
`--db-setting planted_bugs=NAME` does. Exit codes are faultline's.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def translate(argv: Sequence[str]) -> list[str]:
    """The `faultline` arguments for an `ember.sim` command line."""
    out, bugs = ["run", "--backend", "sim"], []
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg == "--bug" and args:
            bugs.append(args.pop(0))
        elif arg.startswith("--bug="):
            bugs.append(arg.split("=", 1)[1])
        else:
            out.append(arg)
    if bugs:
        out += ["--db-setting", "planted_bugs=" + ",".join(bugs)]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Run `faultline run --backend sim` with the translated arguments."""
    from harness.cli import main as faultline  # the harness drives the simulator

    return faultline(translate(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
