"""Many seeds of one plan under `faultline run` (the simulator by default): verdicts at a glance.

    python bench/sim_sweep.py --seeds 1-100 [--workers 2] [--time-limit 60]
                              [--backend sim|docker] [--failpoint NAME] [--store DIR]
                              [-- EXTRA RUN FLAGS]

Each seed is one `faultline run` process (a fresh interpreter, as a user
would run it); `--workers` run at once. Prints, per verdict, the seeds, and
for every invalid or unknown seed its first reason and replay command (for a
run that never started, `error`, the last line it printed), then
the wall time per run, every anomaly kind with the seeds that showed it, and
per fault kind how many faults were applied out of those drawn (a fault
that completed `info` applied nothing). `--backend docker --workers 1 --
--db etcd --workload metastore,change-peers` is issue 24's N-seed table
against the image's etcd. The nightly form of issue 14's "the clean tree stays
valid over 100 seeds"; `--failpoint` gives the planted-defect form.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from rich.progress import Progress

from nemesis.generator import HEAL_OF

FAULTS = frozenset(HEAL_OF)


def _seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def _one(seed: int, args: argparse.Namespace, extra: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "harness.cli", "run", "--backend", args.backend,
           "--seed", str(seed), "--time-limit", str(args.time_limit), "--store", str(args.store),
           "--no-progress",
           "--name", args.name]  # fmt: skip
    for fp in args.failpoint or ():
        cmd += ["--failpoint", fp]
    started = time.perf_counter()
    proc = subprocess.run([*cmd, *extra], capture_output=True, text=True, check=False)
    took = time.perf_counter() - started
    run_dir = next((ln.split(" ", 1)[1] for ln in proc.stdout.splitlines()
                    if ln.startswith("store ")), None)  # fmt: skip
    reasons: list[str] = []
    kinds: Counter[str] = Counter()
    faults: dict[str, list[int]] = {}
    if run_dir and (Path(run_dir) / "results.json").is_file():
        doc = json.loads((Path(run_dir) / "results.json").read_text())
        reasons = [r for r in doc.get("reasons", []) if not r.startswith("note:")]
        for name, res in doc.get("checkers", {}).items():
            if res.get("valid") is False and res.get("anomalies"):
                reasons.append(f"{name}: {res['anomalies'][0].get('message', '')[:160]}")
            for anomaly in res.get("anomalies") or ():
                kinds[f"{name}: {anomaly.get('kind', '?')}"] += 1
        faults = _faults(Path(run_dir) / "history.jsonl")
    verdict = {0: "valid", 1: "invalid"}.get(proc.returncode, "unknown")
    if verdict == "unknown" and run_dir is None:
        verdict = "error"  # exit 2 is also a run that never started (a bad flag, no engine)
    if verdict != "valid" and not reasons:
        reasons = [(proc.stderr.strip().splitlines() or ["?"])[-1]]
    return {"seed": seed, "verdict": verdict, "wall_s": took, "run": run_dir, "reasons": reasons,
            "kinds": kinds, "faults": faults}  # fmt: skip


def _faults(history: Path) -> dict[str, list[int]]:
    """Per fault kind: [applied, drawn], from the nemesis's completions."""
    out: dict[str, list[int]] = {}
    if not history.is_file():
        return out
    for line in history.read_text().splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue  # a torn last line: the run's own checkers say so
        if e.get("process") != "nemesis" or e.get("type") not in ("ok", "info"):
            continue
        if e.get("f") not in FAULTS:
            continue
        counts = out.setdefault(str(e["f"]), [0, 0])
        counts[1] += 1
        counts[0] += e["type"] == "ok"
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="1-20")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--time-limit", type=float, default=60.0)
    p.add_argument("--backend", choices=("sim", "docker"), default="sim")
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
    results.sort(key=lambda r: int(r["seed"]))
    for verdict in ("valid", "invalid", "unknown", "error"):
        these = [r for r in results if r["verdict"] == verdict]
        print(f"{verdict}: {len(these)}  {' '.join(str(r['seed']) for r in these)}")
    for r in results:
        if r["verdict"] != "valid":
            print(f"  seed {r['seed']} {r['verdict']}: {'; '.join(r['reasons'][:3])}")
            if r["run"] is not None:
                print(f"    replay: faultline replay {r['run']}")
    kinds: Counter[str] = Counter()
    seeds_of: dict[str, list[int]] = {}
    faults: dict[str, list[int]] = {}
    for r in results:
        for kind, n in r["kinds"].items():
            kinds[kind] += n
            seeds_of.setdefault(kind, []).append(int(r["seed"]))
        for f, (ok, drawn) in r["faults"].items():
            total = faults.setdefault(f, [0, 0])
            total[0] += ok
            total[1] += drawn
    for kind, n in kinds.most_common():
        print(f"anomaly {kind}: {n} in seeds {' '.join(map(str, seeds_of[kind]))}")
    print("faults applied: " + (", ".join(f"{f} {ok}/{drawn}" for f, (ok, drawn)
                                          in sorted(faults.items())) or "none"))  # fmt: skip
    walls = sorted(float(r["wall_s"]) for r in results)
    print(f"wall per run: min {walls[0]:.1f} s, median {walls[len(walls) // 2]:.1f} s, "
          f"max {walls[-1]:.1f} s")  # fmt: skip
    return 0 if all(r["verdict"] == "valid" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
