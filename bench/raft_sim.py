"""Simulator throughput: simulated seconds per wall second, commits per wall second.

A 5-voter cluster (plus 5 spares for membership changes) under continuous
proposals, random change_peers and the full fault mix, for a few seeds.
Prints one line per seed and the medians. Not a test: run it by hand,

    .venv/bin/python bench/raft_sim.py [--seeds 5] [--sim-seconds 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from ember.sim.clock import NS_PER_S
from ember.sim.runner import SimConfig
from ember.sim.simulation import Simulation


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit code."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--first-seed", type=int, default=1)
    p.add_argument("--nodes", type=int, default=5)
    p.add_argument("--sim-seconds", type=float, default=10.0)
    args = p.parse_args(argv)
    if args.seeds < 1 or args.nodes < 1 or args.sim_seconds <= 0:
        p.error("--seeds, --nodes and --sim-seconds must be positive")
    speed, commits, events = [], [], []
    print(f"{args.nodes} voters, {args.sim_seconds}s of faults per run, heal phase included")
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        config = SimConfig(seed=seed, nodes=args.nodes, sim_seconds=args.sim_seconds)
        started = time.perf_counter()
        result = Simulation(config, stop_at_violation=False).run()
        wall = time.perf_counter() - started
        sim_s = result.sim_ns / NS_PER_S
        speed.append(sim_s / wall)
        commits.append(result.stats["acked"] / wall)
        events.append(result.events / wall)
        print(
            f"seed {seed}: {sim_s:6.2f}s simulated in {wall:6.2f}s wall = "
            f"{speed[-1]:6.2f} sim-s/wall-s, {result.stats['acked']} acked = "
            f"{commits[-1]:7.1f} commits/wall-s, {events[-1]:8.0f} events/wall-s, "
            f"verdict {result.kind}"
            + (f" ({result.violations[0].prop})" if result.violations else "")
        )
    print(
        f"median: {statistics.median(speed):.2f} simulated seconds per wall second, "
        f"{statistics.median(commits):.1f} committed proposals per wall second, "
        f"{statistics.median(events):.0f} events per wall second"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
