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
    says and the nodes share the harness's monotonic clock (the simulator):
    the latest audit event an anomaly cites (`mono_ns`), or the `sim`
    checker's time in simulated seconds. A hint: shrink plays a candidate
    cut there and keeps it only if it still fails."""
    try:
        results = msgspec.json.decode((run_dir / "results.json").read_bytes())
        zero = msgspec.json.decode((run_dir / "timeline.json").read_bytes())
    except (OSError, msgspec.DecodeError):
        return None
    zero_ns = zero.get("history_zero_mono_ns") if isinstance(zero, dict) else None
    if not isinstance(zero_ns, int) or not zero.get("shared_monotonic"):
        return None
    checker = (results.get("checkers") or {}).get(target[0]) or {}
    times = []
    for a in checker.get("anomalies") or []:
        if a.get("kind") != target[1]:
            continue
        monos = [e["mono_ns"] for e in a.get("events") or [] if isinstance(e.get("mono_ns"), int)]
        if monos:
            times.append((max(monos) - zero_ns) / 1e9)
        elif isinstance(a.get("time"), (int, float)) and a["time"] < 1e6:  # simulated seconds
            times.append(float(a["time"]) - zero_ns / 1e9)
    return min(times) if times else None
