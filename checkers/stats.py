"""Run statistics and the validity guards that make a too-weak run `unknown`.

Theory of operation. From the paired operations alone:

- latency quantiles (ms) of `ok` client operations, per `f` and overall;
- throughput: `ok` client completions per one-second bucket of run time;
- fault counts: per kind, how many fault ops were applied and how many
  were not, with the reasons (`fault_counts`; results.json's `faults`);
- windows: each applied fault (a nemesis op, from its invoke until the completion of
  the op that heals it: `heal-<kind>` or any `heal*`, `start` after
  `kill`/`stop`, `resume` after `pause`, `stop-X` after `start-X`; else
  the end of the run) and each membership change (an op, by any process,
  whose `f` is in `MEMBERSHIP_FS`, from invoke to completion); for each,
  the longest stretch without an `ok` client completion inside it: the
  unavailability it caused.

Guards (the verdict is `unknown` with the reason, never `False`: a weak run
proves nothing either way): fewer than `min_ok_ops` acknowledged client ops
(default 10), or faults and membership changes that never overlapped while
the run had both (or the plan/options set `require_overlap`).
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from checkers.api import UNKNOWN, CheckContext, CheckerResult
from checkers.history import Operation

MEMBERSHIP_FS = frozenset(
    {"change-peers", "alter-zone", "set-replicas", "rebalance", "cancel-rebalance", "stale-request"}
)
DEFAULT_MIN_OK_OPS = 10
_HEALED_BY = {"kill": "start", "compact-kill": "start", "stop": "start", "pause": "resume"}
NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000


def quantiles(values: list[int]) -> dict[str, float]:
    """count, p50/p90/p99/max in ms of nanosecond durations (nearest rank)."""
    if not values:
        return {"count": 0}
    ordered = sorted(values)

    def at(q: float) -> float:
        rank = max(0, min(len(ordered) - 1, int(q * len(ordered) + 0.999999) - 1))
        return round(ordered[rank] / NS_PER_MS, 3)

    return {"count": len(ordered), "p50": at(0.5), "p90": at(0.9), "p99": at(0.99),
            "max": round(ordered[-1] / NS_PER_MS, 3)}  # fmt: skip


def _heals(fault_f: str, f: str) -> bool:
    if f.startswith("heal"):
        return f in ("heal", "heal-all") or f == f"heal-{fault_f}"
    if fault_f.startswith("start-"):
        return f == "stop-" + fault_f.removeprefix("start-")
    return _HEALED_BY.get(fault_f) == f


def _nemesis_ops(ops: list[Operation]) -> list[Operation]:
    return [op for op in ops if not isinstance(op.process, int) and op.f not in MEMBERSHIP_FS]


def _is_heal(op: Operation) -> bool:
    return op.f.startswith(("heal", "stop-")) or op.f in ("start", "resume")


def is_applied(op: Operation) -> bool:
    """Whether a fault op was applied. Its completion's `applied` says so
    (`nemesis.schedule`); older faultline histories completed a fault that
    did nothing `info` with an `error` (or `unresolved`); Jepsen's nemesis
    completes every op `info`, so a bare `info` counts as applied. A fault
    that never completed was not seen to apply."""
    result = op.result if isinstance(op.result, dict) else {}
    if "applied" in result:
        return result["applied"] is True
    if op.complete_time is None or op.type == "fail":
        return False
    return op.type == "ok" or (op.error is None and "unresolved" not in result)


def not_applied_reason(op: Operation) -> str:
    """Why a fault op was not applied, in full."""
    result = op.result if isinstance(op.result, dict) else {}
    if op.complete_time is None:
        return "never completed"
    why = result.get("reason") or result.get("unresolved") or op.error or f"completed {op.type}"
    return str(why)


_TRAILING_DETAIL = re.compile(r"\s*\((?:[^()]|\([^()]*\))*\)$")  # one level of nesting


def short_reason(why: str) -> str:
    """A reason without its exception class and its trailing parenthesised
    detail (which node, which URL), so that faults not applied for one cause
    count together."""
    head, sep, tail = why.partition(": ")
    if sep and head.isidentifier() and head[:1].isupper():
        why = tail  # "DBError: etcd has no failpoints" -> "etcd has no failpoints"
    return _TRAILING_DETAIL.sub("", why).strip() or why


def unapplied_faults(ops: list[Operation]) -> list[dict[str, Any]]:
    """Fault ops that were not applied: their kind, time and reason (report ticks)."""
    return [{"f": op.f, "time": op.invoke_time, "reason": not_applied_reason(op)}
            for op in _nemesis_ops(ops) if not _is_heal(op) and not is_applied(op)]  # fmt: skip


def fault_counts(ops: list[Operation]) -> dict[str, dict[str, Any]]:
    """Per fault kind (in order of first use): applied, not_applied, and the
    short reasons of those not applied with their counts."""
    counts: dict[str, dict[str, Any]] = {}
    for op in _nemesis_ops(ops):
        if _is_heal(op):
            continue
        c = counts.setdefault(op.f, {"applied": 0, "not_applied": 0, "reasons": {}})
        if is_applied(op):
            c["applied"] += 1
        else:
            c["not_applied"] += 1
            why = short_reason(not_applied_reason(op))
            c["reasons"][why] = c["reasons"].get(why, 0) + 1
    return counts


def describe_fault_counts(counts: dict[str, dict[str, Any]]) -> str:
    """`partition 2 applied; pause 0 of 2 applied (no leader known)`; `none` if empty."""
    parts = []
    for kind, c in counts.items():
        applied, total = c["applied"], c["applied"] + c["not_applied"]
        if applied == total:
            parts.append(f"{kind} {applied} applied")
            continue
        reasons = [f"{why} x{n}" if n > 1 and len(c["reasons"]) > 1 else why
                   for why, n in c["reasons"].items()]  # fmt: skip
        parts.append(f"{kind} {applied} of {total} applied ({'; '.join(reasons)})")
    return "; ".join(parts) or "none"


def fault_windows(ops: list[Operation], end: int) -> list[dict[str, Any]]:
    """The nemesis's fault windows (see the module doc), in start order: applied
    faults only (one not applied is `unapplied_faults`', a moment, not a window)."""
    windows: list[dict[str, Any]] = []
    open_: list[dict[str, Any]] = []
    for op in _nemesis_ops(ops):
        healed = [w for w in open_ if _heals(w["f"], op.f)]
        if healed:
            for w in healed:
                w["end"] = op.complete_time if op.complete_time is not None else end
                open_.remove(w)
            continue
        if _is_heal(op) or not is_applied(op):
            continue  # a heal with nothing to heal, or a fault that never happened
        window = {"f": op.f, "start": op.invoke_time, "end": end}
        windows.append(window)
        open_.append(window)
    return windows


def change_windows(ops: list[Operation], end: int) -> list[dict[str, Any]]:
    """Membership-change windows: invoke to completion (or the end of the run)."""
    return [
        {"f": op.f, "start": op.invoke_time,
         "end": op.complete_time if op.complete_time is not None else end}
        for op in ops if op.f in MEMBERSHIP_FS
    ]  # fmt: skip


def longest_gap(ok_times: Sequence[int], start: int, end: int) -> int:
    """The longest stretch of [start, end] without a time in sorted `ok_times`."""
    lo, hi = bisect.bisect_left(ok_times, start), bisect.bisect_right(ok_times, end)
    points = [start, *ok_times[lo:hi], end]
    return max(b - a for a, b in itertools.pairwise(points))


class StatsChecker:
    """Measures the run and guards against runs too weak to judge."""

    name = "stats"

    def check(self, ctx: CheckContext) -> CheckerResult:
        """Valid with figures, or unknown naming the guard that tripped."""
        ops = ctx.operations
        end = ctx.events[-1].time if ctx.events else 0
        clients = [op for op in ops if isinstance(op.process, int) and op.f not in MEMBERSHIP_FS]
        ok = [op for op in clients if op.type == "ok" and op.complete_time is not None]
        ok_times = sorted(op.complete_time for op in ok if op.complete_time is not None)
        faults, changes = fault_windows(ops, end), change_windows(ops, end)
        for w in faults + changes:
            w["unavailable_ms"] = round(longest_gap(ok_times, w["start"], w["end"]) / NS_PER_MS, 3)
        overlaps = sum(
            1 for f in faults for c in changes if f["start"] <= c["end"] and c["start"] <= f["end"]
        )
        by_f: dict[str, list[int]] = {}
        for op in ok:
            by_f.setdefault(op.f, []).append((op.complete_time or 0) - op.invoke_time)
        buckets = Counter(t // NS_PER_S for t in ok_times)
        figures: dict[str, Any] = {
            "ops": len(clients),
            "outcomes": dict(Counter(op.type for op in clients)),
            "latency_ms": {f: quantiles(v) for f, v in sorted(by_f.items())}
            | {"all": quantiles([d for v in by_f.values() for d in v])},
            "throughput_per_s": [buckets.get(s, 0) for s in range(end // NS_PER_S + 1)],
            "ok_per_s": round(len(ok) / max(end / NS_PER_S, 1e-9), 3),
            "faults": faults,
            "changes": changes,
            "fault_change_overlaps": overlaps,
        }
        reasons = self._guards(ctx, len(ok), faults, changes, overlaps)
        return CheckerResult(
            name=self.name, valid=UNKNOWN if reasons else True, figures=figures,
            error="; ".join(reasons) or None,
        )  # fmt: skip

    @staticmethod
    def _guards(
        ctx: CheckContext, n_ok: int, faults: list[Any], changes: list[Any], overlaps: int
    ) -> list[str]:
        reasons = []
        min_ok = int(ctx.setting("min_ok_ops", DEFAULT_MIN_OK_OPS))
        if n_ok < min_ok:
            reasons.append(f"traffic too low: {n_ok} ok client ops, fewer than {min_ok}")
        required = bool(ctx.setting("require_overlap", False))
        if (required or (faults and changes)) and not overlaps:
            reasons.append(
                f"no fault overlapped a membership change ({len(faults)} faults, "
                f"{len(changes)} changes)"
            )
        return reasons
