"""The linearizability checker as a composable `Checker`.

A thin adapter over helper C's facade, `checkers.linearizability`: it turns
the run's paired operations into the search's ops for the chosen model,
runs the search, and translates its verdict (valid / invalid / unknown when
the budget ran out) into a `CheckerResult`. The facade is imported when the
check runs, so the rest of the checkers work while it is absent or broken:
the composer turns the import error into an `unknown` verdict.
"""

from __future__ import annotations

from typing import Any

import msgspec

from checkers.api import Anomaly, CheckContext, CheckerResult
from checkers.history import Operation
from checkers.stats import MEMBERSHIP_FS

# The model names the facade implements (docs/models.md), should it fail to import.
_KNOWN_MODELS = ("register", "cas-register", "kv", "kv-nopart", "etcd", "metastore")
DEFAULT_MODEL = "kv"
DEFAULT_TIME_LIMIT_S = 60.0


def model_names() -> tuple[str, ...]:
    """The model names `--model` accepts."""
    try:
        from checkers.linearizability import MODELS
    except Exception:  # the facade's failure is reported when it runs
        return _KNOWN_MODELS
    return tuple(MODELS)


# Which model reads a history's ops, by their `f`s, when none is named.
# Workload names do not say it (the harness's "register" workload speaks get/put/cas).
_INFER = (
    ("cas-register", frozenset({"read", "write", "cas"})),
    ("kv", frozenset({"get", "put", "cas", "delete", "append"})),
    ("metastore", frozenset({"get", "put", "delete", "invoke"})),
)


def model_for(ctx: CheckContext, ops: list[Operation] | None = None) -> str:
    """The model: the `model` setting, else a plan workload dict's `model`,
    else the first model whose operations cover every `f` in `ops`, else kv."""
    chosen = ctx.setting("model")
    if chosen:
        return str(chosen)
    workload = ctx.plan.get("workload")
    if isinstance(workload, dict) and isinstance(workload.get("model"), str):
        return str(workload["model"])
    return infer_model({op.f for op in ops or ()})


def infer_model(fs: set[str]) -> str:
    """The first model whose operations cover every `f` in `fs`, else kv."""
    for model, known in _INFER:
        if fs and fs <= known:
            return model
    return DEFAULT_MODEL


# The metastore's streams and reads of the past, and its compactions: no
# model step (they do not read or change the present), the revisions
# checker's business (checkers/revisions.py, checkers/watches.py).
NOT_MODELLED = frozenset({"watch", "range", "compact"})


def model_ops(operations: list[Operation]) -> list[Operation]:
    """The operations on the model: not the nemesis's, nor the admin's
    (membership changes), nor watches, past reads and compactions."""
    return [
        op
        for op in operations
        if isinstance(op.process, int) and op.f not in MEMBERSHIP_FS and op.f not in NOT_MODELLED
    ]


class LinearizabilityChecker:
    """Checks the client operations against a sequential model."""

    name = "linearizable"

    def __init__(self, model: Any = None) -> None:
        # A model instance made for this history (one bound to a watch record,
        # checkers/compose.py), used in place of the named model's default.
        self.model = model

    def check(self, ctx: CheckContext) -> CheckerResult:
        """Runs the search; its `unknown` (budget, bad op shape) passes through."""
        client_ops = model_ops(ctx.operations)
        model = model_for(ctx, client_ops)
        return checker_result(self._search(ctx, client_ops, model), model)

    def search(self, ctx: CheckContext) -> Any:
        """The search's verdict (a `LinResult`) on the history's client ops."""
        client_ops = model_ops(ctx.operations)
        return self._search(ctx, client_ops, model_for(ctx, client_ops))

    def _search(self, ctx: CheckContext, client_ops: list[Operation], model: str) -> Any:
        from checkers import linearizability as lin  # late: see the module doc

        ops = lin.ops_from_history(client_ops, model)
        limit = float(ctx.setting("lin_time_limit_s", DEFAULT_TIME_LIMIT_S))
        chosen = model if self.model is None else self.model
        return lin.check(ops, chosen, time_limit_s=limit)


def checker_result(result: Any, model: str) -> CheckerResult:
    """A search's verdict (a `LinResult`) as the `linearizable` checker's result;
    `faultline check --spark` builds the same from its per-key results."""
    anomalies: list[Anomaly] = []
    failure = result.failure
    if result.valid is False and failure is not None:
        ids = [u.op.id for u in failure.unplaceable]
        anomalies.append(
            Anomaly(
                kind="nonlinearizable",
                message=f"key {failure.key!r}: no linearization places op(s) {ids}",
                ops=ids,
            )
        )
    figures: dict[str, Any] = msgspec.to_builtins(result)
    figures["model"] = model
    return CheckerResult(
        name=LinearizabilityChecker.name,
        valid=result.valid,
        anomalies=anomalies,
        figures=figures,
        error=_undecided(result) if result.valid == "unknown" else None,
    )


def _undecided(result: Any) -> str:
    """Why a check is unknown: which keys ran out of budget, how far each got."""
    parts = [
        f"key {r.key!r}: {r.reason or 'undecided'} after {r.events_done}/{r.events_total} events"
        for r in result.partition_results
        if r.valid == "unknown"
    ]
    shown = "; ".join(parts[:5]) + (f"; and {len(parts) - 5} more keys" if len(parts) > 5 else "")
    return "; ".join(x for x in (result.reason, shown) if x) or "undecided"
