"""How fast `faultline explore` finds each planted defect, and how small shrink makes it.

    python bench/explore.py [--repeats 5] [--workers 2] [--defects NAME,...]
                            [--time-limit 60] [--budget "40 runs"] [--no-shrink]
                            [--shrink-max-runs 300] [--out rows.jsonl]

For each planted failpoint (README's table) and each `--bug` core defect
(`--db-setting planted_bugs=NAME`), runs `faultline explore` with
`--repeats` different root seeds (default 5) and prints, as a table: the
median runs and wall seconds until the first detection (explore stops
there), how many explores found it within the budget, and, for the first
explore that found it, the failing run's faults and client ops against the
shrunk plan's (`faultline shrink`) and the runs the shrink took. Every
command is a fresh process, as a user would run it. With `--out`, each
explore and each shrink is also appended to a JSON-lines file as soon as
it ends (with the machine's load average), so a long bench that is
stopped keeps what it measured. Issue
17's targets: every defect found in under 60 s of wall time on 2 cores,
shrunk schedules of 3 faults or fewer.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FAILPOINTS = (
    "rebalance.cancel-without-revision-guard", "rebalance.ignore-last-seen",
    "raft.skip-catchup", "raft.ignore-vote-lease", "raft.skip-check-quorum",
    "raft.step-down-on-joint", "kv.ack-before-commit", "kv.apply-diverge",
    "placement.trust-own-clock", "rebalance.primary-ignores-lease",
    "metastore.compare-create-revision",
)  # fmt: skip
# Defects only some plans reach: the flags their explores add (the faults
# they need, or the traffic that asks the wrong question).
PLAN_FLAGS = {
    "placement.trust-own-clock": ["--nemesis", "mix,clock"],
    "rebalance.primary-ignores-lease": ["--nemesis", "partition"],
    "metastore.compare-create-revision": ["--meta-traffic", "delete,range,compare-mod"],
}
BUGS = ("commit-previous-term", "skip-joint", "count-learners", "single-majority-joint")


def _flags(defect: str) -> list[str]:
    if defect in FAILPOINTS:
        return ["--failpoint", defect, *PLAN_FLAGS.get(defect, [])]
    return ["--db-setting", f"planted_bugs={defect}"]


def _cli(*args: str) -> tuple[str, float]:
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=ROOT,
                         capture_output=True, text=True, check=False)  # fmt: skip
    return out.stdout + out.stderr, time.monotonic() - started


def _explore(defect: str, seed: int, args: argparse.Namespace, store: Path) -> dict[str, Any]:
    out, wall = _cli("explore", "--budget", args.budget, "--workers", str(args.workers),
                     "--seed", str(seed), "--time-limit", str(args.time_limit),
                     "--store", str(store), "--no-progress", *_flags(defect))  # fmt: skip
    runs = re.search(r"explore: (\d+) runs", out)
    found = re.search(r"replay: faultline replay (\S+)", out)
    return {"runs": int(runs.group(1)) if runs else None, "wall": wall,
            "run_dir": found.group(1) if found else None}  # fmt: skip


def _shrink(run_dir: str, args: argparse.Namespace) -> tuple[str, dict[str, object]]:
    out, wall = _cli("shrink", run_dir, "--workers", str(args.workers),
                     "--max-runs", str(args.shrink_max_runs))  # fmt: skip
    m = re.search(r"shrunk: faults (\d+) -> (\d+) .*ops (\d+) -> (\d+); (\d+) runs", out)
    if m is None:
        return "shrink failed: " + out.strip().splitlines()[-1][:60], {"shrink_error": out[-2000:]}
    still = "check: the shrunk plan still fails" in out
    faults, ops = (int(m.group(1)), int(m.group(2))), (int(m.group(3)), int(m.group(4)))
    runs = int(m.group(5))
    steps = re.findall(r"^step (\S+): kept: (.*) \(", out, re.M)
    text = (f"faults {faults[0]} -> {faults[1]}, ops {ops[0]} -> {ops[1]}"
            f"{'' if still else ' (NOT reproduced)'}, {runs} runs in {wall:.0f} s")  # fmt: skip
    return text, {"faults": faults, "ops": ops, "shrink_runs": runs, "shrink_wall_s": wall,
                  "reproduced": still, "kept_steps": steps}  # fmt: skip


def _record(args: argparse.Namespace, row: dict[str, object]) -> None:
    if args.out is not None:
        with args.out.open("a") as fh:
            fh.write(json.dumps(row) + "\n")


def _bench_one(defect: str, args: argparse.Namespace, root: Path) -> None:
    """One defect's row: its explores, and a shrink of the first failing run it found."""
    trials, shrunk = [], "-"
    for i in range(args.repeats):
        seed = 1000 * (i + 1)
        trial = _explore(defect, seed, args, root / f"{defect}-{i}")
        trials.append(trial)
        _record(args, {"defect": defect, "seed": seed, **trial, "load": os.getloadavg()[0]})
        if trial["run_dir"] and shrunk == "-" and not args.no_shrink:
            # Shrunk at once, so a bench stopped early still has the figure.
            shrunk, facts = _shrink(str(trial["run_dir"]), args)
            _record(args, {"defect": defect, "seed": seed, "shrink": facts})
    hits = [t for t in trials if t["run_dir"]]
    runs = statistics.median(t["runs"] for t in hits) if hits else float("nan")
    wall = statistics.median(t["wall"] for t in hits) if hits else float("nan")
    print(f"{defect:<42} {len(hits):>3}/{args.repeats:<2} {runs:>10} {wall:>12.0f}  "
          f"{shrunk}", flush=True)  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--time-limit", type=float, default=60.0)
    p.add_argument("--budget", default="40 runs")
    p.add_argument("--defects", help="comma-separated subset (default: every defect)")
    p.add_argument("--no-shrink", action="store_true")
    p.add_argument("--shrink-max-runs", type=int, default=300)
    p.add_argument("--out", type=Path, help="append each defect's row here (JSON lines)")
    args = p.parse_args()
    defects = args.defects.split(",") if args.defects else [*FAILPOINTS, *BUGS]
    root = Path(tempfile.mkdtemp(prefix="bench-explore-"))
    print(f"explore per defect: {args.repeats} root seeds, {args.workers} workers, "
          f"{args.time_limit:g} s plans, budget {args.budget}")  # fmt: skip
    print(f"{'defect':<42} {'found':>6} {'runs (med)':>10} {'wall s (med)':>12}  shrink")
    try:
        for defect in defects:
            _bench_one(defect, args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
