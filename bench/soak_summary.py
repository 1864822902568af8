"""Summarise a soak: every run of a store, what it exercised, and its verdict.

Usage: python bench/soak_summary.py STORE [--test NAME]

For each run dir (e.g. `faultline nightly --matrix examples/soak.toml`'s
store): seed, verdict, the run's length, client operations, membership
changes requested and committed (`change-done` audit events), zone alters,
cancels by outcome, stale requests by outcome (every membership change
committed counts, rebalances' too, as `change-done` events); then, over all runs, the
faults by kind x what fired them (the phase a phase-aimed fault waited for,
or `timer`) and by the role they were aimed at. `faultline pipeline all`
gives the same coverage over many nights with PySpark; this is the quick
look at one soak, straight from the run dirs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.store import RunDir, iter_runs

FAULTS = frozenset({"partition", "kill", "pause", "slow"})
NS_PER_S = 1e9


def _outcome(value: Any) -> str:
    if isinstance(value, dict):
        for field in ("outcome", "state", "answer"):
            if isinstance(value.get(field), str):
                return str(value[field])
    return "?"


def summarise(run: RunDir) -> dict[str, Any]:
    """One run's figures (see the module doc)."""
    plan = json.loads(run.plan.read_text())
    results = json.loads(run.results.read_text()) if run.results.exists() else {}
    counts: Counter[str] = Counter()
    cancels: Counter[str] = Counter()
    stale: Counter[str] = Counter()
    faults: Counter[tuple[str, str, str]] = Counter()
    last = 0
    for line in run.history.read_text().splitlines():
        ev = json.loads(line)
        last = max(last, int(ev.get("time", 0)))
        if ev["type"] == "invoke":
            continue
        f, value = ev["f"], ev.get("value")
        if ev["process"] == "nemesis":
            if f in FAULTS and isinstance(value, dict):
                trigger = value.get("trigger") or {}
                fired = str(trigger.get("stage", "timer")) if trigger else "timer"
                faults[(f, fired, str(value.get("target") or value.get("grouping") or "-"))] += 1
            continue
        counts[f"{f}:{ev['type']}"] += 1
        outcome = _outcome(value) if ev["type"] != "info" else "info"
        if f == "cancel-rebalance":
            cancels[outcome] += 1
        elif f == "stale-request":
            stale[outcome] += 1
    done = 0
    for node_dir in sorted(run.nodes.iterdir()) if run.nodes.exists() else ():
        events = node_dir / "events.jsonl"
        if events.exists():
            done += sum('"kind":"change-done"' in line for line in events.open())
    client = sum(n for k, n in counts.items() if k.split(":")[0] in ("get", "put", "cas"))
    return {
        "run": run.path.name, "seed": plan.get("seed"), "valid": results.get("valid"),
        "seconds": last / NS_PER_S, "client_ops": client,
        "changes": sum(n for k, n in counts.items() if k.startswith("change-peers:")),
        "changes_done": done,
        "alters": sum(n for k, n in counts.items() if k.startswith("alter-zone:")),
        "cancels": dict(cancels), "stale": dict(stale), "faults": faults,
        "bad": {k: len(v.get("anomalies") or []) for k, v in
                (results.get("checkers") or {}).items() if v.get("valid") is not True},
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("store", type=Path)
    p.add_argument("--test", help="only runs of this test name")
    args = p.parse_args(argv)
    runs = [r for r in iter_runs(args.store) if args.test in (None, r.path.parent.name)]
    if not runs:
        print(f"soak_summary: no runs under {args.store}", file=sys.stderr)
        return 2
    rows = [summarise(r) for r in runs]
    console = Console(width=200)
    table = Table(title=f"{len(rows)} runs under {args.store}")
    for col in ("seed", "verdict", "s", "client ops", "change-peers (all changes done)", "alters",
                "cancels",
                "stale requests", "not valid"):  # fmt: skip
        table.add_column(col)
    for r in rows:
        table.add_row(str(r["seed"]), str(r["valid"]), f"{r['seconds']:.0f}",
                      str(r["client_ops"]), f"{r['changes']} ({r['changes_done']})",
                      str(r["alters"]), _fmt(r["cancels"]), _fmt(r["stale"]),
                      _fmt(r["bad"]) or "-")  # fmt: skip
    console.print(table)
    faults: Counter[tuple[str, str, str]] = sum((r["faults"] for r in rows), Counter())
    cover = Table(title="faults: kind x what fired them x target")
    for col in ("kind", "fired by", "target", "count"):
        cover.add_column(col)
    for (kind, fired, target), n in sorted(faults.items()):
        cover.add_row(kind, fired, target, str(n))
    console.print(cover)
    total_s = sum(r["seconds"] for r in rows)
    console.print(f"total {total_s / 60:.1f} min, {sum(r['client_ops'] for r in rows)} client "
                  f"ops, {sum(faults.values())} faults")  # fmt: skip
    return 0 if all(r["valid"] is True for r in rows) else 1


def _fmt(counts: dict[str, int]) -> str:
    return " ".join(f"{k} {v}" for k, v in sorted(counts.items()))


if __name__ == "__main__":
    sys.exit(main())
