"""Checking a whole history: validation, partitioning, budgets, parallelism.

Theory of operation
-------------------
1. Validate every operation (shape for the model, call before return) and
   freeze its values so model states are hashable.
2. Split the history by key when the model allows it (P-compositionality):
   the history is linearizable iff every key's sub-history is.
3. Rounds of escalating effort: every partition, smallest first, gets a
   small step budget; the ones it does not decide get a larger one, then
   restarts with moves tied in rank taken in a random order (`_rounds`),
   twice the steps each time, until the deadline. A hard partition (porcupine stalls on two of
   kv/c50-bad's keys) thus never delays the verdict on an easy failing one.
   The first illegal partition ends the check.
4. With several partitions and enough operations, a round runs in a pool of
   spawned processes (terminated at the first failure); otherwise in this
   process, which avoids the start-up cost for small histories.
5. A failing partition is searched again with tracing on, to collect the
   longest linearizable prefix and the states before the unplaceable op,
   then shrunk to a minimal counterexample (shrink.py).
6. A linearizable history gets a witness: each partition's linearization
   with the state after each op, checked before it is reported
   (witness.py); one that does not check turns the verdict to unknown.
"""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from typing import Any

import msgspec

from checkers.linearizability.models import Model, _written
from checkers.linearizability.search import STEP_LIMIT, Budget, OutOfBudgetError, Search
from checkers.linearizability.shrink import shrink, stale_counterexample
from checkers.linearizability.stale import StaleRead, find_stale_read
from checkers.linearizability.types import (
    Counterexample,
    LinOp,
    LinResult,
    PartitionResult,
    Unplaceable,
    Validity,
    Witness,
)
from checkers.linearizability.witness import WitnessError
from checkers.linearizability.witness import build as build_witness

# Steps (choice points) per partition in the first rounds; then restarts.
_ROUNDS = (2_000, 20_000)
# Steps a partition may always take per operation, whatever the round's
# limit: a search that never backtracks takes about one per operation.
_STEPS_PER_OP = 4
_RESTART_STEPS = 10_000  # the unit of the restarts' step limits
# Below this many operations a process pool costs more than it saves.
_POOL_MIN_OPS = 20_000
# Rough bytes per memo entry, to turn a memory limit into a memo cap.
_MEMO_ENTRY_BYTES = 400
_POLL_S = 1.0  # how often a wait on the worker pool checks the deadline
_LOST_WORKER_GRACE_S = 10.0  # past the deadline: a worker's chunk is lost, not late
# Seconds a failing partition may be shrunk for: at least MIN, at most MAX,
# else until the check's deadline.
_SHRINK_MIN_S, _SHRINK_MAX_S = 2.0, 20.0
LOST_WORKER = "a checker worker process was lost (killed?) before answering"


class HistoryError(ValueError):
    """The operations handed to `check` cannot be checked as given."""


class _FrozenDict(dict[Any, Any]):
    """A dict that can live inside a hashable model state."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))


def freeze(value: Any) -> Any:
    """`value` with lists turned into tuples and dicts made hashable (the
    same object when nothing needed changing)."""
    if isinstance(value, tuple):
        items = tuple(freeze(v) for v in value)
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    if isinstance(value, dict) and not isinstance(value, _FrozenDict):
        return _FrozenDict((k, freeze(v)) for k, v in value.items())
    return value


def prepare(ops: Iterable[LinOp], model: Model) -> list[LinOp]:
    """Validate `ops` for `model` and freeze their values.

    Raises HistoryError naming the first bad operation.
    """
    out: list[LinOp] = []
    seen: set[int] = set()
    for op in ops:
        if op.id in seen:
            raise HistoryError(f"operation id {op.id} appears twice")
        seen.add(op.id)
        if op.known and op.ret is None:
            raise HistoryError(f"operation {op.id} is known (ok) but has no return time")
        if op.ret is not None and op.ret < op.call:
            raise HistoryError(f"operation {op.id} returns ({op.ret}) before its call ({op.call})")
        frozen = op
        new_input, new_output = freeze(op.input), freeze(op.output)
        f = model.aliases.get(op.f, op.f)
        if new_input is not op.input or new_output is not op.output or f != op.f:
            frozen = LinOp(
                id=op.id, process=op.process, call=op.call, ret=op.ret, f=f, key=op.key,
                input=new_input, output=new_output, known=op.known,
            )  # fmt: skip
        problem = model.check_shape(frozen)
        if problem is not None:
            raise HistoryError(f"operation {op.id}: {problem}")
        out.append(frozen)
    return out


def partition(ops: list[LinOp], model: Model) -> list[tuple[Any, list[LinOp]]]:
    """(key, ops) per partition, smallest first (one partition if the model
    is not partitioned)."""
    if not model.partitioned:
        return [(None, ops)] if ops else []
    parts: dict[Any, list[LinOp]] = {}
    for op in ops:
        parts.setdefault(op.key, []).append(op)
    return sorted(parts.items(), key=lambda kv: (len(kv[1]), repr(kv[0])))


def check_partition(
    model: Model, key: Any, ops: list[LinOp], budget: Budget, *, trace: bool = False
) -> PartitionResult:
    """Search one partition; a budget overrun becomes an "unknown" verdict."""
    return _run_partition(model, key, ops, budget, trace=trace)[0]


def _run_partition(
    model: Model, key: Any, ops: list[LinOp], budget: Budget, *, trace: bool = False,
    resume: Search | None = None,
) -> tuple[PartitionResult, Search | None]:  # fmt: skip
    """`check_partition`, also returning the search (which `resume`s one
    stopped at a step limit, with the new budget)."""
    start = time.monotonic()
    if budget.max_steps is not None and budget.max_steps < _STEPS_PER_OP * len(ops):
        budget = msgspec.structs.replace(budget, max_steps=_STEPS_PER_OP * len(ops))
    stale = find_stale_read(model, ops)
    if stale is not None:
        return _stale_result(model, key, ops, stale, time.monotonic() - start), None
    search: Search | None = resume
    try:
        if search is None:
            search = Search(model, ops, budget, trace=trace, seed=budget.seed)
        search.budget = budget
        out = search.run()
    except Exception as exc:  # a budget overrun, or a bug: never a false verdict
        reason = str(exc) if isinstance(exc, OutOfBudgetError) else f"checker error: {exc!r}"
        return PartitionResult(
            key=key, valid="unknown", ops=len(ops), reason=reason,
            states_explored=search.out.explored if search else 0,
            max_frontier=len(search.memo) if search else 0,
            elapsed_s=time.monotonic() - start,
            events_done=search.out.events_done if search else 0,
            events_total=len(search.tl.kind) if search else 2 * len(ops),
        ), (search if reason == STEP_LIMIT else None)  # fmt: skip
    return PartitionResult(
        key=key, valid=out.valid, ops=len(ops), states_explored=out.explored,
        max_frontier=out.memo_size, elapsed_s=time.monotonic() - start,
        linearized_prefix=out.prefix, unplaceable=out.unplaceable,
        events_done=out.events_done, events_total=len(search.tl.kind),
        linearization=out.order if out.valid is True else [],
    ), None  # fmt: skip


def _stale_result(
    model: Model, key: Any, ops: list[LinOp], stale: StaleRead, elapsed_s: float
) -> PartitionResult:
    """The verdict on a partition with a certainly-stale read (stale.py)."""
    r, y = stale.read, stale.overwriter
    proof = (
        f"read {r.id} returned {r.output!r}, but op {y.id} wrote {_written(y)!r} after every "
        f"op that could write {r.output!r} before it ({[w.id for w in stale.writers]}) had "
        f"returned, and returned before read {r.id} was called"
    )
    return PartitionResult(
        key=key, valid=False, ops=len(ops), elapsed_s=elapsed_s, proof=proof,
        unplaceable=[Unplaceable(op=r, states_before=[model.describe(_written(y))])],
    )  # fmt: skip


def _check_chunk(args: tuple[Model, str, Budget]) -> list[PartitionResult]:
    """Pool task: check the partitions pickled at a path, in order, stopping
    at the first failure."""
    model, path, budget = args
    with open(path, "rb") as f:
        chunk: list[tuple[Any, list[LinOp]]] = pickle.load(f)
    os.unlink(path)  # read once; a later round spills its own chunks
    results = []
    for key, ops in chunk:
        result = check_partition(model, key, ops, budget)
        results.append(result)
        if result.valid is False:
            break
    return results


def _chunks(
    parts: list[tuple[Any, list[LinOp]]], n_tasks: int
) -> list[list[tuple[Any, list[LinOp]]]]:
    """Deal partitions (smallest first) into about n_tasks balanced chunks."""
    total = sum(len(ops) for _, ops in parts)
    target = max(1, total // max(n_tasks, 1))
    chunks: list[list[tuple[Any, list[LinOp]]]] = [[]]
    size = 0
    for part in parts:
        if size >= target and chunks[-1]:
            chunks.append([])
            size = 0
        chunks[-1].append(part)
        size += len(part[1])
    return chunks


class _Runner:
    """Runs rounds of partition checks, in process or in a lazy pool."""

    def __init__(self, model: Model, workers: int, use_pool: bool) -> None:
        self.model = model
        self.workers = workers
        self.use_pool = use_pool
        self._pool: Any = None
        self._spool: str | None = None  # temporary directory of pickled chunks
        self._spilled = 0
        # In-process rank-order searches stopped at a step limit, by key,
        # resumed by the next rank-order round instead of starting over.
        self._paused: dict[str, Search] = {}

    def run(
        self, parts: list[tuple[Any, list[LinOp]]], budget: Budget
    ) -> Iterator[PartitionResult]:
        """Results for `parts`, in completion order; stop consuming at will."""
        if not self.use_pool or len(parts) < 2:
            for key, ops in parts:
                ranked = budget.seed == 0
                resume = self._paused.pop(repr(key), None) if ranked else None
                result, search = _run_partition(self.model, key, ops, budget, resume=resume)
                if ranked and search is not None:
                    self._paused[repr(key)] = search
                yield result
            return
        import multiprocessing  # late: most checks never start a pool

        if self._pool is None:
            self._pool = multiprocessing.get_context("spawn").Pool(self.workers)
            self._spool = tempfile.mkdtemp(prefix="faultline-lin-")
        tasks = [(self.model, self._spill(c), budget) for c in _chunks(parts, self.workers * 8)]
        done: set[str] = set()
        results_of = self._pool.imap_unordered(_check_chunk, tasks)
        for _ in tasks:
            while True:
                try:
                    results = results_of.next(timeout=_POLL_S)
                    break
                except multiprocessing.TimeoutError:
                    # A Pool never re-runs the chunk of a worker that died (killed,
                    # out of memory): without this bound the check waits forever.
                    if time.monotonic() > budget.deadline + _LOST_WORKER_GRACE_S:
                        self.close()
                        yield from _lost(parts, done)
                        return
            done.update(repr(r.key) for r in results)
            yield from results

    def _spill(self, chunk: list[tuple[Any, list[LinOp]]]) -> str:
        """Pickle a chunk to a file in the spool and return its path.

        A task sent down the pool's pipe must stay far smaller than the pipe's
        buffer: Pool.terminate() can lose the race with its task handler
        thread, which then blocks for ever writing a large task nobody will
        read (CI hung 600 s in terminate after a failing key ended the check
        early). Paths are a few hundred bytes, so no put ever blocks."""
        assert self._spool is not None, "spill before the pool exists"
        self._spilled += 1
        path = os.path.join(self._spool, f"chunk-{self._spilled}.pickle")
        with open(path, "wb") as f:
            pickle.dump(chunk, f, protocol=pickle.HIGHEST_PROTOCOL)
        return path

    def close(self) -> None:
        """Kill the pool's workers, whatever they are doing, and remove the
        spooled chunks."""
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None
        if self._spool is not None:
            shutil.rmtree(self._spool, ignore_errors=True)
            self._spool = None


def _lost(parts: list[tuple[Any, list[LinOp]]], done: set[str]) -> Iterator[PartitionResult]:
    """Unknown verdicts for the partitions a lost worker never answered for."""
    for key, ops in parts:
        if repr(key) not in done:
            yield PartitionResult(key=key, valid="unknown", ops=len(ops), reason=LOST_WORKER)


def _merge(results: Iterable[PartitionResult]) -> Validity:
    valids = [r.valid for r in results]
    if False in valids:
        return False
    return "unknown" if "unknown" in valids else True


def _rounds() -> Iterator[tuple[int, int]]:
    """(step limit, restart seed) per round: two rounds in rank order, then
    restarts that alternate between breaking ties at random (seeds 1, 2,
    ..., step limits in the Luby sequence 1, 1, 2, 1, 1, 2, 4, ... times a
    unit) and the rank order again with twice its last limit (resumed where
    it stopped, in process), so a search that only needed more steps loses
    about half its time to the restarts. A search
    stuck in a bad subtree of a linearizable history (heavy-tailed: one
    1,500-op register history ran past 60 s where most seeds take under one)
    is left for a fresh order; any round that finishes is a full search, so
    its verdict stands either way. Rounds end at the deadline."""
    yield from ((steps, 0) for steps in _ROUNDS)
    seed, ranked = 1, _ROUNDS[-1]
    while True:
        yield _RESTART_STEPS * _luby(seed), seed
        seed += 1
        ranked *= 2
        yield ranked, 0


def _luby(i: int) -> int:
    """The i-th term (from 1) of the Luby sequence 1 1 2 1 1 2 4 1 1 2 ..."""
    while True:
        k = 1
        while (1 << k) - 1 < i:
            k += 1
        if (1 << k) - 1 == i:
            return 1 << (k - 1)
        i -= (1 << (k - 1)) - 1


def check_prepared(
    ops: list[LinOp], model: Model, *, time_limit_s: float, memory_limit_mb: int,
    workers: int | None,
) -> LinResult:  # fmt: skip
    """`check` on operations already validated by `prepare`."""
    start = time.monotonic()
    deadline = start + time_limit_s
    parts = partition(ops, model)
    workers = workers if workers is not None else min(os.cpu_count() or 1, 4)
    use_pool = workers > 1 and len(parts) > 1 and len(ops) >= _POOL_MIN_OPS
    per_proc_mb = memory_limit_mb // (workers + 1) if use_pool else memory_limit_mb
    max_memo = max(1_000, per_proc_mb * 2**20 // _MEMO_ENTRY_BYTES)
    decided: list[PartitionResult] = []
    failed: PartitionResult | None = None
    runner = _Runner(model, workers, use_pool)
    try:
        todo = parts
        for steps, seed in _rounds():
            budget = Budget(deadline, max_memo, per_proc_mb * 2**20, steps, seed)
            retry_keys = set()
            for result in runner.run(todo, budget):
                if result.valid == "unknown" and result.reason == STEP_LIMIT:
                    retry_keys.add(repr(result.key))
                    continue
                decided.append(result)
                if result.valid is False:
                    failed = result
                    break
            if failed is not None or not retry_keys:
                break
            todo = [p for p in todo if repr(p[0]) in retry_keys]
    finally:
        runner.close()
    counterexample = None
    if failed is not None:
        failed = _explain(model, parts, failed, deadline, max_memo, memory_limit_mb)
        decided = [failed if r.key == failed.key else r for r in decided]
        counterexample = _shrink(model, parts, failed, deadline)
    valid = _merge(decided)
    witness: list[Witness] = []
    reason = None
    if valid is True:
        try:
            witness = _witness(model, parts, decided)
        except WitnessError as exc:
            valid, reason = "unknown", f"checker bug: its own witness does not verify: {exc}"
    for r in decided:
        r.linearization = []
    return LinResult(
        valid=valid, model=model.name, ops=len(ops), partitions=len(parts),
        states_explored=sum(r.states_explored for r in decided),
        cache_size=max((r.max_frontier for r in decided), default=0),
        elapsed_s=time.monotonic() - start, failure=failed, partition_results=decided,
        partitions_skipped=len(parts) - len(decided), reason=reason, witness=witness,
        counterexample=counterexample,
    )  # fmt: skip


def _witness(
    model: Model, parts: list[tuple[Any, list[LinOp]]], decided: list[PartitionResult]
) -> list[Witness]:
    """Each partition's witness, checked (raises WitnessError)."""
    order_of = {repr(r.key): r.linearization for r in decided}
    return [build_witness(model, key, ops, order_of[repr(key)]) for key, ops in parts]


def _shrink(
    model: Model, parts: list[tuple[Any, list[LinOp]]], failed: PartitionResult, deadline: float
) -> Counterexample:
    """The failing partition shrunk, within a few seconds past the deadline
    at most: a counterexample found by then is proven, if not minimal."""
    ops = next(ops for key, ops in parts if key == failed.key)
    now = time.monotonic()
    stale = find_stale_read(model, ops) if failed.proof is not None else None
    if stale is not None:
        return stale_counterexample(failed.key, ops, stale)
    return shrink(
        model, failed.key, ops, min(now + _SHRINK_MAX_S, max(deadline, now + _SHRINK_MIN_S))
    )


def _explain(
    model: Model, parts: list[tuple[Any, list[LinOp]]], failed: PartitionResult,
    deadline: float, max_memo: int, memory_limit_mb: int,
) -> PartitionResult:  # fmt: skip
    """Re-run a failing partition with tracing to collect its report data."""
    if failed.proof is not None:
        return failed  # proven without a search: the proof is the report
    ops = next(ops for key, ops in parts if key == failed.key)
    budget = Budget(max(deadline, time.monotonic() + 5.0), max_memo, memory_limit_mb * 2**20)
    traced = check_partition(model, failed.key, ops, budget, trace=True)
    if traced.valid is False:
        return traced
    # The traced run ran out of budget: keep the verdict, say why data is missing.
    failed.reason = f"report data unavailable: {traced.reason}"
    return failed
