"""Convergence after the faults heal: the end state a quiet cluster must reach.

Theory of operation. The run's last fault or membership change (history
time) must end at least `quiet_s` (default 5 s) before the history does; if
not, the run never gave the cluster a chance and the verdict is `unknown`.
Otherwise, from the nodes' audit events (each node's last word per group):

- every zone partition's pending, planned and cancel are empty, and stable
  equals the last target (checkers/assignments.py replays the keys);
- each group has exactly one node whose last role is leader, its
  configuration is stable (not joint) and, for a partition's group
  (`part-<partition>`), its voters equal that partition's stable;
- the group's voters agree on their last `applied` (index, digest); and at
  any index two nodes both reported, their digests agree.

A run without audit events is `unknown`: nothing here can be judged.
"""

from __future__ import annotations

from typing import Any

from checkers.api import UNKNOWN, Anomaly, CheckContext, CheckerResult, verdict
from checkers.assignments import peers_of, replay_partitions
from checkers.audit import by_group
from checkers.stats import change_windows, fault_windows

DEFAULT_QUIET_S = 5.0
NS_PER_S = 1_000_000_000


def _flag(out: list[Anomaly], kind: str, message: str, *events: dict[str, Any]) -> None:
    out.append(Anomaly(kind=kind, message=message, events=[e for e in events if e]))


class ConvergenceChecker:
    """Checks the end state of a healed, quiet cluster."""

    name = "convergence"

    def check(self, ctx: CheckContext) -> CheckerResult:
        """Invalid when a healed cluster did not converge; unknown if it had no time to."""
        if not ctx.audit:
            return CheckerResult(name=self.name, valid=UNKNOWN, error="no audit events")
        quiet_s = float(ctx.options.get("quiet_s", ctx.plan.get("quiet_s", DEFAULT_QUIET_S)))
        end = ctx.events[-1].time if ctx.events else 0
        windows = fault_windows(ctx.operations, end) + change_windows(ctx.operations, end)
        last_end = max((w["end"] for w in windows), default=0)
        if ctx.events and end - last_end < quiet_s * NS_PER_S:
            return CheckerResult(
                name=self.name,
                valid=UNKNOWN,
                error=f"only {(end - last_end) / NS_PER_S:.1f}s of quiet after the last fault "
                f"or change; convergence needs {quiet_s:g}s",
            )
        out: list[Anomaly] = []
        stable = self._assignments(ctx.audit, out)
        groups = by_group(ctx.audit)
        for group in sorted(groups):
            self._group(group, groups[group], stable, out)
        return verdict(self.name, out, groups=len(groups), partitions=len(stable))

    @staticmethod
    def _assignments(audit: Any, out: list[Anomaly]) -> dict[str, tuple[str, ...] | None]:
        """Checks each partition's final keys; returns group -> final stable peers."""
        scratch: list[Anomaly] = []  # ordering rules are the revisions checker's job
        stable: dict[str, tuple[str, ...] | None] = {}
        for (zone, part), p in replay_partitions(audit, scratch).items():
            where = f"zone {zone} partition {part}"
            left = [k for k in ("pending", "planned", "cancel") if p.state.get(k)]
            if left:
                _flag(out, "rebalance-not-finished", f"{where}: {', '.join(left)} not empty")
            final = peers_of(p.state.get("stable"))
            if p.target is not None and final != p.target:
                _flag(
                    out,
                    "stable-not-target",
                    f"{where}: stable is {list(final or ())}, last target {list(p.target)}",
                )
            stable[f"part-{part}"] = final
        return stable

    @staticmethod
    def _group(
        group: str,
        events: list[dict[str, Any]],
        stable: dict[str, tuple[str, ...] | None],
        out: list[Anomaly],
    ) -> None:
        role: dict[str, dict[str, Any]] = {}
        conf: dict[str, dict[str, Any]] = {}
        applied: dict[str, dict[str, Any]] = {}
        digests: dict[int, dict[str, Any]] = {}
        for ev in events:
            node, kind = str(ev.get("node")), ev.get("kind")
            if kind == "role":
                role[node] = ev
            elif kind == "step-down":
                role[node] = {**ev, "role": "follower"}
            elif kind == "config-applied":
                conf[node] = ev
            elif kind == "applied" and isinstance(ev.get("index"), int):
                applied[node] = ev
                first = digests.setdefault(ev["index"], ev)
                if first.get("digest") != ev.get("digest"):
                    _flag(
                        out,
                        "digest-mismatch",
                        f"{group} index {ev['index']}: "
                        f"{first.get('node')} and {node} applied different states",
                        first,
                        ev,
                    )
        leaders = sorted(n for n, ev in role.items() if ev.get("role") == "leader")
        if len(leaders) != 1:
            _flag(out, "leader-count", f"{group} ends with {len(leaders)} leaders: {leaders}")
            return
        leader_conf = conf.get(leaders[0], {})
        voters = peers_of(leader_conf.get("peers"))
        if leader_conf.get("old_peers") is not None:
            _flag(out, "joint-at-end", f"{group} ends in a joint configuration", leader_conf)
        want = stable.get(group)
        if want is not None and voters != want:
            _flag(
                out,
                "voters-not-stable",
                f"{group} voters {list(voters or ())} but stable assignment {list(want)}",
                leader_conf,
            )
        # A voter with no digest while others have one has not caught up.
        last = {n: _state(applied.get(n)) for n in voters or ()}
        if any(v != (None, None) for v in last.values()) and len(set(last.values())) > 1:
            _flag(out, "replicas-diverge", f"{group} voters end at different states: {last}")


def _state(ev: dict[str, Any] | None) -> tuple[Any, Any]:
    return (None, None) if ev is None else (ev.get("index"), ev.get("digest"))
