"""How fast the whole-system simulator plays the default plan, and where the time goes.

    python bench/sim_full.py [--seed 3] [--time-limit 60] [--runs 3] [--no-profile]

Plays `faultline run --backend sim`'s default plan (5 nodes, the full mix
with the control plane, the mix nemesis) in this process, one core, and
prints per run: simulated seconds, wall seconds of the simulation alone
(not the checkers or the report), simulated seconds per wall second, client
ops (history invokes) per wall second, and loop handles per second. Then,
unless --no-profile, one profiled run's time by package (own time of the
functions in each: ember's Raft core, runtime, control plane, aiohttp,
asyncio, the harness) and the top functions by own time. The Docker run of
the same plan costs 3-5 minutes of wall time (issue 14).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from harness import plan as plans
from harness.progress import RunStatus
from harness.simrun import execute_sim
from harness.store import new_run

PACKAGES = (
    ("ember/raft", "ember raft core"),
    ("ember/runtime", "ember runtime"),
    ("ember/storage", "ember storage"),
    ("ember/net", "ember transport"),
    ("ember/metastore", "ember metastore"),
    ("ember/placement", "ember placement"),
    ("ember/rebalance", "ember rebalance"),
    ("ember/sim", "simulator (loop, wire, disk)"),
    ("ember/", "ember other"),
    ("aiohttp", "aiohttp"),
    ("yarl", "aiohttp (yarl, multidict)"),
    ("multidict", "aiohttp (yarl, multidict)"),
    ("msgspec", "msgspec"),
    ("asyncio", "asyncio"),
    ("harness/", "harness"),
    ("workloads/", "workloads"),
    ("nemesis/", "nemesis"),
    ("logging", "logging"),
)


def _play(seed: int, time_limit: float, root: Path) -> dict[str, float]:
    plan = plans.Plan(seed=seed, backend="sim", time_limit_s=time_limit)
    run = new_run(root, plan.name, seed)
    run.plan.write_bytes(plans.dump(plan))
    started = time.perf_counter()
    notes = execute_sim(plan, run, RunStatus())
    wall = time.perf_counter() - started
    summary = next(n for n in notes if n.startswith("simulated "))
    simulated = float(summary.split()[1])
    handles = float(summary.split()[3])
    lines = run.history.read_text().splitlines()
    invokes = sum(1 for ln in lines if '"type":"invoke"' in ln and '"process":"nemesis"' not in ln)
    return {"sim_s": simulated, "wall_s": wall, "ops": invokes, "handles": handles}


def _by_package(stats: pstats.Stats) -> list[tuple[str, float]]:
    totals: dict[str, float] = defaultdict(float)
    for (path, _line, _name), (_cc, _nc, own, _cum, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        label = next((lbl for key, lbl in PACKAGES if key in path), "other")
        totals[label] += own
    return sorted(totals.items(), key=lambda kv: -kv[1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--time-limit", type=float, default=60.0)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--no-profile", action="store_true")
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="sim-bench-"))
    try:
        print(f"default plan, {args.time_limit:g} s, seed {args.seed}, 5 nodes, one core")
        print(f"{'run':>4} {'sim s':>7} {'wall s':>7} {'sim s/wall s':>13} {'ops/wall s':>11} "
              f"{'handles/s':>10}")  # fmt: skip
        for i in range(args.runs):
            r = _play(args.seed, args.time_limit, root)
            print(f"{i + 1:>4} {r['sim_s']:>7.1f} {r['wall_s']:>7.2f} "
                  f"{r['sim_s'] / r['wall_s']:>13.1f} {r['ops'] / r['wall_s']:>11.0f} "
                  f"{r['handles'] / r['wall_s']:>10.0f}")  # fmt: skip
        if not args.no_profile:
            prof = cProfile.Profile()
            prof.enable()
            _play(args.seed, args.time_limit, root)
            prof.disable()
            stats = pstats.Stats(prof)
            total = sum(own for _, own in _by_package(stats))
            print("\nown time by package (profiled run; the profiler slows it down):")
            for label, own in _by_package(stats)[:14]:
                print(f"  {label:<30} {own:6.2f} s  {100 * own / total:5.1f} %")
            print("\ntop functions by own time:")
            stats.sort_stats("tottime").print_stats(12)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
