"""Benchmark the PySpark pipeline: ingest and analyze throughput, and pandas' limit.

Usage: python bench/pipeline.py [--sizes 1e5,1e6] [--master local[*]] [--dir DIR]
                                [--run-ops 5000] [--sim-runs N | --templates RUN_DIR ...]
                                [--engines rows,spark,columns]
                                [--no-pandas] [--precheck]

For each size N (history events in the whole store), a store of synthetic
runs is laid out: a few template runs from harness.synthetic (real checker
verdicts), copied under fresh run ids until the store holds N events; the
pipeline cares about volume, not variety. Synthetic runs carry about one
audit event per hundred history events; a simulated or Docker run of the
default plan carries about six per ten, and every engine reads those in
Python, so `--sim-runs N` runs the default plan under the simulator N times
(seeds 1..N, about 10 s each) and copies those instead, for the rate a real
store gets; `--templates` takes run directories you already have.
Then, timed: `ingest` (store -> lake), once per ingest engine (`--engines`:
the rows engine, per-run Python, the Spark engine, Spark's JSON reader, and
the columns engine, whole-file msgspec decoding; side by side in one
session, each into a lake of its own, the first paying the session's
warm-up), and `analyze` (lake -> tables + nightly.html), reported as history
events per second with the 1-minute load average at the end of each stage
(the machine may be shared). With the rows engine timed too, every other
engine's line gives its speed as a multiple of the rows engine's: the old
path issue 19's 10x target is a multiple of, and this machine's speed varies
too much from day to day (up to 5x, pipeline/README.md) for any other
comparison. `--precheck` also times the distributed pre-check over one
history of about N events.

For comparison, the pandas route a single process would take (load every
history into one DataFrame, then the latency-by-phase quantiles) runs in a
child process per size, reporting its time and peak memory (max RSS). The
bytes per event it needs, against this machine's memory, say where pandas
alone stops coping. 10^7 events takes a while: pass it explicitly.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.synthetic import make_run  # noqa: E402 - after the path fix above

TEMPLATES = ({"valid": True}, {"valid": False}, {"valid": True, "faults": False})
# What a real run dir holds that ingest never reads (the report and its assets).
_NOT_INGESTED = shutil.ignore_patterns("*.html", "*.png", "*.log", "assets")


def sim_runs(root: Path, count: int) -> list[Path]:
    """`count` simulated runs of the default plan (seeds 1..count) under `root`."""
    for seed in range(1, count + 1):
        cmd = [sys.executable, "-m", "harness.cli", "run", "--backend", "sim", "--seed",
               str(seed), "--store", str(root), "--name", "bench-sim", "--no-progress"]  # fmt: skip
        # Exit 1 is an invalid verdict: still a real run to copy.
        if subprocess.run(cmd, cwd=ROOT, capture_output=True, check=False).returncode > 1:
            sys.exit(f"bench: the simulated run of seed {seed} failed: {' '.join(cmd)}")
    return sorted(p.parent for p in (root / "bench-sim").glob("*/history.jsonl"))


def build_store(
    root: Path, events: int, run_ops: int, real: list[Path] | None = None
) -> tuple[int, int]:
    """A store of about `events` history events; returns (runs, events).
    Copies of the run dirs `real` if given, else of synthetic runs."""
    sources = list(real or [])
    if not sources:
        for i, kw in enumerate(TEMPLATES):
            run = make_run(root / "_templates", seed=i + 1, ops=run_ops, name="bench", **kw)
            sources.append(run.path)
    templates = []
    for src in sources:
        lines = sum(1 for line in (src / "history.jsonl").read_bytes().splitlines() if line.strip())
        templates.append((src, lines))
    total, runs = 0, 0
    while total < events:
        src, lines = templates[runs % len(templates)]
        day = 18 + runs % 3  # three nights, for the trends
        dst = (
            root
            / "bench"
            / f"202611{day}T{runs // 3600 % 24:02d}{runs // 60 % 60:02d}{runs % 60:02d}-{runs}"
        )
        shutil.copytree(src, dst, ignore=_NOT_INGESTED)
        total += lines
        runs += 1
    shutil.rmtree(root / "_templates", ignore_errors=True)
    return runs, total


def pandas_child(store: str) -> None:
    """In a child process: the one-process pandas route; prints JSON figures."""
    import msgspec
    import pandas as pd

    from checkers.history import Event

    started = time.perf_counter()
    decoder = msgspec.json.Decoder(Event)
    frames = []
    for history in sorted(Path(store).glob("bench/*/history.jsonl")):
        rows = [msgspec.structs.asdict(decoder.decode(line))
                for line in history.read_bytes().splitlines() if line.strip()]  # fmt: skip
        df = pd.DataFrame(rows)
        df["run"] = history.parent.name
        frames.append(df)
    events = pd.concat(frames, ignore_index=True)
    loaded = time.perf_counter() - started
    clients = events[events["process"].map(lambda p: isinstance(p, int))]
    inv = clients[clients["type"] == "invoke"][["run", "process", "index", "time"]]
    done = clients[clients["type"] == "ok"][["run", "process", "index", "time"]]
    # Pair each completion with its process's latest invoke before it.
    paired = pd.merge_asof(done.sort_values("index"), inv.sort_values("index"), on="index",
                           by=["run", "process"], suffixes=("", "_inv"))  # fmt: skip
    latency = (paired["time"] - paired["time_inv"]) / 1e6
    q = latency.quantile([0.5, 0.9, 0.99]).tolist()
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"events": len(events), "load_s": loaded,
                      "total_s": time.perf_counter() - started, "max_rss_mb": rss_kb / 1024,
                      "p99_ms": q[2]}))  # fmt: skip


def run_pandas(store: Path) -> dict[str, Any]:
    """The pandas route in a child process (so its peak memory is its own)."""
    out = subprocess.run([sys.executable, __file__, "--pandas-child", str(store)],
                         capture_output=True, text=True, check=False)  # fmt: skip
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["killed"])[-1]}
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def bench_size(spark: Any, base: Path, size: int, args: argparse.Namespace) -> dict[str, Any]:
    """Builds a store of `size` events and times every stage on it."""
    from pipeline.analyze import analyze
    from pipeline.ingest import ingest

    store, lake = base / f"store-{size}", base / f"lake-{size}"
    t = time.perf_counter()
    runs, events = build_store(store, size, args.run_ops, args.templates)
    row: dict[str, Any] = {"size": size, "runs": runs, "events": events,
                           "build_s": time.perf_counter() - t}  # fmt: skip
    if args.spark:
        # Each engine into a lake of its own, the same store, one session; the
        # last engine's lake is analyzed.
        for engine in args.engines.split(","):
            lake = base / f"lake-{size}-{engine}"
            t = time.perf_counter()
            report = ingest(spark, store, lake, engine=engine)
            row[f"ingest_{engine}_s"] = time.perf_counter() - t
            row[f"ingest_{engine}_load"] = os.getloadavg()[0]
            assert report.ingested == runs, report
            if engine != args.engines.split(",")[-1]:
                shutil.rmtree(lake)
        t = time.perf_counter()
        analyze(spark, lake)
        row["analyze_s"] = time.perf_counter() - t
        row["analyze_load"] = os.getloadavg()[0]
    if args.precheck:
        from pipeline.precheck import precheck

        big = base / f"history-{size}.jsonl"
        _concat_one_history(store, big, size)
        t = time.perf_counter()
        result = precheck(spark, big)
        row["precheck_s"], row["precheck_events"] = time.perf_counter() - t, result.events
    if args.pandas:
        row["pandas"] = run_pandas(store)
    shutil.rmtree(store)
    shutil.rmtree(lake, ignore_errors=True)
    return row


def _concat_one_history(store: Path, out: Path, size: int) -> None:
    """One valid history of about `size` events (runs' keys and indices made disjoint)."""
    import msgspec

    written, offset = 0, 0
    with out.open("wb") as fh:
        for n, history in enumerate(sorted(store.glob("bench/*/history.jsonl"))):
            results = json.loads((history.parent / "results.json").read_text())
            if results["checkers"]["linearizable"]["valid"] is not True:
                continue
            last = 0
            for line in history.read_bytes().splitlines():
                ev = msgspec.json.decode(line)
                ev["index"] += offset
                ev["time"] += offset * 1000
                if isinstance(ev["process"], int):
                    ev["process"] += n * 1_000_000
                if ev.get("key") is not None:
                    ev["key"] = f"{n}/{ev['key']}"
                last = ev["index"]
                fh.write(msgspec.json.encode(ev) + b"\n")
                written += 1
            offset = last + 1
            if written >= size:
                return


def main() -> int:
    """Runs the benchmark and prints a table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1e5,1e6", help="history events per store, comma-separated")
    p.add_argument("--master", default="local[*]")
    p.add_argument("--dir", type=Path, help="scratch directory (default: a temp dir)")
    p.add_argument("--run-ops", type=int, default=5000, help="client ops per template run")
    real = p.add_mutually_exclusive_group()
    real.add_argument(
        "--sim-runs",
        type=int,
        metavar="N",
        help="copy N simulated runs of the default plan, not synthetic runs",
    )
    real.add_argument("--templates", type=Path, nargs="+",
                      help="real run dirs to copy instead of synthetic runs")  # fmt: skip
    p.add_argument("--engines", default="rows,spark,columns",
                   help="ingest engines to time, in order (pipeline.ingest.ENGINES)")  # fmt: skip
    p.add_argument("--no-pandas", dest="pandas", action="store_false")
    p.add_argument("--no-spark", dest="spark", action="store_false",
                   help="skip ingest and analyze (pandas and/or precheck only)")  # fmt: skip
    p.add_argument("--precheck", action="store_true", help="also time the distributed pre-check")
    p.add_argument("--pandas-child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.pandas_child:
        pandas_child(args.pandas_child)
        return 0
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    for t in args.templates or []:
        if not (t / "history.jsonl").is_file():
            p.error(f"--templates: {t} is not a run dir (no history.jsonl)")
    if args.dir is not None:
        try:
            args.dir.mkdir(parents=True, exist_ok=True)  # a scratch dir: made if missing
        except OSError as exc:
            p.error(f"--dir: cannot make {args.dir}: {exc.strerror}")
    from pipeline.session import spark_session

    spark = spark_session(args.master)
    base = Path(tempfile.mkdtemp(prefix="faultline-bench-", dir=args.dir))
    try:
        if args.sim_runs:
            args.templates = sim_runs(base / "sim", args.sim_runs)
        kind = f"copies of {len(args.templates)} real runs" if args.templates else "synthetic runs"
        print(f"cores: {os.cpu_count()}, memory: {_mem_gb():.1f} GB, master: {args.master}, "
              f"store: {kind}")  # fmt: skip
        for size in sizes:
            row = bench_size(spark, base, size, args)
            print(_format(row), flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        spark.stop()
    return 0


def _mem_gb() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def _format(row: dict[str, Any]) -> str:
    n = row["events"]
    lines = [f"{n:>10,} events in {row['runs']} runs (built in {row['build_s']:.1f} s)"]
    stages = [
        k.removesuffix("_s")
        for k in row
        if k.startswith(("ingest_", "analyze")) and k.endswith("_s")
    ]
    old_path = row.get("ingest_rows_s")  # the rows engine: the path issue 19's 10x is measured on
    for stage in stages:
        took, load = row[f"{stage}_s"], row[f"{stage}_load"]
        ratio = ""
        if old_path and stage.startswith("ingest_") and stage != "ingest_rows":
            ratio = f"  {old_path / took:.1f}x the rows engine"
        lines.append(
            f"  {stage:<14}: {took:7.1f} s  {n / took:>10,.0f} events/s  (load {load:.1f}){ratio}"
        )
    if "precheck_s" in row:
        m = row["precheck_events"]
        lines.append(f"  precheck one history of {m:,} events: {row['precheck_s']:.1f} s "
                     f"({m / row['precheck_s']:,.0f} events/s)")  # fmt: skip
    pd_row = row.get("pandas")
    if pd_row and "error" in pd_row:
        lines.append(f"  pandas : failed: {pd_row['error']}")
    elif pd_row:
        per_event = pd_row["max_rss_mb"] * 2**20 / n
        limit = _mem_gb() * 2**30 / per_event
        lines.append(f"  pandas : {pd_row['total_s']:7.1f} s  {n / pd_row['total_s']:>10,.0f} "
                     f"events/s, peak {pd_row['max_rss_mb']:,.0f} MB ({per_event:,.0f} B/event: "
                     f"this machine's RAM holds ~{limit:,.0f} events)")  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
