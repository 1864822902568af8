"""What the harness records vs what ember serves: ops/s on one 3-node loopback cluster.

Usage: python bench/harness_throughput.py [--seconds S] [--clients N] [--partitions P]

Starts three real `ember-node` processes (as bench/node_throughput.py does,
with fsync), then measures, for `--seconds` each:

1. direct: `--clients` bare client loops doing puts and gets (the
   throughput of bench/node_throughput.py, the mix of this workload);
2. harness: the register workload (get / put / cas) driven by the
   interpreter with `--clients` client threads at an unreachable rate, every
   op written to a flushed history.jsonl: what a `faultline run` records.

Prints both, acknowledged ops per second, and the ratio. Processes and
directories are cleaned up at exit.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from checkers.history import load_history, pair
from ember.client import EmberClient
from harness.history_writer import HistoryWriter
from harness.interpreter import Interpreter, Worker
from tests.node.cluster import ProcCluster
from workloads.generator import Stagger, TimeLimit
from workloads.register import RegisterWorker, key_names, register_ops


async def direct(urls: list[str], seconds: float, clients: int, partitions: int) -> int:
    """Acknowledged ops of bare client loops (half puts, half gets)."""
    ok = 0
    deadline = time.monotonic() + seconds
    keys = key_names(40)

    async def loop(i: int) -> None:
        nonlocal ok
        rng = random.Random(i)
        async with EmberClient(urls, partitions=partitions) as c:
            while time.monotonic() < deadline:
                key = rng.choice(keys)
                out = await (c.put(key, i) if rng.random() < 0.5 else c.get(key))
                ok += out.ok

    await asyncio.gather(*(loop(i) for i in range(clients)))
    return ok


async def harness(
    urls: list[str], seconds: float, clients: int, partitions: int, history: Path
) -> tuple[int, int]:
    """(ok ops, events) the interpreter records driving the register workload."""
    sessions = [EmberClient(urls, partitions=partitions) for _ in range(clients)]
    workers: dict[int | str, Worker] = {i: RegisterWorker(c, {}) for i, c in enumerate(sessions)}
    gen = TimeLimit(seconds, Stagger(1e-6, register_ops(random.Random(1)), random.Random(2)))
    with HistoryWriter(history) as writer:
        interp = Interpreter({"client": list(range(clients))}, workers, writer)
        await interp.run({"client": gen})
        events = writer.count
    for c in sessions:
        await c.close()
    ok = sum(op.type == "ok" for op in pair(load_history(history)))
    return ok, events


def main() -> int:
    """Run both measurements and print them."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="per measurement (30)")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients (16)")
    parser.add_argument("--partitions", type=int, default=8, help="KV partitions (8)")
    args = parser.parse_args()
    if args.seconds <= 0 or args.clients < 1 or args.partitions < 1:
        print("error: --seconds, --clients and --partitions must be positive", file=sys.stderr)
        return 2
    console = Console()
    root = Path(tempfile.mkdtemp(prefix="faultline-bench-"))
    cluster = ProcCluster(root, ["n1", "n2", "n3"], extra=["--partitions", str(args.partitions)])
    try:
        cluster.start_all()
        urls = cluster.urls()
        console.print(f"3 nodes up; {args.clients} clients, {args.seconds:g}s each")
        # Warm up first (leaders settle, connections open), so the order of
        # the two measurements does not decide which one looks faster.
        asyncio.run(direct(urls, min(5.0, args.seconds), args.clients, args.partitions))
        d_ok = asyncio.run(direct(urls, args.seconds, args.clients, args.partitions))
        h_ok, events = asyncio.run(
            harness(urls, args.seconds, args.clients, args.partitions, root / "history.jsonl")
        )
    finally:
        cluster.close()
        shutil.rmtree(root, ignore_errors=True)
    table = Table(title="ops/s acknowledged")
    for col in ("path", "ok ops", "ok/s"):
        table.add_column(col)
    table.add_row("ember directly", str(d_ok), f"{d_ok / args.seconds:.0f}")
    table.add_row("harness (history)", str(h_ok), f"{h_ok / args.seconds:.0f}")
    console.print(table)
    console.print(f"harness records {h_ok / max(d_ok, 1):.0%} of direct ({events} events)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
