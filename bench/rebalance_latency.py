"""Benchmark: from a zone alter to the placement driver's Rebalance request.

    python bench/rebalance_latency.py [--rounds N]

Starts the 5-node cluster of tests/rebalance (metastore on n1-n3), creates
the zone, then alters replicas 3 -> 4 -> 3 ... `rounds` times. Each round's
latency is from the wall clock just before the alter's POST to the first
`rebalance-request` audit event with `direction: sent` after it (the nodes
and this script share the machine's clock). Prints min / median / max.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

# Run from a checkout without installing: the repository root on the path.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.node.cluster import ProcCluster
from tests.rebalance.flow import FLAGS, NAMES, PARTITIONS, alter, audit, wait_converged


def first_sent_after(cluster: ProcCluster, t0: float) -> float | None:
    """The wall time of the first Rebalance request sent at or after t0."""
    sent = [ev["wall"] for evs in audit(cluster).values() for ev in evs
            if ev.get("kind") == "rebalance-request" and ev.get("direction") == "sent"
            and ev.get("wall", 0) >= t0]  # fmt: skip
    return min(sent) if sent else None


def main() -> int:
    """Run the rounds and print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    if args.rounds < 1:
        print("--rounds must be at least 1", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        c = ProcCluster(Path(tmp), NAMES, bootstrap=NAMES[:3], extra=FLAGS)
        try:
            c.start_all()
            c.wait_for(lambda: _create(c), "the zone to be created")
            wait_converged(c)
            lat: list[float] = []
            for i in range(args.rounds):
                t0 = time.time()
                alter(c, replicas=4 if i % 2 == 0 else 3)
                lat.append(_wait_sent(c, t0) - t0)
                wait_converged(c)
        finally:
            c.close()
    ms = sorted(x * 1000 for x in lat)
    print(f"alter -> Rebalance sent over {len(ms)} rounds: min {ms[0]:.0f} ms, "
          f"median {statistics.median(ms):.0f} ms, max {ms[-1]:.0f} ms")  # fmt: skip
    return 0


def _wait_sent(c: ProcCluster, t0: float) -> float:
    found: list[float] = []

    def check() -> bool:
        at = first_sent_after(c, t0)
        found[:] = [at] if at is not None else []
        return bool(found)

    c.wait_for(check, "a Rebalance request")
    return found[0]


def _create(c: ProcCluster) -> bool:
    try:
        alter(c, replicas=3, partitions=PARTITIONS)
    except (AssertionError, OSError):
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
