"""Lost metastore transactions that write in both branches, checked each way.

Theory of operation. A transaction whose answer was lost and which compares
a revision the check cannot judge (past the watch record on ranks, any
revision on values alone) could have run either branch, and one search state
holds one branch. `meta_ranks.settled` settles such an op when one of its
branches writes nothing; when both write, the op used to make the metastore
part `unknown`.

An op of unknown outcome takes effect at most once, running one branch, or
never. So the history is linearizable iff it is under some choice of one
branch per such op, where "the op runs its chosen branch or never" is a
history of its own: the other branch emptied, which `settled` then settles
exactly (an empty branch looks like the op never taking effect). The part is
valid when one choice is, invalid when every choice is, and `unknown`
otherwise: an exact split, 2^k searches for k such ops, each with the whole
time budget. A valid verdict keeps its choice's witness; an invalid one
keeps every choice's counterexample, and `faultline verify` checks each
(`checkers/verify_cli.py`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterator
from typing import Any

import msgspec

from checkers.history import Operation
from checkers.linearizability.types import BranchChoice, Branches, LinResult

# 2^3 searches at most. Such ops are rare (none in a run with its watch
# record whole; 3 of 20 drop-replies runs with the watches stripped), and
# every choice gets the whole time budget.
MAX_SPLIT = 3

# A search of the metastore's ops: (ops, model instance or None) -> verdict.
Search = Callable[[list[Operation], Any], LinResult]


def two_way(meta: list[Operation]) -> list[Operation]:
    """The lost transactions values alone cannot settle: both branches write."""
    from checkers.meta_ranks import settled_alone

    return [op for op in meta if op.type == "info" and settled_alone(op) is None]


def with_branches(meta: list[Operation], split: Collection[int],
                  then: Collection[int]) -> list[Operation]:  # fmt: skip
    """`meta` with each op of `split` (invoke indices) made to run its then
    branch (when in `then`) or its else branch, or never: the other emptied."""
    out = []
    for op in meta:
        if op.invoke_index in split:
            emptied = "else" if op.invoke_index in then else "then"
            op = msgspec.structs.replace(op, value={**op.value, emptied: []})
        out.append(op)
    return out


def choices(split: list[int]) -> Iterator[list[int]]:
    """Each choice as the ops that run their then branch, all then first."""
    for picks in itertools.product((True, False), repeat=len(split)):
        yield [i for i, then in zip(split, picks, strict=True) if then]


def decide(meta: list[Operation], record: Any, search: Search) -> tuple[LinResult, Any]:
    """The metastore part's verdict and its `compose.Basis`: one search, or one
    per choice of branch when lost two-way transactions leave it undecidable."""
    from checkers.compose import metastore_basis, undecided

    ops, model, basis = metastore_basis(meta, record)
    if not basis.blind:
        return search(ops, model), basis
    split = [op.invoke_index for op in two_way(meta)]
    if len(split) < basis.blind:  # completed without saying which branch ran
        why = (f"not checked: {basis.blind - len(split)} transaction(s) that completed "
               f"without saying which branch ran compare mod or create revisions, "
               f"which values alone cannot judge")  # fmt: skip
        return undecided(len(ops), why), basis
    if len(split) > MAX_SPLIT:
        why = (f"not checked: {len(split)} transactions of unknown outcome compare mod or "
               f"create revisions and write in both branches; checking each way would "
               f"take 2^{len(split)} searches (at most 2^{MAX_SPLIT})")  # fmt: skip
        return undecided(len(ops), why), basis
    results: list[LinResult] = []
    thens: list[list[int]] = []
    for then in choices(split):
        ops, model, basis = metastore_basis(with_branches(meta, split, then), record)
        results.append(search(ops, model))
        thens.append(then)
        if results[-1].valid is True:
            break
    proven = all(r.valid is False for r in results)  # only then is each proof kept
    tried = [BranchChoice(then=then, valid=r.valid,
                          counterexample=r.counterexample if proven else None)
             for then, r in zip(thens, results, strict=True)]  # fmt: skip
    return _merged(results, Branches(ops=split, tried=tried)), basis


def _merged(results: list[LinResult], branches: Branches) -> LinResult:
    """The choices' verdicts as one: the valid one's, else the first invalid
    one's when all are invalid, else `unknown` with the undecided ones' keys;
    the search's spending summed over the choices."""
    if results[-1].valid is True:
        merged = results[-1]
    elif all(r.valid is False for r in results):
        merged = results[0]
    else:
        undecided = [r for r in results if r.valid == "unknown"]
        reasons = sorted({r.reason for r in undecided if r.reason})
        merged = LinResult(
            valid="unknown", model=results[0].model, ops=results[0].ops,
            partitions=results[0].partitions, states_explored=0, cache_size=0, elapsed_s=0.0,
            partition_results=[p for r in undecided for p in r.partition_results],
            reason=(f"{len(undecided)} of {len(results)} choices of branch for lost "
                    f"transaction(s) {branches.ops} undecided"
                    + "".join(f"; {x}" for x in reasons)),
        )  # fmt: skip
    return msgspec.structs.replace(
        merged, states_explored=sum(r.states_explored for r in results),
        cache_size=max(r.cache_size for r in results),
        elapsed_s=sum(r.elapsed_s for r in results), branches=branches,
    )  # fmt: skip
