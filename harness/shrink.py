"""`faultline shrink`: a failing run's schedule cut down to what the failure needs.

Theory of operation. The target is the failing run's first (checker, rule):
the first anomaly kind of its first invalid checker. A candidate is the
same plan (same root seed) with less in it, and it is kept only if a
simulated run of it still fails with that SAME checker and rule; any other
verdict, even another failure, is a different bug and is not kept.

What shrinks, in this order, each by Zeller and Hildebrandt's ddmin
("Simplifying and Isolating Failure-Inducing Input", TSE 2002):

1. the faults: the plan's `nemesis_keep` option names the fault numbers
   of the seeded schedule to apply (`nemesis.generator`: the others are
   drawn and skipped, so a kept fault is the same fault);
2. the workloads beside the clients' traffic;
3. the time limit, halved while the failure stays (not below MIN_TIME_S).

The candidates of one ddmin step are independent, so they play in
parallel worker processes; the first one in ddmin's order that fails wins,
so the result does not depend on which worker finished first. The minimal
plan is written as a plan file that `faultline run --plan FILE` replays
(bit-exactly in simulation; on Docker by phase triggers and timings, see
`--attempts`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from harness import plan as plans
from harness.explore import RunSummary, play
from nemesis.generator import PRIMITIVES

MIN_TIME_S = 5.0
Target = tuple[str, str]


class ShrinkError(ValueError):
    """A run that cannot be shrunk (not invalid, not simulated, files missing)."""


def target_of(run_dir: Path) -> Target:
    """The (checker, rule) a shrink must keep failing."""
    from harness.explore import failures_of

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


def faults_of(run_dir: Path, plan: plans.Plan) -> list[int]:
    """The numbers of the faults the run's schedule emitted, in order."""
    emitted = 0
    with (run_dir / "history.jsonl").open("rb") as fh:
        for line in fh:
            if b'"process":"nemesis"' in line and b'"type":"invoke"' in line:
                f = msgspec.json.decode(line).get("f")
                emitted += f in PRIMITIVES
    keep = plan.options.get("nemesis_keep")
    numbers = sorted(int(n) for n in keep) if keep is not None else None
    return numbers[:emitted] if numbers is not None else list(range(1, emitted + 1))


def ddmin(items: list[int], fails: Callable[[list[list[int]]], int | None]) -> list[int]:
    """The 1-minimal subset of `items` that still fails.

    `fails(candidates)` plays every candidate and returns the index of the
    first (in the given order) that fails, or None.
    """
    if fails([[]]) == 0:
        return []
    n = 2
    while len(items) >= 2:
        size = math.ceil(len(items) / n)
        chunks = [items[i : i + size] for i in range(0, len(items), size)]
        complements = [[x for x in items if x not in c] for c in chunks]
        # Subsets first, then complements, as ddmin orders its tests.
        candidates = chunks + (complements if len(chunks) > 2 else [])
        hit = fails(candidates)
        if hit is not None and hit < len(chunks):
            items, n = candidates[hit], 2
        elif hit is not None:
            items, n = candidates[hit], max(n - 1, 2)
        elif n >= len(items):
            break
        else:
            n = min(len(items), 2 * n)
    return items


@dataclass
class Shrunk:
    """A shrink's outcome."""

    plan: plans.Plan
    target: Target
    faults_before: int
    faults_after: int
    workload_before: tuple[str, ...]
    time_before: float
    runs: int
    log: list[str] = field(default_factory=list)


class Shrinker:
    """Plays candidates of one failing plan and keeps those failing the same way."""

    def __init__(
        self,
        base: plans.Plan,
        target: Target,
        pool: Executor,
        store: Path,
        on_run: Callable[[RunSummary, bool], None] = lambda s, k: None,
    ) -> None:
        self.base, self.target, self.pool, self.store = base, target, pool, store
        self.on_run = on_run
        self.runs = 0
        self._seen: dict[bytes, bool] = {}

    def _plays(self, plans_: Sequence[plans.Plan]) -> list[bool]:
        keys = [plans.dump(p) for p in plans_]
        todo = {
            k: self.pool.submit(play, k, str(self.store))
            for k in dict.fromkeys(keys)
            if k not in self._seen
        }
        for key, fut in todo.items():
            summary = fut.result()
            self.runs += 1
            kept = self.target in summary.failures
            self._seen[key] = kept
            self.on_run(summary, kept)
        return [self._seen[k] for k in keys]

    def first_failing(self, candidates: Sequence[plans.Plan]) -> int | None:
        results = self._plays(candidates)
        return next((i for i, bad in enumerate(results) if bad), None)

    def with_faults(self, plan: plans.Plan, keep: list[int]) -> plans.Plan:
        return msgspec.structs.replace(plan, options={**plan.options, "nemesis_keep": keep})

    def shrink(self, faults: list[int]) -> plans.Plan:
        plan = self.base
        kept = ddmin(
            faults, lambda cands: self.first_failing([self.with_faults(plan, c) for c in cands])
        )
        plan = self.with_faults(plan, kept)
        from harness.dbs.registry import SYSTEMS

        traffic = [w for w in plan.workload if w in SYSTEMS[plan.db].traffic]
        extra = [i for i, w in enumerate(plan.workload) if w not in traffic]

        def with_workloads(idx: list[int]) -> plans.Plan:
            names = [w for i, w in enumerate(plan.workload) if w in traffic or i in idx]
            return msgspec.structs.replace(plan, workload=tuple(names))

        if extra:
            plan = with_workloads(
                ddmin(extra, lambda cands: self.first_failing([with_workloads(c) for c in cands]))
            )
        while plan.time_limit_s / 2 >= MIN_TIME_S:
            shorter = msgspec.structs.replace(plan, time_limit_s=plan.time_limit_s / 2)
            if self.first_failing([shorter]) != 0:
                break
            plan = shorter
        return plan
