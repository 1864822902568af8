"""Nightly: kill `faultline run` at 20 seeded instants and print what each left.

    python bench/kill_table.py [--instants 20] [--seed 18]

The full form of tests/runner/test_kill_docker.py (CI runs 6 instants).
Each instant is a Docker run (`tests.runner.kill_driver`): SIGKILL at a
seeded moment of setup, workload, a phase-triggered fault, heal or check;
then what is left is counted (containers and networks owned by the killed
pid, and on its containers still running the faultline iptables rules,
stopped processes and failpoints on), `faultline clean` runs (by run dir,
or by cluster name when the run died before it had one), and it is counted
again. The killed run's history is checked. One markdown table row per
instant; the exit code is 1 if anything was left after clean, or a check or
clean failed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

# Run from a checkout without installing: the repository root on the path.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nemesis import journal
from tests.runner.kill_driver import Kill, faultline, instants, kill_once, left_on_docker


def _clean(kill: Kill) -> tuple[bool, str]:
    seed = 100 + kill.instant.number
    target = [str(kill.run_dir)] if kill.run_dir else ["--cluster", f"run{seed}-{kill.pid}"]
    first, second = faultline("clean", *target), faultline("clean", *target)
    ok = first.returncode == 0 and second.returncode == 0 and "nothing to do" in second.stdout
    return ok, (first.stderr or second.stderr).strip()[:120]


def _check(kill: Kill) -> str:
    if kill.run_dir is None or not (kill.run_dir / "history.jsonl").exists():
        return "no history"
    out = faultline("check", str(kill.run_dir))
    if out.stderr.strip():
        return f"ERROR {out.stderr.strip()[:80]}"
    lin = next((ln.split()[1] for ln in out.stdout.splitlines()
                if ln.split()[:1] == ["linearizable"]), "?")  # fmt: skip
    ops = out.stdout.strip().splitlines()[-1].split()[1] if out.stdout.strip() else "?"
    return f"linearizable {lin}, {ops} ops"


def main(argv: list[str] | None = None) -> int:
    """Run the instants and print the table; 1 if any left something after clean."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--instants", type=int, default=20)
    p.add_argument("--seed", type=int, default=18)
    args = p.parse_args(argv)
    bad = 0
    print(
        "| # | phase | offset s | landed | exit | left before clean | after clean | clean "
        "| journal ended | history check | s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="faultline-kill-") as tmp:
        for instant in instants(args.seed, args.instants):
            started = time.monotonic()
            store = Path(tmp) / f"i{instant.number}" / "store"
            store.mkdir(parents=True)
            kill = kill_once(instant, store, [])
            kill.before = left_on_docker(kill.pid)
            cleaned, error = _clean(kill)
            kill.after = left_on_docker(kill.pid)
            records = journal.read(kill.run_dir / journal.FILE_NAME) if kill.run_dir else []
            ended = journal.has_ended(records)
            check = _check(kill)
            bad += (kill.after.total() > 0) + (not cleaned) + check.startswith("ERROR")
            bad += "invalid" in check
            landed = kill.landed or "; ".join(kill.notes)
            print(f"| {instant.number} | {instant.phase} | {instant.offset_s} | {landed} "
                  f"| {kill.exit_code} | {kill.before.describe()} | {kill.after.describe()} "
                  f"| {'ok' if cleaned else 'FAILED ' + error} | {ended if kill.run_dir else '-'} "
                  f"| {check} | {time.monotonic() - started:.0f} |", flush=True)  # fmt: skip
    print(f"{bad} problems" if bad else "every instant: nothing left after clean")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
