"""`faultline shrink`: a failing run's schedule cut down to what the failure needs.

Theory of operation. The target is the failing run's first (checker, rule):
the first anomaly kind of its first invalid checker. A candidate is the
same plan (same root seed) with less in it, and it is kept only if a
simulated run of it still fails with that SAME checker and rule; any other
verdict, even another failure, is a different bug and is not kept. A
schedule's length is the number of faults its run emitted (read from the
candidate's own history, not from the plan), so a kept fault number the
shorter run never reached is not counted as a fault.

The steps, each logged with the candidates it played (`Step`):

0. `replay`: the failing plan itself; if it no longer fails the same way
   (the code changed since the run), shrink stops with ShrinkError.
   `onset`: where the anomaly carries a time (`onset_of`), one round that
   drops the faults begun after it and the time past it.
1. `faults`: Zeller and Hildebrandt's ddmin ("Simplifying and Isolating
   Failure-Inducing Input", TSE 2002) over the fault numbers. The plan's
   `nemesis_keep` names the faults of the seeded schedule to apply
   (`nemesis.generator`: the others are drawn and skipped, so a kept fault
   is the same fault: kind, target, seed, duration).
2. `time`: the time limit cut toward the last fault's heal, by bisection.
   Under `mix` the schedule draws at most one fault per 2 s of the time
   limit (skipped ones count), so it never goes below twice the highest
   kept fault number.
3. `workloads`: ddmin over the workloads beside the clients' traffic.
4. While more than GOAL_FAULTS faults remain, three searches for a smaller
   schedule that ddmin cannot see, because removing one fault moves the
   later ones (a skipped fault takes no time): `subsets` plays every subset
   of at most GOAL_FAULTS of the kept faults, smallest first (when there
   are few enough); `earlier` scales the quiet gaps between faults down, so
   the same faults come sooner, and ddmins again; `kinds` redraws the
   schedule with one fault kind of those kept (a simpler schedule, not the
   same faults) and ddmins it. A result is taken only if it has fewer faults.
5. To a fixpoint: `drop-one` removes single faults while the failure stays
   (after other steps moved the run, a fault may no longer be needed),
   `op-mix` halves the client rate or the client count (fewer ops), and
   `time` again.

The candidates of one step are independent, so they play in parallel
worker processes; the first one in the step's order that fails wins, so
the result does not depend on which worker finished first. A run budget
(`max_runs`) bounds the whole search. The minimal plan is written as a plan
file that `faultline run --plan FILE` replays (bit-exactly in simulation;
on Docker by phase triggers and timings, see `--attempts`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import msgspec

from harness import plan as plans
from harness.explore import RunSummary, play
from harness.shrink_inputs import ShrinkError, Target, emitted_numbers
from nemesis.generator import MIN_CYCLE_S, MIX

MIN_TIME_S = 5.0
GOAL_FAULTS = 3  # issue 17: shrunk schedules of this many faults or fewer
SUBSET_CANDIDATES = 60  # the most subsets `subsets` plays (C(6,<=3) = 41, C(7,<=3) = 63)
GAP_SCALES = (0.5, 0.25)  # `earlier`: the quiet gaps between faults, scaled
MIN_RATE_HZ = 5.0  # `op-mix` halves the client rate down to this
MAX_RUNS = 300  # the default budget of one shrink
TIME_ROUNDS = 3  # bisection rounds of one `time` step
ONSET_MARGIN_S = 2.0  # `onset`: the time limit it tries lies this far past the anomaly


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


def small_subsets(items: Sequence[int], most: int) -> list[list[list[int]]]:
    """Every non-empty subset of at most `most` items, grouped by size, smallest first."""
    return [
        [list(c) for c in itertools.combinations(items, k)]
        for k in range(1, min(most, len(items)) + 1)
    ]


def time_candidates(low: float, high: float) -> list[float]:
    """Time limits to try between a floor and a failing limit: the floor, then
    the midpoint, on a 0.5 s grid, each below `high`."""
    grid = [math.ceil(low * 2) / 2, math.ceil(low + high) / 2 if high - low > 1 else high]
    return sorted({t for t in grid if t < high})


@dataclass
class Step:
    """One shrink step: what it tried and what came of it (written to the shrink log)."""

    name: str
    candidates: int = 0  # plans it asked for
    runs: int = 0  # new simulated runs it took (repeats are remembered)
    kept: bool = False
    note: str = ""


class Shrinker:
    """Plays candidates of one failing plan and keeps those failing the same way."""

    def __init__(
        self,
        base: plans.Plan,
        target: Target,
        pool: Executor,
        store: Path,
        start: RunSummary,
        on_run: Callable[[RunSummary, bool], None] = lambda s, k: None,
        on_step: Callable[[Step], None] = lambda s: None,
        max_runs: int = MAX_RUNS,
        player: Callable[[bytes, str], RunSummary] = play,  # tests pass a model of a run
        onset_s: float | None = None,
    ) -> None:
        self.base, self.target, self.pool, self.store = base, target, pool, store
        self.on_run, self.on_step, self.max_runs = on_run, on_step, max_runs
        self.player, self.onset_s = player, onset_s
        self.runs = 0
        self.steps: list[Step] = []
        self._seen: dict[bytes, RunSummary | None] = {}  # None: not kept
        self._late: dict[bytes, Future[RunSummary]] = {}  # running when their step ended
        self.plan, self.now = base, start
        self.keep = emitted_numbers(base, len(start.fault_kinds))
        self._step = Step("start")

    # -- playing ---------------------------------------------------------

    def _plays(self, plans_: Sequence[plans.Plan], first: bool = False) -> list[RunSummary | None]:
        """Each candidate's run if it failed the same way, else None. With
        `first`, stop at the first (in order) that does: later candidates not
        yet started are cancelled, and those running are collected later."""
        keys = [plans.dump(p) for p in plans_]
        self._harvest(wait=False)
        todo: dict[bytes, Future[RunSummary]] = {}
        for key in dict.fromkeys(keys):
            if key in self._seen:
                continue
            if key in self._late:
                todo[key] = self._late.pop(key)
            elif self.runs + len(todo) + len(self._late) < self.max_runs:
                todo[key] = self.pool.submit(self.player, key, str(self.store))
        self._step.candidates += len(keys)
        for key, fut in todo.items():
            self._collect(key, fut)
            if first and self._seen[key] is not None:
                for other, rest in todo.items():
                    if other not in self._seen and not rest.cancel():
                        self._late[other] = rest
                break
        # Past the budget a candidate is not played, and counts as not failing.
        return [self._seen.get(k) for k in keys]

    def _collect(self, key: bytes, fut: Future[RunSummary]) -> None:
        try:
            summary = fut.result()
        except Exception as exc:  # a candidate the runner refused or crashed on: not kept
            error = f"{type(exc).__name__}: {exc}"
            summary = RunSummary(seed=self.base.seed, valid="unknown", exit_code=3, run_dir="",
                                 sim_s=0.0, wall_s=0.0, ops=0, error=error)  # fmt: skip
        self.runs += 1
        self._step.runs += 1
        kept = self.target in summary.failures
        self._seen[key] = summary if kept else None
        self.on_run(summary, kept)

    def _harvest(self, wait: bool) -> None:
        """Collect the leftover runs of earlier steps that have ended (all, with `wait`)."""
        for key, fut in list(self._late.items()):
            if wait or fut.done():
                del self._late[key]
                self._collect(key, fut)

    def first_failing(self, candidates: Sequence[plans.Plan]) -> int | None:
        results = self._plays(candidates, first=True)
        return next((i for i, s in enumerate(results) if s is not None), None)

    def _take(self, plan: plans.Plan) -> bool:
        """Make `plan` the current one if it (still) fails the same way."""
        key = plans.dump(plan)
        found = self._seen[key] if key in self._seen else self._plays([plan])[0]
        if found is None:
            return False
        self.plan, self.now = plan, found
        self.keep = emitted_numbers(plan, len(found.fault_kinds))
        return True

    def _begin(self, name: str) -> Step:
        self._step = Step(name)
        return self._step

    def _end(self, note: str, kept: bool) -> bool:
        self._step.note, self._step.kept = note, kept
        self.steps.append(self._step)
        self.on_step(self._step)
        return kept

    @property
    def budget_left(self) -> bool:
        return self.runs < self.max_runs

    # -- plan edits ------------------------------------------------------

    @staticmethod
    def with_options(plan: plans.Plan, **changes: Any) -> plans.Plan:
        options = {**plan.options, **changes}
        return msgspec.structs.replace(
            plan, options={k: v for k, v in options.items() if v is not None}
        )

    def with_faults(self, plan: plans.Plan, keep: list[int]) -> plans.Plan:
        return self.with_options(plan, nemesis_keep=list(keep))

    def _ddmin_faults(self, plan: plans.Plan, numbers: list[int]) -> list[int]:
        return ddmin(
            numbers, lambda cands: self.first_failing([self.with_faults(plan, c) for c in cands])
        )

    # -- the steps (module doc) -----------------------------------------

    def shrink(self) -> plans.Plan:
        self.step_replay()
        self.step_onset()
        self.step_faults()
        self.step_time()
        self.step_workloads()
        for _ in range(3):  # each search that helps gives the others a smaller start
            if len(self.keep) <= GOAL_FAULTS or not self.budget_left:
                break
            if not (self.step_subsets() or self.step_earlier() or self.step_kinds()):
                break
        for _ in range(3):  # to a fixpoint, bounded: each pass plays a handful of runs
            changed = self.step_drop_one()
            changed = self.step_op_mix() or changed
            changed = self.step_time() or changed
            if not changed or not self.budget_left:
                break
        self._harvest(wait=True)  # runs still going when their step ended count too
        return self.plan

    def step_replay(self) -> bool:
        """The failing plan itself, once: if it no longer fails the same way
        (the code changed since the run, or the rule came from something the
        replay does not repeat), no candidate could, and the search would
        spend its whole budget learning that."""
        self._begin("replay")
        if self._plays([self.base])[0] is None:
            self._end("the run's own plan no longer fails this way", False)
            raise ShrinkError(
                f"replaying the run's plan no longer fails with {self.target[0]} "
                f"({self.target[1]}): the code changed since it ran, or the failure "
                "does not replay; run it again (faultline replay) and shrink that run"
            )
        return self._end("the run's own plan still fails this way", False)

    def step_onset(self) -> bool:
        """One run that drops the faults begun after the anomaly and the time
        past it: cheap, and every later candidate is shorter for it."""
        self._begin("onset")
        if self.onset_s is None:
            return self._end("the anomaly carries no time", False)
        starts = self.now.fault_starts_s
        before = [n for n, at in zip(self.keep, starts, strict=False) if at <= self.onset_s]
        t = max(MIN_TIME_S, math.ceil((self.onset_s + ONSET_MARGIN_S) * 2) / 2)
        if MIX in self.plan.nemesis and before:
            t = max(t, MIN_CYCLE_S * max(before))
        cands = []
        if t < self.plan.time_limit_s:
            cut = msgspec.structs.replace(self.plan, time_limit_s=t)
            cands.append(self.with_faults(cut, before))
        if len(before) < len(self.keep):
            cands.append(self.with_faults(self.plan, before))
        hit = self.first_failing(cands)
        ok = hit is not None and self._take(cands[hit])
        note = (f"anomaly at {self.onset_s:.1f} s, after {len(before)} of {len(starts)} faults "
                f"began: {len(self.keep)} faults, {self.plan.time_limit_s:g} s")  # fmt: skip
        return self._end(note, ok)

    def step_faults(self) -> bool:
        self._begin("faults")
        before = len(self.keep)
        kept = self._ddmin_faults(self.plan, self.keep)
        ok = self._take(self.with_faults(self.plan, kept)) and len(self.keep) < before
        return self._end(f"ddmin: {before} -> {len(self.keep)} faults {self.keep}", ok)

    def step_time(self) -> bool:
        self._begin("time")
        start = high = self.plan.time_limit_s
        floor = max(MIN_TIME_S, self.now.faults_end_s + 0.5)
        if MIX in self.plan.nemesis and self.keep:
            floor = max(floor, MIN_CYCLE_S * max(self.keep))
        for _ in range(TIME_ROUNDS):
            times = time_candidates(floor, high)
            if not times:
                break
            cands = [msgspec.structs.replace(self.plan, time_limit_s=t) for t in times]
            hit = self.first_failing(cands)
            if hit is None:
                floor = times[-1]  # a heuristic: the failure's onset is past the midpoint
                continue
            self._take(cands[hit])
            high = times[hit]
            if hit == 0:
                break
        return self._end(f"{start:g} -> {self.plan.time_limit_s:g} s", high < start)

    def step_workloads(self) -> bool:
        from harness.dbs.registry import SYSTEMS

        self._begin("workloads")
        plan = self.plan
        traffic = [w for w in plan.workload if w in SYSTEMS[plan.db].traffic]
        extra = [i for i, w in enumerate(plan.workload) if w not in traffic]

        def with_workloads(idx: list[int]) -> plans.Plan:
            names = [w for i, w in enumerate(plan.workload) if w in traffic or i in idx]
            return msgspec.structs.replace(plan, workload=tuple(names))

        if not extra:
            return self._end("only the clients' traffic", False)
        kept = ddmin(extra, lambda cands: self.first_failing([with_workloads(c) for c in cands]))
        ok = len(kept) < len(extra) and self._take(with_workloads(kept))
        return self._end(f"{'+'.join(plan.workload)} -> {'+'.join(self.plan.workload)}", ok)

    def step_subsets(self) -> bool:
        self._begin("subsets")
        groups = small_subsets(self.keep, GOAL_FAULTS)
        total = sum(len(g) for g in groups)
        if total > SUBSET_CANDIDATES:
            return self._end(
                f"{total} subsets of <= {GOAL_FAULTS} of {len(self.keep)} faults: "
                f"more than {SUBSET_CANDIDATES}, not tried",
                False,
            )
        before = list(self.keep)
        for group in groups:
            cands = [self.with_faults(self.plan, g) for g in group]
            hit = self.first_failing(cands)
            if hit is not None and self._take(cands[hit]):
                return self._end(f"{before} -> {self.keep}", True)
        played = "all" if self.budget_left else "not all (budget spent)"
        return self._end(
            f"{played} {total} subsets of <= {GOAL_FAULTS} of {before} pass or fail otherwise",
            False,
        )

    def step_earlier(self) -> bool:
        self._begin("earlier")
        gap = float(self.plan.options.get("nemesis_gap_s", 6.0))
        cands = [self.with_options(self.plan, nemesis_gap_s=round(gap * s, 3)) for s in GAP_SCALES]
        return self._smaller_among(cands, f"gaps x{', x'.join(f'{s:g}' for s in GAP_SCALES)}")

    def step_kinds(self) -> bool:
        self._begin("kinds")
        kinds = list(dict.fromkeys(self.now.fault_kinds))
        # A redrawn schedule gets the failing run's whole time limit back: its
        # faults are new, and the `time` step cuts what they do not need.
        whole = msgspec.structs.replace(self.plan, time_limit_s=self.base.time_limit_s)
        cands = [self.with_options(whole, nemesis_kinds=[k], nemesis_keep=None) for k in kinds]
        return self._smaller_among(cands, f"one kind of {', '.join(kinds)}")

    def _smaller_among(self, cands: list[plans.Plan], what: str) -> bool:
        """ddmin each failing candidate's faults; take the first with fewer faults than now."""
        before = len(self.keep)
        found = self._plays(cands)
        sizes = []
        for plan, summary in zip(cands, found, strict=True):
            if summary is None or not self.budget_left:
                sizes.append("passes")
                continue
            kept = self._ddmin_faults(plan, emitted_numbers(plan, len(summary.fault_kinds)))
            sizes.append(f"{len(kept)} faults")
            if len(kept) < before and self._take(self.with_faults(plan, kept)):
                return self._end(f"{what}: {before} -> {len(self.keep)} faults", True)
        return self._end(f"{what}: {', '.join(sizes)}; none below {before}", False)

    def step_drop_one(self) -> bool:
        self._begin("drop-one")
        before = list(self.keep)
        while len(self.keep) > 0 and self.budget_left:
            cands = [
                self.with_faults(self.plan, [n for n in self.keep if n != d]) for d in self.keep
            ]
            hit = self.first_failing(cands)
            if hit is None or not self._take(cands[hit]):
                break
        return self._end(f"{before} -> {self.keep}", self.keep != before)

    def step_op_mix(self) -> bool:
        self._begin("op-mix")
        start = self.plan
        while self.budget_left:
            cands = []
            if self.plan.rate_hz / 2 >= MIN_RATE_HZ:
                cands.append(msgspec.structs.replace(self.plan, rate_hz=self.plan.rate_hz / 2))
            if self.plan.concurrency > 1:
                cands.append(
                    msgspec.structs.replace(self.plan, concurrency=self.plan.concurrency // 2)
                )
            hit = self.first_failing(cands) if cands else None
            if hit is None or not self._take(cands[hit]):
                break
        note = (
            f"rate {start.rate_hz:g} -> {self.plan.rate_hz:g} Hz, clients "
            f"{start.concurrency} -> {self.plan.concurrency}"
        )
        return self._end(note, self.plan is not start)

    def log(self) -> dict[str, Any]:
        """The shrink log (written beside the shrunk plan)."""
        return {
            "target": {"checker": self.target[0], "rule": self.target[1]},
            "runs": self.runs,
            "max_runs": self.max_runs,
            "faults": len(self.keep),
            "fault_kinds": self.now.fault_kinds,
            "steps": [asdict(s) for s in self.steps],
        }
