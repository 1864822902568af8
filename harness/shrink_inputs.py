"""What `faultline shrink` reads from the failing run it starts from: the
(checker, rule) it must keep failing, the faults the run's schedule emitted,
and when the anomaly happened (a hint for the first cut)."""

from __future__ import annotations

from pathlib import Path

import msgspec

from harness import plan as plans
from harness.explore import RunSummary, failures_of, faults_in_history

Target = tuple[str, str]


class ShrinkError(ValueError):
    """A run that cannot be shrunk (not invalid, not simulated, files missing)."""


def target_of(run_dir: Path) -> Target:
    """The (checker, rule) a shrink must keep failing."""
    path = run_dir / "results.json"
    if not path.is_file():
        raise ShrinkError(f"{run_dir} has no results.json: was it checked?")
    results = msgspec.json.decode(path.read_bytes())
    failures = failures_of(results)
    if not failures:
        raise ShrinkError(
            f"{run_dir} is not invalid (valid: {results.get('valid')}); "
            "shrink keeps a failure, and this run has none"
        )
    return failures[0]


def emitted_numbers(plan: plans.Plan, emitted: int) -> list[int]:
    """The numbers of the faults a run of `plan` emitted, given how many it emitted."""
    keep = plan.options.get("nemesis_keep")
    numbers = sorted(int(n) for n in keep) if keep is not None else None
    return numbers[:emitted] if numbers is not None else list(range(1, emitted + 1))


def faults_of(run_dir: Path, plan: plans.Plan) -> list[int]:
    """The numbers of the faults the run's schedule emitted, in order."""
    kinds, _, _ = faults_in_history(run_dir / "history.jsonl")
    return emitted_numbers(plan, len(kinds))


def summary_of(run_dir: Path, plan: plans.Plan) -> RunSummary:
    """What shrink needs to know of the failing run it starts from."""
    kinds, starts, end_s = faults_in_history(run_dir / "history.jsonl")
    results = msgspec.json.decode((run_dir / "results.json").read_bytes())
    return RunSummary(
        seed=plan.seed, valid=results.get("valid"), exit_code=1, run_dir=str(run_dir),
        sim_s=0.0, wall_s=0.0, ops=int(results.get("ops") or 0), fault_kinds=kinds,
        fault_starts_s=starts, faults_end_s=end_s,
    )  # fmt: skip


def onset_of(run_dir: Path, target: Target) -> float | None:
    """When the target anomaly happened, in history seconds, where its checker
    says: the latest audit event an anomaly cites, by the instant the
    checkers placed it at on the harness's clock (`wall`, the node's own
    reading kept as `node_wall`), or the `sim` checker's time in simulated
    seconds. Not by an event's `mono_ns`: that counts from its process's
    start, so a node restarted mid-run reads seconds where the run is at
    minutes. A hint: shrink plays a candidate cut there and keeps it only if
    it still fails."""
    try:
        results = msgspec.json.decode((run_dir / "results.json").read_bytes())
        zero = msgspec.json.decode((run_dir / "timeline.json").read_bytes())
    except (OSError, msgspec.DecodeError):
        return None
    if not isinstance(zero, dict) or not zero.get("shared_monotonic"):
        return None
    zero_wall, zero_ns = zero.get("history_zero_wall"), zero.get("history_zero_mono_ns")
    if not isinstance(zero_wall, (int, float)) or not isinstance(zero_ns, int):
        return None
    checker = (results.get("checkers") or {}).get(target[0]) or {}
    times = []
    for a in checker.get("anomalies") or []:
        if a.get("kind") != target[1]:
            continue
        placed = [e["wall"] for e in a.get("events") or []
                  if "node_wall" in e and isinstance(e.get("wall"), (int, float))]  # fmt: skip
        if placed:
            times.append(max(placed) - zero_wall)
        elif isinstance(a.get("time"), (int, float)) and a["time"] < 1e6:  # simulated seconds
            times.append(float(a["time"]) - zero_ns / 1e9)  # the loop's clock is the kernel's
    # An anomaly can cite events from before the history began (the cluster's
    # start): it happened at the start, not before it.
    return max(0.0, min(times)) if times else None
