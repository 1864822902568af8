"""A stand-in for `faultline run` in the nightly tests (tests only).

Takes the arguments nightly passes and behaves by workload/nemesis name:
workload `crash` aborts, workload `hang` never finishes and ignores SIGTERM,
workload `slow` never finishes but cleans up and exits on SIGTERM, nemesis `bug` writes
a run with a planted stale read (invalid), nemesis `weak` one too short to
judge (unknown); anything else writes a valid run. Runs are written by
harness.synthetic, so verdicts come from the real checkers, and the exit code
follows `faultline run`'s contract: 0 valid, 1 invalid, 2 unknown.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

import msgspec

from harness.synthetic import make_run


def _cleaned_up(store: Path) -> None:
    store.mkdir(parents=True, exist_ok=True)
    (store / "cleaned-up").write_text("healed and removed\n")
    print("stub run: cleaned up after SIGTERM", flush=True)
    sys.exit(130)


def main() -> int:
    """Parses the run arguments and acts out the run."""
    p = argparse.ArgumentParser()
    for flag in ("--backend", "--workload", "--nemesis", "--store"):
        p.add_argument(flag, required=True)
    for flag in ("--seed", "--nodes"):
        p.add_argument(flag, type=int, required=True)
    p.add_argument("--time-limit", type=float, required=True)
    p.add_argument("--db", choices=("ember", "etcd"), required=True)
    args = p.parse_args()
    print(f"stub run: seed {args.seed}", flush=True)
    if args.workload == "crash":
        os.abort()
    if args.workload == "hang":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # deaf: nightly must kill it
        time.sleep(3600)
    if args.workload == "slow":  # ends on SIGTERM after cleaning up, as faultline run does
        signal.signal(signal.SIGTERM, lambda *_: _cleaned_up(Path(args.store)))
        time.sleep(3600)
    ops = 5 if args.nemesis == "weak" else 120
    run = make_run(Path(args.store), seed=args.seed, ops=ops, valid=args.nemesis != "bug",
                   name=f"{args.workload}-{args.nemesis}-n{args.nodes}")  # fmt: skip
    valid = msgspec.json.decode(run.results.read_bytes())["valid"]
    return {True: 0, False: 1}.get(valid, 2)


if __name__ == "__main__":
    sys.exit(main())
