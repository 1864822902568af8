"""Value types of the linearizability checker: its input and its verdict.

`LinOp` is one operation as the search sees it; `LinResult` is what a check
returns, a msgspec Struct so it can go into results.json unchanged.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

Validity = bool | Literal["unknown"]


class LinOp(msgspec.Struct, frozen=True, kw_only=True):
    """One operation of a history, as the linearizability search sees it.

    `call` and `ret` are positions on one time line (event indices or ns);
    `ret` is None for an operation whose outcome is unknown, which stays open
    until the end of the history. `known` is False when the outcome is
    unknown: the operation may take effect once at any point after `call`,
    or never, and its `output` is ignored.
    """

    id: int
    process: int | str
    call: int
    ret: int | None
    f: str
    key: Any = None
    input: Any = None
    output: Any = None
    known: bool = True


class Unplaceable(msgspec.Struct, kw_only=True):
    """An operation no linearization could place, and the model states
    (rendered by the model) that were reachable just before its deadline."""

    op: LinOp
    states_before: list[Any]
    states_truncated: bool = False


class Witness(msgspec.Struct, kw_only=True):
    """One partition's linearization: op ids in order, the state after each
    (witness.py checks it)."""

    key: Any
    ops: list[int]
    states: list[Any]


class Counterexample(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A proven non-linearizable reduction of one key's operations (shrink.py)."""

    key: Any
    ops: list[LinOp]
    # Ops of the failing partition it was shrunk from.
    of_ops: int
    # The cut: ops called after it are dropped, ops running at it unknown
    # (None: no cut).
    cut: int | None = None
    # False when the deadline stopped the shrinking early.
    complete: bool = True
    # A stale read (stale.py) proves it without a search: [read id,
    # overwriting op id]; the ops are the read, the overwriter and every op
    # that could write the value read before the read returned.
    stale_read: list[int] | None = None


class PartitionResult(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The verdict on one partition (one key, or the whole history)."""

    key: Any
    valid: Validity
    ops: int
    states_explored: int = 0
    max_frontier: int = 0
    elapsed_s: float = 0.0
    # Why the verdict is "unknown" (budget, error), or None.
    reason: str | None = None
    # For a violation: op ids of a longest linearizable prefix, in order.
    linearized_prefix: list[int] = []
    # For a violation: the operation(s) that could not be placed.
    unplaceable: list[Unplaceable] = []
    # For "unknown": how far the search got, as a count of return events.
    events_done: int = 0
    events_total: int = 0
    # For a violation found without a search (stale.py): why it is certain.
    proof: str | None = None
    # For a linearizable partition: op ids in linearization order (moved
    # into LinResult.witness once the whole history is decided).
    linearization: list[int] = []


class BranchChoice(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One choice of branch for the metastore's lost two-way transactions
    (checkers/meta_branches.py) and the search's verdict under it."""

    # Invoke indices of the ops that run their then branch (or never); the
    # other ops of `Branches.ops` run their else branch (or never).
    then: list[int]
    valid: Validity
    # Under an invalid verdict: this choice's proof, which `faultline verify`
    # checks for every choice.
    counterexample: Counterexample | None = None


class Branches(msgspec.Struct, kw_only=True):
    """The lost transactions checked each way, and each choice tried, in order
    (a valid verdict's witness is of the last)."""

    ops: list[int]
    tried: list[BranchChoice]


class LinResult(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The verdict on a whole history.

    `valid` merges the partitions as false > unknown > true. `failure` is
    the smallest failing partition (with its report data), if any.
    `partition_results` holds every partition that was decided or that ran
    out of budget; partitions skipped after a failure are counted in
    `partitions_skipped`.
    """

    valid: Validity
    model: str
    ops: int
    partitions: int
    states_explored: int
    cache_size: int
    elapsed_s: float
    failure: PartitionResult | None = None
    partition_results: list[PartitionResult] = []
    partitions_skipped: int = 0
    reason: str | None = None
    # valid: per partition, the linearization and the state after each op
    # (witness.py); `faultline verify` re-checks it in linear time.
    witness: list[Witness] = []
    # invalid: a small proven-failing reduction of the failing partition.
    counterexample: Counterexample | None = None
    # Metastore only: lost transactions writing in both branches, checked
    # each way (checkers/meta_branches.py).
    branches: Branches | None = None
