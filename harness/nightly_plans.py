"""A nightly matrix's cells as the plans they would run, refused before the night starts.

Each cell hands its matrix keys (backend, db, workload, nemesis, nodes, seed,
time limit, store, extra_args) to `faultline run` (or `explore`) as flags.
A key the cell's backend or db would not honour is refused by every run of
that cell; `cell_plans` builds each cell's plan with the run command's own
parser and `plan_from_args` (the refusals of harness/honoured.py), so
`faultline nightly` refuses the matrix in one line, exit 2, before the first
run instead of erroring cell after cell. A matrix whose `command` is not
faultline's own parses its flags itself and is not checked here.
"""

from __future__ import annotations

import contextlib
import io

from harness.nightly import Cell, Matrix, MatrixError, cell_command, run_args
from harness.plan import Plan


def speaks_run_flags(command: tuple[str, ...]) -> bool:
    """Whether `command` is `faultline run|explore` (as named or as `-m harness.cli`)."""
    word = command[-1:]
    return word in (("run",), ("explore",)) and (
        command[0] == "faultline" or "harness.cli" in command
    )


def cell_plans(matrix: Matrix) -> dict[Cell, Plan]:
    """The plan of each distinct cell (first seed), or MatrixError naming the
    first cell refused and why; {} when the command is not faultline's."""
    from harness.cli import CliError, build_parser
    from harness.commands_run import plan_from_args

    command = cell_command(matrix)
    if not speaks_run_flags(command):
        return {}
    plans: dict[Cell, Plan] = {}
    seen: set[tuple[str, str, int]] = set()
    for cell in matrix.cells():
        if (cell.workload, cell.nemesis, cell.nodes) in seen:
            continue
        seen.add((cell.workload, cell.nemesis, cell.nodes))
        argv = [command[-1], *run_args(matrix, cell)]
        errors = io.StringIO()
        try:
            with contextlib.redirect_stderr(errors):
                args = build_parser().parse_args(argv)
            plans[cell] = plan_from_args(args)
        except SystemExit:  # argparse's refusal: its last line says what
            last = errors.getvalue().strip().splitlines()[-1:] or ["bad arguments"]
            raise MatrixError(f"cell {cell.name}: {last[0]}") from None
        except CliError as exc:
            raise MatrixError(f"cell {cell.name}: {exc}") from None
    return plans
