"""Benchmark a 3-node ember cluster on loopback: put/get ops/s and latency.

Usage: python bench/node_throughput.py [--seconds S] [--clients N]
                                       [--partitions P] [--modes nofsync,fsync]
                                       [--node-args ARG...]

Starts three real `ember-node` processes (free ports, temp data dirs), then
for each mode runs a put phase and a get phase of `--seconds` each with
`--clients` concurrent clients (one asyncio task each, all in this process,
each with its own keep-alive connections: `bench/lean_client.py`, or
`ember.client.EmberClient` with `--client ember`), and prints acknowledged operations per
second with p50/p99 latency, and the CPU the three nodes spent per
acknowledged operation (from /proc: comparable even on a busy machine,
where ops/s are not), and the CPU this client process spent per operation
(it shares the machine's cores with the nodes, so it caps ops/s too). Modes:

- `fsync`: the default node: every batch (one round of the node loop, all
  groups together) is fdatasync'd before anything is acknowledged.
- `nofsync`: the same with `--unsafe-no-fsync`, to show the CPU-bound
  ceiling (Raft, HTTP, transport) without the disk.

Reads are linearizable by ReadIndex: one heartbeat round per batch of
reads, no log entry and no fsync. Every process is killed and every directory removed at exit.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.lean_client import LeanClient
from ember.client import EmberClient
from tests.node.cluster import ProcCluster

KEYS = 1000
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def _cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds used so far by `pids` (Linux /proc)."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / _TICKS_PER_S


async def _phase(
    urls: list[str], op: str, seconds: float, clients: int, partitions: int, lean: bool = True
) -> tuple[int, int, int, list[float]]:
    """Run `clients` loops of `op` for `seconds`; (ok, fail, unknown, latencies_s)."""
    counts = {"ok": 0, "fail": 0, "unknown": 0}
    latencies: list[float] = []
    deadline = time.monotonic() + seconds

    async def loop(i: int) -> None:
        if lean:
            await lean_loop(i)
            return
        rng = random.Random(i)
        async with EmberClient(urls, timeout_s=5.0, partitions=partitions) as c:
            while time.monotonic() < deadline:
                key = f"k{rng.randrange(KEYS)}"
                start = time.perf_counter()
                out = await (c.put(key, i) if op == "put" else c.get(key))
                counts[out.type] += 1
                if out.type == "ok":
                    latencies.append(time.perf_counter() - start)

    async def lean_loop(i: int) -> None:
        rng = random.Random(i)
        async with LeanClient(urls, timeout_s=5.0, partitions=partitions) as c:
            while time.monotonic() < deadline:
                key = f"k{rng.randrange(KEYS)}"
                start = time.perf_counter()
                kind = await (c.put(key, i) if op == "put" else c.get(key))
                counts[kind] += 1
                if kind == "ok":
                    latencies.append(time.perf_counter() - start)

    await asyncio.gather(*(loop(i) for i in range(clients)))
    return counts["ok"], counts["fail"], counts["unknown"], latencies


def _run_mode(
    root: Path, mode: str, args: argparse.Namespace, console: Console
) -> list[tuple[str, ...]]:
    extra = ["--partitions", str(args.partitions), "--log-level", "WARNING", *args.node_args]
    if mode == "nofsync":
        extra.append("--unsafe-no-fsync")
    cluster = ProcCluster(root / mode, ["n1", "n2", "n3"], extra=extra)
    rows: list[tuple[str, ...]] = []
    try:
        cluster.start_all()
        for p in range(args.partitions):
            cluster.wait_leader(f"part-{p}")
        for op in ("put", "get"):
            console.print(f"[dim]{mode}: {op} phase, {args.seconds:.0f}s...[/dim]")
            pids = [p.pid for p in cluster.procs.values()]
            cpu_before, client_before = _cpu_s(pids), time.process_time()
            ok, fail, unknown, lat = asyncio.run(
                _phase(
                    cluster.urls(),
                    op,
                    args.seconds,
                    args.clients,
                    args.partitions,
                    args.client == "lean",
                )
            )
            cpu_ms_per_op = (_cpu_s(pids) - cpu_before) * 1000 / max(ok, 1)
            client_ms_per_op = (time.process_time() - client_before) * 1000 / max(ok, 1)
            lat_ms = sorted(x * 1000 for x in lat) or [float("nan")]
            p99 = lat_ms[min(len(lat_ms) - 1, int(len(lat_ms) * 0.99))]
            rows.append(
                (
                    mode,
                    op,
                    f"{ok / args.seconds:,.0f}",
                    f"{statistics.median(lat_ms):.1f}",
                    f"{p99:.1f}",
                    f"{fail}/{unknown}",
                    f"{cpu_ms_per_op:.2f}",
                    f"{client_ms_per_op:.2f}",
                )
            )
        for n in cluster.names:
            st = cluster.status(n)
            console.print(
                f"[dim]{mode} {n}: {st['rounds']} rounds, {st['storage']['sync_rounds']} "
                f"synced, {st['storage']['sync_ms_avg']} ms per durable commit[/dim]"
            )
    finally:
        cluster.close()
    return rows


def main() -> int:
    """Parse flags, run the modes, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="per phase (default 10)")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients (default 16)")
    parser.add_argument("--partitions", type=int, default=8, help="KV partitions (default 8)")
    parser.add_argument("--modes", default="nofsync,fsync", help="comma-separated: nofsync,fsync")
    parser.add_argument(
        "--client",
        choices=("lean", "ember"),
        default="lean",
        help="lean: bench/lean_client.py (default); ember: ember.client.EmberClient (aiohttp)",
    )
    parser.add_argument(
        "--node-args",
        nargs=argparse.REMAINDER,
        default=[],
        help="the rest of the line goes to every ember-node (e.g. --tick-ms 100)",
    )
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    bad = [m for m in modes if m not in ("nofsync", "fsync")]
    if bad or args.seconds <= 0 or args.clients < 1 or args.partitions < 1:
        print(f"node_throughput: bad arguments {bad or ''} (modes: nofsync,fsync)", file=sys.stderr)
        return 2
    console = Console()
    root = Path(tempfile.mkdtemp(prefix="ember-bench-"))
    table = Table(title=f"ember 3-node loopback, {args.clients} clients, {args.partitions} parts")
    cols = (
        "mode",
        "op",
        "acked ops/s",
        "p50 ms",
        "p99 ms",
        "fail/unknown",
        "node CPU ms/op",
        "client CPU ms/op",
    )
    for col in cols:
        table.add_column(col, justify="right")
    try:
        for mode in modes:
            for row in _run_mode(root, mode, args, console):
                table.add_row(*row)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
