"""Benchmark of the linearizability checker.

1. Every porcupine fixture check (expected_verdicts.tsv): our check time
   (median of several runs; parsing excluded, as in porcupine_times.tsv)
   beside porcupine v1.3.0's, and the ratio ours / porcupine.
2. Generated linearizable histories (checkers/linearizability/synth.py) of
   1k, 10k and 100k operations over 10 to 1,000 keys with Zipf-skewed key
   popularity, 5 or 50 clients and 1% unknown (info) operations: our check
   time and the checking process's peak RSS (VmHWM), each case in a fresh
   process so peaks do not carry over. The default mix is get/put/cas
   (a register per key, as Jepsen's cas-register workloads); --append-rate
   0.15 adds appends, whose orders a hot key with many clients makes much
   harder to search (docs/models.md, "Limits").

Usage: .venv/bin/python bench/checker.py [--skip-fixtures] [--skip-generated]
       [--sizes 1000,10000,100000] [--keys 10,100,1000] [--clients 5,50]
       [--append-rate 0.0] [--workers 1] [--time-limit 60]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from checkers.importers.porcupine import FixtureFormatError, load
from checkers.linearizability import MODELS, check
from checkers.linearizability.synth import SynthSpec, synthesize
from tests.paths import PORCUPINE_FIXTURES

FIXTURES = PORCUPINE_FIXTURES


def _tsv(path: Path) -> list[list[str]]:
    return [line.split("\t") for line in path.read_text().splitlines() if not line.startswith("#")]


def _median_time(ops: Any, model: str, limit_s: float) -> tuple[float, float, Any]:
    """Median wall and CPU seconds of up to 5 checks (at least one)."""
    walls, cpus, result = [], [], None
    deadline = time.perf_counter() + 5.0
    while len(walls) < 5 and (not walls or time.perf_counter() < deadline):
        start, cpu = time.perf_counter(), time.process_time()
        result = check(ops, model, time_limit_s=limit_s, workers=1)
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus), result


def bench_fixtures(limit_s: float) -> None:
    """Print ours vs porcupine per fixture check, and totals. The ratio uses
    our CPU time: on a shared machine wall time measures the neighbours."""
    theirs = {(r[0], r[1]): float(r[3]) for r in _tsv(FIXTURES / "porcupine_times.tsv")[1:]}
    print(
        f"{'file':24} {'model':10} {'verdict':8} {'wall_s':>9} {'cpu_s':>9} "
        f"{'porcupine_s':>11} {'cpu/porc':>8}"
    )
    wall_total = cpu_total = theirs_total = 0.0
    wrong = 0
    for path, model, expected, _ in _tsv(FIXTURES / "expected_verdicts.tsv"):
        if expected not in ("linearizable", "not-linearizable"):
            continue
        _, ops = load(FIXTURES / path)
        wall, cpu, result = _median_time(ops, model, limit_s)
        want = expected == "linearizable"
        verdict = {True: "ok", False: "bad", "unknown": "unknown"}[result.valid]
        wrong += result.valid is not want
        por = theirs.get((path, model), float("nan"))
        wall_total += wall
        cpu_total += cpu
        theirs_total += por
        print(
            f"{path:24} {model:10} {verdict:8} {wall:9.5f} {cpu:9.5f} {por:11.6f} {cpu / por:8.2f}",
            flush=True,
        )
    print(
        f"{'TOTAL':24} {'':10} {'':8} {wall_total:9.3f} {cpu_total:9.3f} {theirs_total:11.3f} "
        f"{cpu_total / theirs_total:8.2f}   verdicts wrong: {wrong}"
    )


def _peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _run_generated(
    args: tuple[SynthSpec, int, float],
) -> tuple[Any, float, float, float, float, str]:
    spec, workers, limit_s = args
    ops = synthesize(spec, MODELS[spec.model])
    before = _peak_rss_mb()
    start, cpu = time.perf_counter(), time.process_time()
    result = check(ops, spec.model, time_limit_s=limit_s, workers=workers)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    hottest = max(result.partition_results, key=lambda p: p.ops, default=None)
    note = "" if hottest is None else f"hottest key {hottest.ops} ops: {hottest.valid}"
    return result.valid, elapsed, cpu, before, _peak_rss_mb(), note


def bench_generated(opts: argparse.Namespace) -> None:
    """Print time and peak memory for generated histories."""
    ctx = multiprocessing.get_context("spawn")
    print(
        f"{'ops':>7} {'keys':>5} {'clients':>7} {'verdict':>8} {'wall_s':>8} {'cpu_s':>8} "
        f"{'rss_before_mb':>13} {'peak_rss_mb':>11}  note"
    )
    for n in opts.sizes:
        for keys in opts.keys:
            for clients in opts.clients:
                spec = SynthSpec(
                    model="kv", ops=n, keys=keys, clients=clients, info_rate=0.01,
                    append_rate=opts.append_rate, seed=n + keys + clients,
                )  # fmt: skip
                with ctx.Pool(1) as pool:
                    valid, elapsed, cpu, before, peak, note = pool.apply(
                        _run_generated, ((spec, opts.workers, opts.time_limit),)
                    )
                print(
                    f"{n:7} {keys:5} {clients:7} {valid!s:>8} {elapsed:8.2f} {cpu:8.2f} "
                    f"{before:13.0f} {peak:11.0f}  {note}",
                    flush=True,
                )


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main() -> int:
    """Run the benchmark; exit 2 on bad arguments or missing fixtures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--skip-fixtures", action="store_true")
    parser.add_argument("--skip-generated", action="store_true")
    parser.add_argument("--sizes", type=_ints, default=[1_000, 10_000, 100_000])
    parser.add_argument("--keys", type=_ints, default=[10, 100, 1_000])
    parser.add_argument("--clients", type=_ints, default=[5, 50])
    parser.add_argument("--append-rate", type=float, default=0.0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--time-limit", type=float, default=60.0)
    opts = parser.parse_args()
    if not opts.skip_fixtures:
        if not (FIXTURES / "expected_verdicts.tsv").exists():
            print(f"error: fixtures not found in {FIXTURES}", file=sys.stderr)
            return 2
        try:
            bench_fixtures(opts.time_limit)
        except FixtureFormatError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    if not opts.skip_generated:
        bench_generated(opts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
