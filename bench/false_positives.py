"""How often the checkers cry wolf: the default plan on the clean tree, N sim seeds.

    python bench/false_positives.py [--seeds 200 | --seeds 1-50,80] [--workers 2]
                                    [--backend sim|docker] [--store DIR] [-- EXTRA RUN FLAGS]

Each seed is one `faultline run --backend sim` process of the default plan
(what a new user runs). For every checker it prints how many runs it judged
invalid, unknown and valid, then every invalid or unknown verdict with its
first anomaly kind and the catalog rule that kind reports, and the replay
command. The target is 0 invalid and 0 unknown for every checker: on the
clean tree any invalid verdict is a false positive (or a real ember bug to
chase with its replay). `--seeds N` means seeds 1..N; a range list names
them. `--results` reads an earlier store instead of running. `--backend
docker --seeds 10 --workers 1` is the same figure on Docker (3-5 min a run).
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from checkers.catalog import rule_of  # noqa: E402 -- after the path fix, run as a script


def _seeds(text: str) -> list[int]:
    if text.isdigit():
        return list(range(1, int(text) + 1))
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def _run(seed: int, store: Path, extra: list[str], backend: str = "sim") -> dict[str, Any]:
    cmd = [sys.executable, "-m", "harness.cli", "run", "--backend", backend, "--seed", str(seed),
           "--store", str(store), "--no-progress", "--name", "false-positives", *extra]  # fmt: skip
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=ROOT)
    run_dir = next((ln.split(" ", 1)[1] for ln in proc.stdout.splitlines()
                    if ln.startswith("store ")), None)  # fmt: skip
    out: dict[str, Any] = {"seed": seed, "wall_s": time.perf_counter() - started, "run": run_dir,
                           "exit": proc.returncode, "checkers": {}}  # fmt: skip
    results = Path(run_dir) / "results.json" if run_dir else None
    if results is None or not results.is_file():
        out["error"] = (proc.stderr.strip().splitlines() or ["no results.json"])[-1]
        return out
    doc = json.loads(results.read_text())
    for name, res in doc.get("checkers", {}).items():
        kinds = [a.get("kind") for a in res.get("anomalies") or []]
        out["checkers"][name] = {"valid": res.get("valid"), "kinds": kinds,
                                 "error": res.get("error")}  # fmt: skip
    return out


def _stored(path: Path) -> dict[str, Any]:
    """One earlier run's verdicts, as `_run` returns them."""
    doc = json.loads(path.read_text())
    checkers = {}
    for name, res in doc.get("checkers", {}).items():
        kinds = [a.get("kind") for a in res.get("anomalies") or []]
        checkers[name] = {"valid": res.get("valid"), "kinds": kinds, "error": res.get("error")}
    return {"seed": doc.get("seed") or 0, "run": str(path.parent), "checkers": checkers}


def _word(valid: Any) -> str:
    return "valid" if valid is True else "invalid" if valid is False else "unknown"


def report(runs: list[dict[str, Any]], plan: str) -> int:
    """Prints the per-checker table and the non-valid verdicts; 1 if any.
    `plan` says what ran: the table's first line repeats it."""
    table: dict[str, Counter[str]] = {}
    for r in runs:
        for name, res in r["checkers"].items():
            table.setdefault(name, Counter())[_word(res["valid"])] += 1
    errors = [r for r in runs if "error" in r]
    print(f"{len(runs)} seeds, {plan}"
          + (f"; {len(errors)} runs left no verdict" if errors else ""))  # fmt: skip
    print(f"{'checker':<14} {'invalid':>8} {'unknown':>8} {'valid':>8}")
    for name in sorted(table):
        c = table[name]
        print(f"{name:<14} {c['invalid']:>8} {c['unknown']:>8} {c['valid']:>8}")
    bad = 0
    for r in sorted(runs, key=lambda r: int(r["seed"])):
        for name, res in sorted(r["checkers"].items()):
            if res["valid"] is True:
                continue
            bad += 1
            kinds = Counter(res["kinds"])
            what = ", ".join(f"{k} x{n} ({rule_of(name, str(k)) or 'outside the catalog'})"
                             for k, n in kinds.items()) or res.get("error") or "?"  # fmt: skip
            print(f"  seed {r['seed']} {name} {_word(res['valid'])}: {what}")
            print(f"    replay: faultline replay {r['run']}")
        if "error" in r:
            bad += 1
            print(f"  seed {r['seed']}: no verdict: {r['error']}")
    walls = sorted(float(r["wall_s"]) for r in runs if "wall_s" in r)
    if walls:
        print(f"wall per run: median {walls[len(walls) // 2]:.1f} s, max {walls[-1]:.1f} s")
    return 1 if bad else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="200", help="N (seeds 1..N) or a list: 1-50,80")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--backend", choices=("sim", "docker"), default="sim")
    p.add_argument("--store", type=Path, default=ROOT / "store" / "false-positives")
    p.add_argument("--results", type=Path, help="judge an earlier store's runs instead")
    p.add_argument("extra", nargs="*", help="more `faultline run` flags (after --)")
    args = p.parse_args()
    if args.results is not None:
        stored = sorted(args.results.glob("*/*/results.json"))
        return report([_stored(path) for path in stored], f"the stored runs under {args.results}")
    seeds = _seeds(args.seeds)
    runs = []
    with ThreadPoolExecutor(args.workers) as pool:
        futures = [pool.submit(_run, s, args.store, args.extra, args.backend) for s in seeds]
        for done, fut in enumerate(as_completed(futures), start=1):
            r = fut.result()
            runs.append(r)
            bad = [n for n, c in r["checkers"].items() if c["valid"] is not True]
            print(f"[{done}/{len(seeds)}] seed {r['seed']}: "
                  + (", ".join(bad) + " not valid" if bad else r.get("error", "valid")),
                  file=sys.stderr, flush=True)  # fmt: skip
    extra = f" with {' '.join(args.extra)}" if args.extra else ""
    return report(runs, f"the default plan{extra}, --backend {args.backend}")


if __name__ == "__main__":
    sys.exit(main())
