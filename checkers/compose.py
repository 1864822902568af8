"""Composing checkers into one run verdict, and loading a run to check.

Theory of operation: `check(plan, history, options)` pairs the history into
operations, builds one `CheckContext`, and runs each selected checker on it.
A checker that raises yields `unknown` with the error (a broken checker must
never make a run look valid, nor crash the others). The verdicts merge as
false > unknown > true into `Result`, which is what results.json holds.

Which checkers run: the `checkers` option if given, else the plan's
`checkers` list, else every registered checker whose inputs exist (the
audit-event checkers need nodes' events.jsonl, so a bare history.jsonl gets
the history-only ones).

A history that mixes register traffic with metastore traffic (ember's
`metastore` workload: client ops on keys under `METASTORE_PREFIX`) is two
objects, so "linearizable" checks each with its own model (`SplitLinear`):
the register ops with the kv model, the metastore ops with the metastore
model. Other writers share ember's metastore (the control plane's
assignment and lease keys), so its revisions jump by writes the model never
sees: where the watch streams record every write under the prefix, each
revision is replaced by its rank among those writes (checkers/meta_ranks.py);
where they do not, the metastore ops are checked on values and `succeeded`
only, their revisions left out (the revisions checker orders those). Snapshot
reads at a past revision (`range`) are not linearizable reads and are left
to the revisions checker too.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import msgspec

from checkers.api import Anomaly, CheckContext, Checker, CheckerResult, Validity, merge_validity
from checkers.audit import load_audit
from checkers.history import Event, Operation, load_history, pair
from checkers.linear import NOT_MODELLED, LinearizabilityChecker, checker_result, model_ops
from checkers.stats import MEMBERSHIP_FS, fault_counts

METASTORE_PREFIX = "m/"  # workloads.metastore.PREFIX
RANKED, LEFT_OUT = "ranked by the watch record: ", "left out: "


class Basis(msgspec.Struct, frozen=True):
    """What a mixed history's metastore revisions were to its check
    (`metastore_basis`): ranks by the watch record, or left out and why.
    A struct, not its text, so the summary's note reads counts, not prose;
    `check --spark` carries it across result rows as JSON."""

    text: str  # figures.metastore.revisions
    ranked: bool
    unchecked: int = 0  # ops whose revisions lay past the record
    ops: int = 0
    blind: int = 0  # unranked: transactions of unknown outcome comparing revisions

    @property
    def notes(self) -> list[str]:
        """What the summary says of revisions the check did not judge; empty
        when it judged every one."""
        notes = []
        if not self.ranked:
            notes.append(f"metastore: revisions not checked (values and outcomes only): "
                         f"{self.text.removeprefix(LEFT_OUT)}")  # fmt: skip
        elif self.unchecked:
            record = self.text.removeprefix(RANKED)
            notes.append(f"metastore: the revisions of {self.unchecked} of {self.ops} "
                         f"operations not checked, past the watch record ({record})")  # fmt: skip
        return notes


def is_meta(op: Operation) -> bool:
    return (
        isinstance(op.process, int)
        and op.f not in MEMBERSHIP_FS
        and op.f not in NOT_MODELLED
        and (op.key or "").startswith(METASTORE_PREFIX)
    )


def values_only(op: Operation) -> Operation:
    """A metastore op with the revisions left out of its result (see module
    doc), and its revision comparisons settled by its outcome
    (`meta_ranks.settled`; `metastore_basis` counts those it cannot settle)."""
    from checkers.meta_ranks import settled_alone

    op = settled_alone(op) or op  # one it cannot settle is never searched (metastore_basis)
    result = op.result
    if op.f == "put":
        result = None
    elif op.f == "delete":  # whether it deleted is a value; its revision is not
        result = {"deleted": result["deleted"]} if isinstance(result, dict) else None
    elif isinstance(result, dict):
        result = {k: v for k, v in result.items() if k in ("value", "succeeded")}
    return msgspec.structs.replace(op, result=result)


class SplitLinear:
    """Linearizability of register and metastore traffic, each with its model."""

    name = "linearizable"

    def check(self, ctx: CheckContext) -> CheckerResult:
        """One search per object when the history mixes them; else the plain check."""
        meta = [op for op in ctx.operations if is_meta(op)]
        # Metastore traffic alone (etcd's metastore runs: nothing else writes
        # the store) keeps its revisions, which pin every write's place and
        # make crashed writes cheap to decide. Watches, past reads and
        # compactions are not model ops and do not make a history mixed.
        if not meta:
            return LinearizabilityChecker().check(ctx)
        if len(meta) == len(model_ops(ctx.operations)):
            options = {**ctx.options, "model": "metastore"}
            return LinearizabilityChecker().check(msgspec.structs.replace(ctx, options=options))
        rest = [op for op in ctx.operations if not is_meta(op)]
        kv = LinearizabilityChecker().check(msgspec.structs.replace(ctx, operations=rest))
        options = {**ctx.options, "model": "metastore"}
        from checkers.meta_branches import decide

        meta_ctx = msgspec.structs.replace(ctx, options=options)

        def search(ops: list[Operation], model: Any) -> Any:
            return LinearizabilityChecker(model).search(
                msgspec.structs.replace(meta_ctx, operations=ops)
            )

        result, basis = decide(meta, watch_record(ctx.operations), search)
        return split_result(kv, checker_result(result, "metastore"), basis)


def watch_record(operations: list[Operation]) -> Any:
    """The watch record of the metastore prefix (checkers/meta_ranks.py), or
    why there is none (a string)."""
    from checkers.meta_ranks import UnrankableError, record_of

    try:
        return record_of(operations, METASTORE_PREFIX)
    except UnrankableError as why:
        return str(why)


def metastore_basis(meta: list[Operation], record: Any) -> tuple[list[Operation], Any, Basis]:
    """The metastore ops to check, the model for them (None: the named one's
    default), and what their revisions are: ranks by `record` (`watch_record`),
    or left out, and why."""
    from checkers.linearizability.metastore import MetastoreModel
    from checkers.meta_ranks import UnrankableError, past_record, ranked_ops

    # A `fail` took no effect and is never searched (`ops_from_history`); one
    # comparing a revision past the record must not cost every op its ranks.
    meta = [op for op in meta if op.type != "fail"]
    why = record if isinstance(record, str) else None
    if why is None:
        try:
            ranked = ranked_ops(meta, record)
        except UnrankableError as exc:
            why = str(exc)
        else:
            past = past_record(meta, ranked)
            text = (f"{RANKED}{len(record.writes)} writes under "
                    f"{METASTORE_PREFIX!r} at revisions 1-{record.end}; the revisions "
                    f"of {past} of {len(meta)} ops, past it, left unchecked")  # fmt: skip
            basis = Basis(text, ranked=True, unchecked=past, ops=len(meta))
            return ranked, MetastoreModel(pinned=record.pinned()), basis
    from checkers.meta_ranks import settled_alone

    blind = sum(1 for op in meta if settled_alone(op) is None)
    basis = Basis(f"{LEFT_OUT}{why}", ranked=False, blind=blind)
    return [values_only(op) for op in meta], None, basis


def undecided(ops: int, why: str) -> Any:
    """The metastore part's search result when it cannot be run (a `LinResult`)."""
    from checkers.linearizability.types import LinResult

    return LinResult(valid="unknown", model="metastore", ops=ops, partitions=1,
                     states_explored=0, cache_size=0, elapsed_s=0.0, reason=why)  # fmt: skip


def split_result(kv: CheckerResult, m: CheckerResult, basis: Basis) -> CheckerResult:
    """The register part's and the metastore part's results as one (a mixed
    history), the metastore's saying what its revisions were (`basis`); where
    ranks, its anomalies say the revisions their ops show are ranks, not the
    store's."""
    m.figures["revisions"] = basis.text
    notes = basis.notes
    # Lost transactions checked each way (checkers/meta_branches.py).
    split = (m.figures.get("branches") or {}).get("ops")
    if split:
        notes.append(f"metastore: op(s) {split}, lost transactions that compare revisions "
                     f"it could not judge and write in both branches, checked each way "
                     f"(one search per choice of branch)")  # fmt: skip
    for anomaly in m.anomalies:
        if basis.ranked:
            anomaly.message += f" (revisions shown as ranks: {basis.text})"
        if split:
            anomaly.message += (f" (under each choice of branch for lost transaction(s) "
                                f"{split}; shown: the first)")  # fmt: skip
    anomalies = [Anomaly(kind=a.kind, message=f"{part}: {a.message}", ops=a.ops)
                 for part, r in (("register", kv), ("metastore", m))
                 for a in r.anomalies]  # fmt: skip
    errors = [f"{part}: {r.error}" for part, r in (("register", kv), ("metastore", m))
              if r.error]  # fmt: skip
    figures: dict[str, Any] = {"register": kv.figures, "metastore": m.figures}
    if notes:  # a check that did not judge everything says so (`check`)
        figures["notes"] = notes
    return CheckerResult(
        name=SplitLinear.name, valid=merge_validity([kv.valid, m.valid]), anomalies=anomalies,
        figures=figures, error="; ".join(errors) or None,
    )  # fmt: skip


def _lazy(module: str, name: str) -> Callable[[], Checker]:
    """A factory importing its checker's module only when a run selects it
    (`faultline check` on a small history should not pay for the others)."""

    def make() -> Checker:
        checker: Checker = getattr(importlib.import_module(module), name)()
        return checker

    return make


# name -> factory; a new checker is one line here.
REGISTRY: dict[str, Callable[[], Checker]] = {
    "linearizable": SplitLinear,
    "raft": _lazy("checkers.raft", "RaftChecker"),
    "revisions": _lazy("checkers.revisions", "RevisionChecker"),
    "convergence": _lazy("checkers.convergence", "ConvergenceChecker"),
    "stats": _lazy("checkers.stats", "StatsChecker"),
    "sim": _lazy("checkers.sim", "SimInvariantsChecker"),
    "logs": _lazy("checkers.node_logs", "NodeLogsChecker"),
}
# Checkers that need audit events; skipped by default on a bare history.
NEEDS_AUDIT = frozenset({"raft", "convergence"})
# Checkers that need a simulated run's invariant report; skipped by default elsewhere.
NEEDS_SIM = frozenset({"sim"})
# Checkers that need the nodes' logs; skipped by default where the run kept none.
NEEDS_LOGS = frozenset({"logs"})


class Result(msgspec.Struct, kw_only=True):
    """The composed verdict of a run: results.json."""

    valid: Validity
    checkers: dict[str, CheckerResult]
    # Why the verdict is unknown: one line per undecided checker.
    reasons: list[str] = msgspec.field(default_factory=list)
    test: str | None = None
    seed: int | str | None = None
    ops: int = 0
    elapsed_s: float = 0.0
    # What a reader of the verdict should know about its input (a torn last
    # line skipped, events left out by an importer).
    notes: list[str] = msgspec.field(default_factory=list)
    # The history checked, relative to results.json, and its format, when
    # `faultline check` read a file (`faultline verify` reads it again).
    history: str | None = None
    history_format: str | None = None
    # Per fault kind: applied, not_applied and why (`checkers.stats.fault_counts`).
    faults: dict[str, dict[str, Any]] = msgspec.field(default_factory=dict)


def select(
    names: Iterable[str] | None,
    plan: Mapping[str, Any],
    has_audit: bool,
    *,
    has_sim: bool = False,
    has_logs: bool = False,
) -> list[str]:
    """The checker names to run (see module doc); raises ValueError on an unknown name."""
    chosen = list(names) if names else None
    if chosen is None and isinstance(plan.get("checkers"), list):
        chosen = [str(n) for n in plan["checkers"]]
    if chosen is None:
        skip = ((set() if has_audit else NEEDS_AUDIT) | (set() if has_sim else NEEDS_SIM)
                | (set() if has_logs else NEEDS_LOGS))  # fmt: skip
        return [n for n in REGISTRY if n not in skip]
    unknown = [n for n in chosen if n not in REGISTRY]
    if unknown:
        raise ValueError(
            f"unknown checker {unknown[0]!r}; expected one of {', '.join(sorted(REGISTRY))}"
        )
    return chosen


def run_one(checker: Checker, ctx: CheckContext) -> CheckerResult:
    """Runs one checker; an exception becomes an `unknown` result naming it."""
    started = time.perf_counter()
    try:
        result = checker.check(ctx)
    except Exception as exc:  # any checker failure must become unknown, never a crash
        result = CheckerResult(
            name=checker.name, valid="unknown", error=f"{type(exc).__name__}: {exc}"
        )
    result.figures.setdefault("elapsed_s", round(time.perf_counter() - started, 6))
    return result


def check(
    plan: Mapping[str, Any] | None,
    history: list[Event],
    options: Mapping[str, Any] | None = None,
    *,
    audit: dict[str, list[dict[str, Any]]] | None = None,
    checkers: Mapping[str, Checker] | None = None,
    sim: dict[str, Any] | None = None,
    logs: dict[str, list[str]] | None = None,
) -> Result:
    """Checks one run's (validated) history and audit events; see the module doc.

    `checkers` overrides the registry (name -> checker instance), for tests
    and for callers with checkers of their own.
    """
    started = time.perf_counter()
    plan = plan or {}
    options = options or {}
    ctx = CheckContext(plan=plan, events=history, operations=pair(history), audit=audit, sim=sim,
                       logs=logs, options=options)  # fmt: skip
    if checkers is None:
        names = select(options.get("checkers"), plan, audit is not None, has_sim=sim is not None,
                       has_logs=logs is not None)  # fmt: skip
        checkers = {n: REGISTRY[n]() for n in names}
    results = {name: run_one(c, ctx) for name, c in checkers.items()}
    reasons = [
        f"{name}: {r.error or 'undecided'}" for name, r in results.items() if r.valid == "unknown"
    ]
    # What a checker saw and did not count (figures["notes"]) is said, never dropped.
    reasons += [f"{name}: {note}" for name, r in results.items()
                for note in r.figures.get("notes") or ()]  # fmt: skip
    seed = plan.get("seed")
    return Result(
        valid=merge_validity(r.valid for r in results.values()),
        checkers=results,
        reasons=reasons,
        test=str(plan["name"]) if "name" in plan else None,
        seed=seed if isinstance(seed, int | str) else None,
        ops=len(ctx.operations),
        elapsed_s=round(time.perf_counter() - started, 6),
        faults=fault_counts(ctx.operations),
    )


def load_run(
    path: str | Path, notes: list[str] | None = None
) -> tuple[dict[str, Any], list[Event], Any, Path]:
    """Reads a run dir (or a bare history.jsonl): plan, history, audit, out dir.

    Raises HistoryError for a malformed history or audit log, OSError for a
    missing file, ValueError for a malformed test.json. With `notes`, a torn
    last history line is skipped and noted there instead (history.py).
    """
    path = Path(path)
    if path.is_dir():
        history_path, run_dir = path / "history.jsonl", path
    else:
        history_path, run_dir = path, path.parent
    if not history_path.is_file():
        raise FileNotFoundError(f"no history at {history_path}")
    plan: dict[str, Any] = {}
    plan_path = run_dir / "test.json"
    if path.is_dir() and plan_path.is_file():
        try:
            plan = msgspec.json.decode(plan_path.read_bytes(), type=dict[str, Any])
        except msgspec.DecodeError as exc:
            raise ValueError(f"{plan_path}: {exc}") from None
    audit = load_audit(run_dir) if path.is_dir() else None
    return plan, load_history(history_path, notes), audit, run_dir


def write_results(result: Result, run_dir: Path) -> Path:
    """Writes results.json into `run_dir` (atomically: a reader never sees half)."""
    out = run_dir / "results.json"
    tmp = out.with_suffix(".json.tmp")
    tmp.write_bytes(msgspec.json.format(msgspec.json.encode(result), indent=2) + b"\n")
    tmp.replace(out)
    return out
