"""The checker protocol, its result types and verdict merging.

Theory of operation: a checker is anything with a `name` and a
`check(ctx) -> CheckerResult`. `CheckContext` carries everything a run leaves
behind that a checker may read (the plan, the raw history, the paired
operations, each node's audit events); checkers never read files themselves,
so the same checker runs on a live run, a stored run dir or a synthetic
test input. Verdicts merge Jepsen's way: `False` beats `"unknown"` beats
`True` — one proven anomaly makes a run invalid; otherwise any checker that
could not decide makes the whole verdict undecided.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Literal, Protocol

import msgspec

from checkers.history import Event, Operation

Validity = bool | Literal["unknown"]
UNKNOWN: Literal["unknown"] = "unknown"


class Anomaly(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One violation a checker found, with what it involves."""

    kind: str
    message: str
    # The history ops (by invoke index) or audit events involved.
    ops: list[int] = msgspec.field(default_factory=list)
    events: list[dict[str, Any]] = msgspec.field(default_factory=list)
    revisions: list[int] = msgspec.field(default_factory=list)
    time: int | float | None = None


class CheckerResult(msgspec.Struct, kw_only=True):
    """One checker's verdict: valid, what was wrong, and what it measured."""

    name: str
    valid: Validity
    anomalies: list[Anomaly] = msgspec.field(default_factory=list)
    figures: dict[str, Any] = msgspec.field(default_factory=dict)
    error: str | None = None


class CheckContext(msgspec.Struct, kw_only=True):
    """Everything a checker may read about one run."""

    plan: Mapping[str, Any] = msgspec.field(default_factory=dict)
    events: list[Event] = msgspec.field(default_factory=list)
    operations: list[Operation] = msgspec.field(default_factory=list)
    # node id -> that node's audit events (docs/events.md), in file order;
    # None when the run left no audit logs (a bare history.jsonl).
    audit: dict[str, list[dict[str, Any]]] | None = None
    # A simulated run's omniscient invariant report (checkers.sim); None elsewhere.
    sim: dict[str, Any] | None = None
    # node id -> the lines of its log (checkers.node_logs); None when the run kept none.
    logs: dict[str, list[str]] | None = None
    options: Mapping[str, Any] = msgspec.field(default_factory=dict)

    def setting(self, key: str, default: Any = None) -> Any:
        """A checker setting: the caller's option, else the plan's field, else
        the plan's free-form `options`, else `default`."""
        for source in (self.options, self.plan, self.plan.get("options")):
            if isinstance(source, Mapping) and source.get(key) is not None:
                return source[key]
        return default


class Checker(Protocol):
    """A checker: a name and a pure function of a run's context."""

    @property
    def name(self) -> str:
        """The key of this checker's result in results.json."""
        ...

    def check(self, ctx: CheckContext) -> CheckerResult:
        """Judges the run; may raise, which the composer turns into unknown."""
        ...


class NoopChecker:
    """A checker that finds everything valid: the protocol's null object."""

    name = "noop"

    def check(self, ctx: CheckContext) -> CheckerResult:
        """Returns valid with no anomalies."""
        return CheckerResult(name=self.name, valid=True)


def merge_validity(values: Iterable[Validity]) -> Validity:
    """Merges verdicts: False > "unknown" > True; no verdicts is True."""
    merged: Validity = True
    for v in values:
        if v is False:
            return False
        if v == UNKNOWN:
            merged = UNKNOWN
    return merged


MAX_ANOMALIES_PER_KIND = 50


def verdict(name: str, anomalies: list[Anomaly], **figures: Any) -> CheckerResult:
    """A result that is invalid exactly when there are anomalies.

    A systematic bug can produce an anomaly per operation; results.json keeps
    the first `MAX_ANOMALIES_PER_KIND` of each kind and counts them all in
    the `anomaly_counts` figure.
    """
    counts = Counter(a.kind for a in anomalies)
    kept: list[Anomaly] = []
    seen: Counter[str] = Counter()
    for a in anomalies:
        seen[a.kind] += 1
        if seen[a.kind] <= MAX_ANOMALIES_PER_KIND:
            kept.append(a)
    if counts:
        figures["anomaly_counts"] = dict(counts)
    return CheckerResult(name=name, valid=not anomalies, anomalies=kept, figures=figures)
