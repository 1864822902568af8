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


# Workload names (harness Plan.workload) whose ops a model checks.
WORKLOAD_MODELS = {
    "register": "cas-register",
    "cas-register": "cas-register",
    "kv": "kv",
    "etcd": "etcd",
    "metastore": "metastore",
}


def model_for(ctx: CheckContext) -> str:
    """The model: the `model` setting, else the first workload that names
    one (a plan's `workload` list, or a dict with `model`), else kv."""
    chosen = ctx.setting("model")
    if chosen:
        return str(chosen)
    workload = ctx.plan.get("workload")
    if isinstance(workload, dict) and isinstance(workload.get("model"), str):
        return str(workload["model"])
    if isinstance(workload, list | tuple):
        for name in workload:
            if name in WORKLOAD_MODELS:
                return WORKLOAD_MODELS[name]
    return DEFAULT_MODEL


class LinearizabilityChecker:
    """Checks the client operations against a sequential model."""

    name = "linearizable"

    def check(self, ctx: CheckContext) -> CheckerResult:
        """Runs the search; its `unknown` (budget, bad op shape) passes through."""
        from checkers import linearizability as lin  # late: see the module doc

        model = model_for(ctx)
        # The nemesis's and admin's ops (membership changes) are not ops on the model.
        client_ops = [
            op
            for op in ctx.operations
            if isinstance(op.process, int) and op.f not in MEMBERSHIP_FS and op.f != "watch"
        ]
        ops = lin.ops_from_history(client_ops, model)
        limit = float(ctx.setting("lin_time_limit_s", DEFAULT_TIME_LIMIT_S))
        result = lin.check(ops, model, time_limit_s=limit)
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
        return CheckerResult(
            name=self.name,
            valid=result.valid,
            anomalies=anomalies,
            figures=figures,
            error=result.reason if result.valid == "unknown" else None,
        )
