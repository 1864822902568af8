"""Linearizability checking: Wing-Gong / Lowe search with P-compositionality.

Public API:
- `LinOp`: one operation as the checker sees it.
- `MODELS`: the sequential specifications by name ("register",
  "cas-register", "kv", "etcd", "metastore", and "kv-nopart", the kv model
  over the whole map at once).
- `check(ops, model, ...)`: the verdict (`LinResult`).
- `ops_from_history(operations, model)`: faultline `Operation`s to `LinOp`s.

The search is in search.py, the models in models.py and metastore.py, the
partitioning, budgets and process pool in check.py.
"""

from __future__ import annotations

from collections.abc import Iterable

from checkers.history import Operation
from checkers.linearizability.check import HistoryError, check_prepared, freeze, prepare
from checkers.linearizability.kv import KvModel, WholeMapModel
from checkers.linearizability.metastore import MetastoreModel
from checkers.linearizability.models import Model, RegisterModel
from checkers.linearizability.types import LinOp, LinResult, PartitionResult, Unplaceable

__all__ = [
    "MODELS",
    "HistoryError",
    "LinOp",
    "LinResult",
    "Model",
    "PartitionResult",
    "Unplaceable",
    "check",
    "ops_from_history",
]

MODELS: dict[str, Model] = {
    "register": RegisterModel("register", with_cas=False),
    "cas-register": RegisterModel("cas-register", with_cas=True),
    "etcd": RegisterModel("etcd", with_cas=True),
    "kv": KvModel(),
    "kv-nopart": WholeMapModel(KvModel()),
    "metastore": MetastoreModel(),
}


def _resolve(model: Model | str) -> Model:
    if isinstance(model, str):
        try:
            return MODELS[model]
        except KeyError:
            raise HistoryError(f"no model {model!r} (known: {', '.join(sorted(MODELS))})") from None
    return model


def check(
    ops: Iterable[LinOp],
    model: Model | str,
    *,
    time_limit_s: float = 60.0,
    memory_limit_mb: int = 2048,
    workers: int | None = None,
) -> LinResult:
    """Decide whether `ops` is linearizable with respect to `model`.

    `valid` is True, False, or "unknown" when the time or memory budget ran
    out first (with how far the search got). Partitions (keys, for
    partitioned models) are checked smallest first, in `workers` processes
    when the history is large; the check stops at the first illegal one and
    reports it with a longest linearizable prefix and the operation that
    could not be placed. Raises HistoryError for operations the model cannot
    interpret.
    """
    resolved = _resolve(model)
    prepared = prepare(ops, resolved)
    return check_prepared(
        prepared,
        resolved,
        time_limit_s=time_limit_s,
        memory_limit_mb=memory_limit_mb,
        workers=workers,
    )


def ops_from_history(operations: Iterable[Operation], model: Model | str) -> list[LinOp]:
    """faultline Operations as LinOps.

    `fail` certainly did not happen and is dropped; `info` (or an invoke
    never completed) is of unknown outcome: it may take effect at any point
    after its invocation, or never. Nemesis operations are not client
    operations and are dropped. Positions are the events' indices. The
    model is resolved to check the name; shapes are checked by `check`.
    """
    _resolve(model)
    out: list[LinOp] = []
    for op in operations:
        if op.type == "fail" or op.process == "nemesis":
            continue
        known = op.type == "ok"
        out.append(
            LinOp(
                id=op.invoke_index,
                process=op.process,
                call=op.invoke_index,
                ret=op.complete_index if known else None,
                f=op.f,
                key=op.key,
                input=freeze(op.value),
                output=freeze(op.result) if known else None,
                known=known,
            )
        )
    return out
