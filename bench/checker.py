"""Benchmark of the linearizability checker.

0. Side by side with porcupine (bench/porcupine_side.py), each checker as a
   whole process, on every porcupine fixture check and on the hard register
   histories of bench/hard_histories.py: wall times, the ratio ours /
   porcupine per history, its geometric mean and the sums. porcupine v1.3.0
   is built from its source (--porcupine-src, a checkout of its v1.3.0 tag)
   with the machine's Go (Debian: apt-get install golang-go); without them
   its recorded check times stand in, and the table says so. Column
   `floor` is a bare interpreter's process (`python -I -S -c pass`) over
   porcupine's: its geo-mean bounds what any Python checker started once
   per history can reach, however fast its imports and search.
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

Usage: .venv/bin/python bench/checker.py [--porcupine-src DIR] [--hard DIR]
       [--skip-side-by-side] [--skip-fixtures] [--skip-generated]
       [--sizes 1000,10000,100000] [--keys 10,100,1000] [--clients 5,50]
       [--append-rate 0.0] [--workers 1] [--time-limit 60]
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.porcupine_side import build_porcupine, geomean, run_ours, run_porcupine
from checkers.history import load_history, pair
from checkers.importers.porcupine import FixtureFormatError, load
from checkers.linear import model_ops
from checkers.linearizability import MODELS, LinOp, check, ops_from_history
from checkers.linearizability.check import prepare
from checkers.linearizability.synth import SynthSpec, synthesize
from tests.paths import PORCUPINE_FIXTURES

FIXTURES = PORCUPINE_FIXTURES


def _tsv(path: Path) -> list[list[str]]:
    return [line.split("\t") for line in path.read_text().splitlines() if not line.startswith("#")]


def _median_time(ops: Any, model: str, limit_s: float) -> tuple[float, float, Any]:
    """Median wall and CPU seconds of up to 5 checks (at least one)."""
    walls: list[float] = []
    cpus: list[float] = []
    result = None
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


def _side_cases(hard: Path | None) -> list[tuple[Path, str, str, str]]:
    """(file, model, format, expected) for every side-by-side history."""
    cases = []
    for path, model, expected, _ in _tsv(FIXTURES / "expected_verdicts.tsv"):
        if expected in ("linearizable", "not-linearizable"):
            cases.append((FIXTURES / path, model, "porcupine", expected))
    if hard is not None:
        for name, model, expected in _tsv(hard / "manifest.tsv"):
            cases.append((hard / name, model, "faultline", expected))
    return cases


def _lin_ops(path: Path, model: str, fmt: str) -> list[LinOp]:
    """The ops our checker sees, for porcupine to check too."""
    if fmt == "porcupine":
        ops = load(path)[1]
    else:
        ops = ops_from_history(model_ops(pair(load_history(path))), model)
    return prepare(ops, MODELS[model])


def interpreter_floor(runs: int = 15) -> float:
    """Median wall seconds of a process of this interpreter that does nothing:
    no site, no user environment, no imports of ours."""
    walls = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-I", "-S", "-c", "pass"], check=True)
        walls.append(time.perf_counter() - start)
    return statistics.median(walls)


def bench_side_by_side(opts: argparse.Namespace) -> None:
    """Print ours vs porcupine as whole processes, per history and geo-mean."""
    binary = None
    if opts.porcupine_src is not None:
        binary = build_porcupine(opts.porcupine_src, Path(tempfile.mkdtemp(prefix="porc-")))
    recorded = {(r[0], r[1]): float(r[3]) for r in _tsv(FIXTURES / "porcupine_times.tsv")[1:]}
    theirs_how = "porcupine process wall" if binary else "porcupine RECORDED check time"
    floor = interpreter_floor()
    print(f"# bare interpreter ({sys.executable} -I -S -c pass): {floor * 1000:.1f} ms, "
          "the least any Python checker's process can take")  # fmt: skip
    print(f"{'history':34} {'model':10} {'expected':16} {'ours':16} {'ours_s':>8} "
          f"{'porcupine':16} {'porc_s':>8} {'ratio':>7} {'floor':>7}   ({theirs_how})")  # fmt: skip
    ratios, floors, ours_sum, theirs_sum, wrong = [], [], 0.0, 0.0, 0
    for path, model, fmt, expected in _side_cases(opts.hard):
        wall, _, verdict = run_ours(path, model, fmt, opts.time_limit)
        if binary is not None:
            ops = _lin_ops(path, model, fmt)
            p_wall, _, p_verdict = run_porcupine(binary, ops, model.endswith("nopart"),
                                                 opts.time_limit)  # fmt: skip
        else:
            rel = f"{path.parent.name}/{path.name}"
            p_wall, p_verdict = recorded.get((rel, model), float("nan")), "(recorded)"
        wrong += verdict not in (expected, "unknown")
        ratio = wall / p_wall if p_verdict != "unknown" else float("nan")
        if verdict != "unknown" and p_verdict != "unknown":
            ratios.append(ratio)
            floors.append(floor / p_wall)
            ours_sum += wall
            theirs_sum += p_wall
        name = f"{path.parent.name}/{path.name}"[-34:]
        print(f"{name:34} {model:10} {expected:16} {verdict:16} {wall:8.3f} {p_verdict:16} "
              f"{p_wall:8.3f} {ratio:7.2f} {floor / p_wall:7.2f}", flush=True)  # fmt: skip
    print(f"geo-mean ours/porcupine over {len(ratios)} histories both decided: "
          f"{geomean(ratios):.2f}x; sums {ours_sum:.1f} s vs {theirs_sum:.1f} s "
          f"({ours_sum / theirs_sum if theirs_sum else float('nan'):.2f}x); "
          f"our wrong verdicts: {wrong}")  # fmt: skip
    # The bound: a Python checker whose imports, parsing and search cost
    # nothing still starts an interpreter for every history.
    print(f"geo-mean of the bare interpreter / porcupine over the same histories: "
          f"{geomean(floors):.2f}x (no Python checker run as a process per history "
          "can do better)")  # fmt: skip


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
    parser.add_argument("--porcupine-src", type=Path, help="porcupine v1.3.0 source dir")
    parser.add_argument("--hard", type=Path, help="dir of bench/hard_histories.py output")
    parser.add_argument("--skip-side-by-side", action="store_true")
    parser.add_argument("--skip-fixtures", action="store_true")
    parser.add_argument("--skip-generated", action="store_true")
    parser.add_argument("--sizes", type=_ints, default=[1_000, 10_000, 100_000])
    parser.add_argument("--keys", type=_ints, default=[10, 100, 1_000])
    parser.add_argument("--clients", type=_ints, default=[5, 50])
    parser.add_argument("--append-rate", type=float, default=0.0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--time-limit", type=float, default=60.0)
    opts = parser.parse_args()
    if not opts.skip_side_by_side:
        bench_side_by_side(opts)
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
