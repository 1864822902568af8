"""`faultline verify RUN_DIR|results.json`: re-check a verdict's evidence.

`faultline check` writes, with a `valid` linearizability verdict, a witness
(per key, the linearization and the state after each op), and with an
`invalid` one a counterexample (a few ops of one key, already not
linearizable). This command reads the history again, rebuilds the ops the
checker saw, and checks that evidence without trusting the checker:

- a witness in one pass per key (linearizability/witness.py): every known
  op placed once, real-time order kept, every step legal and leaving the
  recorded state, and every key of the history covered;
- a counterexample: that it is a reduction of the history that cannot make
  a linearizable history fail (linearizability/shrink.py), then a search of
  its few ops that finds no linearization.

Exit 0 when the evidence holds, 1 when it does not, 2 when there is none
to check or the input is bad.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_REFUTED, EXIT_ERROR = 0, 1, 2
# How long the search of a counterexample's few ops may take.
_CEX_SEARCH_S = 30.0


class VerifyError(ValueError):
    """Nothing to verify, or results that cannot be read."""


def add_parser(subparsers: Any) -> None:
    """Registers the `verify` subcommand."""
    p = subparsers.add_parser(
        "verify",
        help="re-check the linearizability witness or counterexample in results.json",
        description=__doc__,
    )
    p.add_argument("path", metavar="RUN_DIR|results.json")
    p.set_defaults(func=run)


def _parts(figures: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(label, figures) per checked object: one, or register and metastore."""
    if "model" in figures and ("witness" in figures or "valid" in figures):
        return [("linearizable", figures)]
    return [(f"linearizable/{name}", f) for name, f in figures.items() if isinstance(f, dict)]


Choice = tuple[list[int], list[int]]  # lost transactions checked each way, those run as then


def _operations(label: str, operations: list[Any],
                choice: Choice | None = None) -> tuple[list[Any], Any]:  # fmt: skip
    """The operations the checker handed this part's search, and the model
    instance it used when not the named model's default. `choice` (the lost
    transactions checked each way and those of them run as then) picks the
    search of one choice of branch (checkers/meta_branches.py)."""
    from checkers.compose import is_meta, metastore_basis, watch_record  # SplitLinear's split
    from checkers.linear import model_ops
    from checkers.meta_branches import with_branches

    if label.endswith("/metastore"):
        meta = [op for op in operations if is_meta(op)]
        if choice is not None:
            meta = with_branches(meta, *choice)
        ops, model, _ = metastore_basis(meta, watch_record(operations))
        return ops, model
    if label.endswith("/register"):
        return model_ops([op for op in operations if not is_meta(op)]), None
    return model_ops(operations), None


def _same_ops(shown: list[Any], history: list[Any]) -> str | None:
    """Whether each op shown is the history's op of the same id, unchanged."""
    import msgspec

    by_id = {op.id: op for op in history}
    for op in shown:
        if op.id not in by_id or msgspec.to_builtins(by_id[op.id]) != msgspec.to_builtins(op):
            return f"op {op.id} is not the history's"
    return None


def verify_part(label: str, figures: dict[str, Any], operations: list[Any]) -> str:
    """One line saying what held; raises WitnessError or VerifyError. Where
    lost transactions were checked each way, a witness is of the choice that
    held, and an invalid verdict holds a counterexample per choice, each
    checked against its own choice's ops."""
    import msgspec

    from checkers import linearizability as lin
    from checkers.linearizability.types import Branches
    from checkers.meta_branches import choices

    model = lin.MODELS.get(str(figures.get("model")))
    if model is None:
        raise VerifyError(f"{label}: unknown model {figures.get('model')!r}")
    branches = figures.get("branches")
    if not branches:
        return _verify_evidence(label, model, _operations(label, operations), figures)
    split = msgspec.convert(branches, Branches)
    if figures.get("witness"):
        held = [c for c in split.tried if c.valid is True]
        if not held:
            raise VerifyError(f"{label}: a witness but no choice of branch that held")
        built = _operations(label, operations, (split.ops, held[0].then))
        line = _verify_evidence(label, model, built, figures)
        return f"{line} (lost transaction(s) {split.ops} running then: {held[0].then})"
    proofs = [c for c in split.tried if c.counterexample is not None]
    every = {frozenset(then) for then in choices(split.ops)}
    proven = {frozenset(c.then) for c in proofs} & every
    if not figures.get("counterexample") or proven != every:
        raise VerifyError(f"{label}: results hold a counterexample for {len(proven)} of the "
                          f"{len(every)} choices of branch for lost transaction(s) "
                          f"{split.ops}")  # fmt: skip
    for c in proofs:
        built = _operations(label, operations, (split.ops, c.then))
        _verify_evidence(
            label, model, built, {"counterexample": msgspec.to_builtins(c.counterexample)}
        )
    return (f"{label}: counterexample verified under each of the {len(proofs)} choices of "
            f"branch for lost transaction(s) {split.ops}")  # fmt: skip


def _verify_evidence(label: str, model: Any, built: tuple[list[Any], Any],
                     figures: dict[str, Any]) -> str:  # fmt: skip
    """Checks the witness or counterexample in `figures` against the ops the
    search was handed (`_operations`)."""
    import msgspec

    from checkers import linearizability as lin
    from checkers.linearizability.check import partition, prepare
    from checkers.linearizability.shrink import check_reduction, proves_failure
    from checkers.linearizability.stale import check_stale
    from checkers.linearizability.types import Counterexample, Witness
    from checkers.linearizability.witness import WitnessError, verify

    history_ops, bound = built
    model = model if bound is None else bound
    ops = prepare(lin.ops_from_history(history_ops, model), model)
    parts = {repr(key): (key, part) for key, part in partition(ops, model)}
    if figures.get("witness"):
        witnesses = msgspec.convert(figures["witness"], list[Witness])
        covered = {repr(w.key) for w in witnesses}
        missing = [key for r, (key, _) in parts.items() if r not in covered]
        if missing:
            raise WitnessError(f"{label}: no linearization for key(s) {missing[:5]!r}")
        for w in witnesses:
            if repr(w.key) not in parts:
                raise WitnessError(f"{label}: key {w.key!r} has no operations in the history")
            verify(model, w.key, parts[repr(w.key)][1], w)
        n = sum(len(w.ops) for w in witnesses)
        return f"{label}: witness verified: {len(witnesses)} key(s), {n} ops linearized"
    if figures.get("counterexample"):
        cex = msgspec.convert(figures["counterexample"], Counterexample)
        if repr(cex.key) not in parts:
            raise WitnessError(f"{label}: key {cex.key!r} has no operations in the history")
        cex.ops = prepare(cex.ops, model)
        part_ops = parts[repr(cex.key)][1]
        if cex.stale_read is not None:
            shown = {op.id for op in cex.ops}
            problem = (
                _same_ops(cex.ops, part_ops)
                or (None if set(cex.stale_read) <= shown else "the read or overwrite not shown")
                or check_stale(model, part_ops, *cex.stale_read)
            )
            if problem is not None:
                raise WitnessError(f"{label}: stale read not proven: {problem}")
            return (
                f"{label}: counterexample verified: read {cex.stale_read[0]} of key {cex.key!r} "
                f"is certainly stale ({len(cex.ops)} ops shown)"
            )
        problem = check_reduction(model, part_ops, cex)
        if problem is not None:
            raise WitnessError(f"{label}: counterexample is not a reduction: {problem}")
        if not proves_failure(model, cex, _CEX_SEARCH_S):
            raise WitnessError(f"{label}: the counterexample's ops have a linearization")
        return (
            f"{label}: counterexample verified: {len(cex.ops)} op(s) of key {cex.key!r} "
            f"have no linearization"
        )
    raise VerifyError(f"{label}: results hold no witness or counterexample (verdict unknown?)")


# The note `faultline check --spark` leaves in results.json (pipeline/spark_check.py).
SPARK_NO_WITNESS = (
    "no linearization witness under --spark (it would hold every operation on the "
    "driver); `faultline verify` needs a local check"
)


def run(args: argparse.Namespace) -> int:
    """Verifies each linearizability verdict's evidence; see the module doc."""
    from checkers.history import pair
    from checkers.importers.formats import load_events
    from checkers.linearizability.witness import WitnessError

    path = Path(args.path)
    results_path = path / "results.json" if path.is_dir() else path
    try:
        results = json.loads(results_path.read_text())
        figures = results["checkers"]["linearizable"]["figures"]
    except (KeyError, TypeError, json.JSONDecodeError) as exc:
        raise VerifyError(f"{results_path}: no linearizability result to verify ({exc})") from None
    history = results_path.parent / str(results.get("history") or "history.jsonl")
    _, events = load_events(history, str(results.get("history_format") or "auto"), [])
    operations = pair(events)
    code = EXIT_OK
    spark = SPARK_NO_WITNESS in results.get("notes", [])
    for label, part in _parts(figures):
        if spark and not part.get("counterexample"):
            raise VerifyError(f"{label}: checked with `faultline check --spark`, which keeps no "
                              "witness; `faultline check` without --spark writes one")  # fmt: skip
        try:
            print(verify_part(label, part, operations))
        except WitnessError as exc:
            print(f"NOT VERIFIED: {exc}")
            code = EXIT_REFUTED
    return code
