"""Many seeds of one plan under `faultline run --backend sim`: verdicts at a glance.

    python bench/sim_sweep.py --seeds 1-100 [--workers 2] [--time-limit 60]
                              [--failpoint NAME] [--store DIR] [-- EXTRA RUN FLAGS]

Each seed is one `faultline run` process (a fresh interpreter, as a user
would run it); `--workers` run at once. Prints, per verdict, the seeds, and
for every invalid or unknown seed its first reason and replay command, then
the wall time per run. The nightly form of issue 14's "the clean tree stays
valid over 100 seeds"; `--failpoint` gives the planted-defect form.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from rich.progress import Progress


def _seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def _one(seed: int, args: argparse.Namespace, extra: list[str]) -> dict[str, object]:
    cmd = [sys.executable, "-m", "harness.cli", "run", "--backend", "sim", "--seed", str(seed),
           "--time-limit", str(args.time_limit), "--store", str(args.store), "--no-progress",
           "--name", args.name]  # fmt: skip
    for fp in args.failpoint or ():
        cmd += ["--failpoint", fp]
    started = time.perf_counter()
    proc = subprocess.run([*cmd, *extra], capture_output=True, text=True, check=False)
    took = time.perf_counter() - started
    run_dir = next((ln.split(" ", 1)[1] for ln in proc.stdout.splitlines()
                    if ln.startswith("store ")), None)  # fmt: skip
    reasons: list[str] = []
    if run_dir and (Path(run_dir) / "results.json").is_file():
        doc = json.loads((Path(run_dir) / "results.json").read_text())
        reasons = [r for r in doc.get("reasons", []) if not r.startswith("note:")]
        for name, res in doc.get("checkers", {}).items():
            if res.get("valid") is False and res.get("anomalies"):
                reasons.append(f"{name}: {res['anomalies'][0].get('message', '')[:160]}")
    verdict = {0: "valid", 1: "invalid"}.get(proc.returncode, "unknown")
    if verdict == "unknown" and not reasons:
        reasons = [(proc.stderr.strip().splitlines() or ["?"])[-1]]
    return {"seed": seed, "verdict": verdict, "wall_s": took, "run": run_dir, "reasons": reasons}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="1-20")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--time-limit", type=float, default=60.0)
    p.add_argument("--failpoint", action="append")
    p.add_argument("--store", type=Path, default=Path("store/sweep"))
    p.add_argument("--name", default="sim-sweep")
    p.add_argument("extra", nargs="*", help="more `faultline run` flags (after --)")
    args = p.parse_args()
    seeds = _seeds(args.seeds)
    results = []
    with Progress() as progress, ThreadPoolExecutor(args.workers) as pool:
        task = progress.add_task(f"{len(seeds)} seeds", total=len(seeds))
        futures = [pool.submit(_one, s, args, args.extra) for s in seeds]
        for fut in as_completed(futures):
            results.append(fut.result())
            progress.advance(task)
    results.sort(key=lambda r: int(r["seed"]))  # type: ignore[call-overload]
    for verdict in ("valid", "invalid", "unknown"):
        these = [r for r in results if r["verdict"] == verdict]
        print(f"{verdict}: {len(these)}  {' '.join(str(r['seed']) for r in these)}")
    for r in results:
        if r["verdict"] != "valid":
            print(f"  seed {r['seed']} {r['verdict']}: {'; '.join(r['reasons'][:3])}")  # type: ignore[arg-type]
            print(f"    replay: faultline replay {r['run']}")
    walls = sorted(float(r["wall_s"]) for r in results)  # type: ignore[arg-type]
    print(f"wall per run: min {walls[0]:.1f} s, median {walls[len(walls) // 2]:.1f} s, "
          f"max {walls[-1]:.1f} s")  # fmt: skip
    return 0 if all(r["verdict"] == "valid" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
