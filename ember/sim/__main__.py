"""`python -m ember.sim`: run one simulated cluster and print its verdict.

Prints the seed and every derived sub-seed first, a live progress line, then
a summary (simulated time, operations, changes by outcome, faults, each
invariant's verdict) and, on a violation, the command that replays it.
Exit codes: 0 valid, 1 invalid (safety or liveness), 2 error.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

from ember.raft import PLANTED_BUGS
from ember.sim.faults import FAULT_KINDS, Fault, parse_schedule
from ember.sim.report import print_header, print_summary, progress_printer
from ember.sim.runner import SimConfig
from ember.sim.simulation import Simulation


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # One clear line and exit 2, never a traceback.
        self.exit(2, f"ember.sim: error: {message}\n")


def _faults(text: str) -> tuple[str, ...]:
    if text == "none":
        return ()
    kinds = tuple(k for k in text.split(",") if k)
    unknown = sorted(set(kinds) - set(FAULT_KINDS))
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown fault kind(s) {', '.join(unknown)}; known: {', '.join(FAULT_KINDS)} or none"
        )
    return kinds


def _schedule(text: str) -> tuple[Fault, ...]:
    try:
        return parse_schedule(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def build_parser() -> argparse.ArgumentParser:
    """The CLI's flags; every SimConfig field has one, so replays are exact."""
    p = _Parser(prog="python -m ember.sim", description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, help="root seed (default: random, printed first)")
    p.add_argument("--nodes", type=int, default=5, help="voters of the first configuration")
    p.add_argument("--spares", type=int, help="nodes outside it (default: as many as --nodes)")
    p.add_argument("--sim-seconds", type=float, default=10.0, help="length of the fault phase")
    p.add_argument("--heal-seconds", type=float, default=20.0, help="bound on convergence")
    p.add_argument("--bug", choices=sorted(PLANTED_BUGS), help="switch on a planted bug")
    p.add_argument("--catchup-margin", type=int, default=20)
    p.add_argument("--compact-every", type=int, default=40, help="0: never compact")
    p.add_argument("--max-append", type=int, default=64, help="max entries per AppendEntries")
    p.add_argument("--faults", type=_faults, default=FAULT_KINDS, help="comma list, or none")
    p.add_argument(
        "--schedule",
        type=_schedule,
        help="explicit faults at_ns:kind:duration_ns:target,... (overrides --faults)",
    )
    p.add_argument("--fault-gap-ms", type=float, default=300.0, help="mean gap between faults")
    p.add_argument("--propose-ms", type=float, default=10.0, help="mean gap between proposals")
    p.add_argument("--change-ms", type=float, default=300.0, help="mean gap between changes")
    p.add_argument("--reads", type=float, default=0.0,
                   help="fraction of client proposals that are reads through the log")  # fmt: skip
    p.add_argument("--local-reads", action="store_true",
                   help="planted defect: reads off a believed leader's state, no log")  # fmt: skip
    p.add_argument("--events-dir", type=Path, help="write <dir>/<node>/events.jsonl")
    p.add_argument("--quiet", action="store_true", help="no live progress line")
    return p


def config_from_args(args: argparse.Namespace, seed: int) -> SimConfig:
    """The SimConfig the parsed flags describe; ValueError names a bad one."""
    return SimConfig(
        seed=seed,
        nodes=args.nodes,
        spares=args.spares,
        sim_seconds=args.sim_seconds,
        heal_seconds=args.heal_seconds,
        bug=args.bug,
        catchup_margin=args.catchup_margin,
        compact_every=args.compact_every,
        max_append=args.max_append,
        faults=args.faults,
        schedule=args.schedule,
        fault_gap_ms=args.fault_gap_ms,
        propose_ms=args.propose_ms,
        change_ms=args.change_ms,
        reads=args.reads,
        local_reads=args.local_reads,
    )


def _write_events(sim: Simulation, directory: Path) -> bool:
    """Write every node's events.jsonl; False (and one error line) if it cannot."""
    try:
        sim.write_events(directory)
    except OSError as err:
        print(f"ember.sim: error: cannot write events to {directory}: {err}", file=sys.stderr)
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    """Run the simulator; returns the exit code."""
    args = build_parser().parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**63)
    try:
        config = config_from_args(args, seed)
    except ValueError as err:
        print(f"ember.sim: error: {err}", file=sys.stderr)
        return 2
    sim = Simulation(config)
    print_header(sim)
    result = None
    try:
        with progress_printer(sim, enabled=not args.quiet) as hook:
            sim.progress = hook
            result = sim.run()
    except Exception as err:
        print(f"ember.sim: error: the run crashed: {type(err).__name__}: {err}", file=sys.stderr)
        print(f"replay: {config.replay_command()}", file=sys.stderr)
    finally:
        # Whatever ended the run (a violation, a crash, ^C), the events so far
        # are the evidence the audit checkers need: write them all.
        written = args.events_dir is None or _write_events(sim, args.events_dir)
    if result is None or not written:
        return 2
    print_summary(result)
    return 0 if result.valid else 1


if __name__ == "__main__":
    sys.exit(main())
