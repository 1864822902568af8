"""Convergence after the faults heal: the end state a quiet cluster must reach.

Theory of operation. The run's last fault or membership change (history
time) must end at least `quiet_s` (default 5 s) before the history does; if
not, the run never gave the cluster a chance and the verdict is `unknown`.
So is a run whose `heal-all` did not complete ok: a fault may have
outlived it. Otherwise, from the nodes' audit events (each node's last word
per group):

- every zone partition's pending, planned and cancel are empty, and stable
  equals the last target (`end_targets`: the newest pending or planned
  written, or pending again when a trigger deleted planned because pending
  already was its target); after a cancel, when nothing was pending or
  planned since, either side is a legal end: old (cancelled) or new
  (cannot-cancel: the change had already committed and finished as done);
- each group has exactly one node whose last role is leader in the group's
  latest leadership term and has seen no later term (a node's role resets
  when it reports `started`), every voter follows it in that term and holds
  its configuration, which is stable (not joint) and, for a partition's
  group (`part-<partition>`), has voters equal to that partition's stable;
- the group's voters agree on (applied index, log digest, content digest)
  as they reported them when the harness asked, just before it collected
  the logs (`applied` with reason `collect`; figure
  `groups-judged-at-collection`), unless the group was still being written
  as the reports were taken one node after another (its furthest voter
  applied an entry under STILL_WRITTEN_S before its report, and no voter is
  two periodic reports behind it: the metastore's group takes lease
  renewals to the very end). A group with a voter that did not report then
  (an older run, a node that did not answer) is judged by the periodic
  reports instead: the voters agree on their last `applied`, but for a
  voter that installed a snapshot at or past the
  furthest report of the group: it jumped over that index and can report
  no earlier than the next one, so it is not compared, and is counted
  (figure `replicas-unobserved`, each named in `unobserved`) rather than
  called diverged on no evidence (a sim property run, seed 162737: voters
  that joined part-1 by a snapshot at 60, after the report at 50, in a
  group that never reached 100); and at any index two nodes both reported, their log
  digests agree (`digest-mismatch`: they applied different entries) and
  their content digests agree (`state-mismatch`: the same entries, or
  entries the log digest cannot tell apart, made different states: a
  nondeterministic apply, a bad snapshot restore). The content digest
  (`state`) hashes the state machine's keys, values and revisions in key
  order at that applied index; events without one (older runs) are
  compared by the log digest alone.

Stability (L2: no role or term change among the final voters in the last
half of the quiet period) and availability (L3: the quiet period's client
operations are answered within a bound) are in checkers/quiet.py.

A run without audit events is `unknown`: nothing here can be judged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from checkers.api import UNKNOWN, Anomaly, CheckContext, CheckerResult, verdict
from checkers.assignments import peers_of, replay_partitions
from checkers.history import Operation
from checkers.quiet import check_availability, check_stability, main_phase_end
from checkers.stats import change_windows, fault_windows

DEFAULT_QUIET_S = 5.0
STILL_WRITTEN_S = 2.0
COLLECT = "collect"  # an `applied` report's reason when the harness asked for it at the end
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
        quiet_s = float(ctx.setting("quiet_s", DEFAULT_QUIET_S))
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
        unhealed = [op for op in ctx.operations if op.f == "heal-all" and op.type != "ok"]
        if unhealed:
            # A fault may have outlived the heal (a failpoint a busy node never
            # confirmed off): the quiet period was not seen to be quiet.
            why = f"heal-all did not complete ok: {unhealed[-1].error}"
            return CheckerResult(name=self.name, valid=UNKNOWN, error=why)
        out: list[Anomaly] = []
        stable = self._assignments(ctx.audit, out, unrestored(ctx.operations))
        groups = group_ends(ctx.audit, out)
        walls = [ev.get("wall") for evs in ctx.audit.values() for ev in evs[-1:]]
        audit_end = max((w for w in walls if isinstance(w, int | float)), default=0.0)
        voters: dict[str, set[str]] = {}
        unobserved: list[str] = []
        at_collection = 0  # groups whose every voter reported when the logs were collected
        for group in sorted(groups):
            final = self._group(group, groups[group], stable, out, audit_end, unobserved)
            if final is not None:
                voters[group] = final
                at_collection += all(n in groups[group].collected for n in final)
        main_end = main_phase_end(ctx, last_end)
        judged, late = check_stability(ctx, voters, last_end, main_end, quiet_s, out)
        figures = check_availability(ctx, main_end, out)
        return verdict(self.name, out, groups=len(groups), partitions=len(stable),
                       **{"stability-groups": judged, "stability-late-followers": late,
                          "replicas-unobserved": len(unobserved), "unobserved": unobserved,
                          "groups-judged-at-collection": at_collection},
                       **figures)  # fmt: skip

    @staticmethod
    def _assignments(
        audit: Any, out: list[Anomaly], unrestored: str | None
    ) -> dict[str, tuple[str, ...] | None]:
        """Checks each partition's final keys; returns group -> final stable peers."""
        scratch: list[Anomaly] = []  # ordering rules are the revisions checker's job
        stable: dict[str, tuple[str, ...] | None] = {}
        targets = end_targets(audit)
        for (zone, part), p in replay_partitions(audit, scratch).items():
            where = f"zone {zone} partition {part}"
            left = [k for k in ("pending", "planned", "cancel") if p.state.get(k)]
            if left:
                why = f" ({unrestored})" if unrestored else ""
                _flag(out, "rebalance-not-finished", f"{where}: {', '.join(left)} not empty{why}")
            final = peers_of(p.state.get("stable"))
            legal = targets.get((zone, part), set())
            if legal and final not in legal:
                _flag(
                    out,
                    "stable-not-target",
                    f"{where}: stable is {list(final or ())}, last target "
                    f"{' or '.join(str(list(t)) for t in sorted(legal))}",
                )
            stable[f"part-{part}"] = final
        return stable

    @staticmethod
    def _group(
        group: str,
        end: _GroupEnd,
        stable: dict[str, tuple[str, ...] | None],
        out: list[Anomaly],
        audit_end: float,
        unobserved: list[str],
    ) -> set[str] | None:
        """Judges one group's end; returns its final voters (None without one leader)."""
        # A node is leader at the end if its last role says so and it has seen
        # no later term since: a leader that crashed (a restart emits no role)
        # or was cut off then heard of a newer term is a follower now.
        claims = {
            n: int(ev.get("term") or 0)
            for n, ev in end.role.items()
            if ev.get("role") == "leader"
            and int(ev.get("term") or 0) == end.term.get(n)
            and end.leader.get(n, {}).get("leader", n) == n
        }
        top = max(claims.values(), default=0)
        leaders = sorted(n for n, term in claims.items() if term == top)
        if len(leaders) != 1:
            # With none, "0 leaders in term 0" named a term no replica was in.
            reached = max(end.term.values(), default=0)
            said = (f"{len(leaders)} leaders in term {top}: {leaders}" if leaders else
                    f"no leader (the highest term its replicas reached: {reached})")  # fmt: skip
            _flag(out, "leader-count", f"{group} ends with {said}")
            return None
        leader = leaders[0]
        leader_conf = end.conf.get(leader, {})
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
        lost = sorted(
            n
            for n in voters or ()
            if n in end.leader and (end.leader[n].get("leader"), end.term[n]) != (leader, top)
        )
        if lost:
            _flag(
                out,
                "voters-not-following",
                f"{group}: voters {lost} do not follow {leader} in term {top}",
            )
        behind = sorted(
            n
            for n in voters or ()
            if n in end.conf and _conf_of(end.conf[n]) != _conf_of(leader_conf)
        )
        if behind:
            _flag(
                out,
                "voters-config-differs",
                f"{group}: voters {behind} hold a configuration other than leader {leader}'s",
                *(end.conf[n] for n in behind),
            )
        if voters and all(n in end.collected for n in voters):
            at_end = {n: _state(end.collected[n]) for n in voters}
            if len(set(at_end.values())) > 1 and not _written_at_collection(end, voters):
                _flag(out, "replicas-diverge",
                      f"{group} voters differ when the logs were collected: {at_end}",
                      *(end.collected[n] for n in voters))  # fmt: skip
            return set(voters) | set(peers_of(leader_conf.get("old_peers")) or ())
        # A voter with no digest while others have one has not caught up,
        # unless a snapshot took it past the furthest report (module doc).
        last = {n: _state(end.applied.get(n)) for n in voters or ()}
        furthest = max((v[0] for v in last.values() if isinstance(v[0], int)), default=None)
        jumped = sorted(n for n, v in last.items() if furthest is not None
                        and (v[0] if isinstance(v[0], int) else -1) < furthest
                        and end.snapshot.get(n, -1) >= furthest)  # fmt: skip
        for n in jumped:
            unobserved.append(f"{n} in {group}: snapshot at {end.snapshot[n]}, past the "
                              f"last digest report at {furthest}")  # fmt: skip
            del last[n]
        differ = any(v != (None, None, None) for v in last.values()) and len(set(last.values())) > 1
        # Caught mid-stream (still written) is no divergence: equal digests at
        # equal indexes are checked as they are reported.
        if differ and not _still_written(end, voters or (), audit_end):
            _flag(out, "replicas-diverge", f"{group} voters end at different states: {last}")
        old = peers_of(leader_conf.get("old_peers"))
        return set(voters or ()) | set(old or ())


def unrestored(operations: list[Operation]) -> str | None:
    """What to say when the rebalance workload's closing restore of the zone
    (every partition back in, every node admitted: `workloads.rebalance`) was
    asked and never applied, or None. A partition it would have brought back
    is no longer driven, so its pending may stay set: the reader of a
    `rebalance-not-finished` needs to know the harness's restore failed."""
    tries = [op for op in operations if op.f == "alter-zone" and _is_restore(op.value)]
    if not tries or any(op.type == "ok" for op in tries):
        return None
    last = tries[-1]
    said = f": {last.error}" if last.error else ""
    return (f"the workload's closing restore of the zone never applied: {len(tries)} "
            f"tries, the last {last.type}{said}")  # fmt: skip


def _is_restore(value: Any) -> bool:
    # The restore alone asks two changes at once; every other alter asks one.
    return isinstance(value, dict) and set(value) == {"partitions", "filter"}


def end_targets(audit: dict[str, list[dict[str, Any]]]) -> dict[Any, set[tuple[str, ...]]]:
    """Per (zone, partition): the peer sets stable may legally end at.

    The target is the newest pending or planned written; a trigger that
    deletes planned because pending already is its target (invokes.py)
    makes pending the target again, or, while a cancel of it is outstanding,
    the cancel's two sides; a cancel makes its old side the target and its
    new side legal too (cannot-cancel), until the next pending or planned.
    With no trigger at all, the first stable is its own target.
    """
    writes: dict[tuple[Any, Any], dict[int, dict[str, Any]]] = {}
    for node in sorted(audit):
        for ev in audit[node]:
            if ev.get("kind") == "assignments-written" and isinstance(ev.get("revision"), int):
                part = (ev.get("zone"), ev.get("partition"))
                writes.setdefault(part, {}).setdefault(ev["revision"], ev)
    out: dict[Any, set[tuple[str, ...]]] = {}
    for part, by_rev in writes.items():
        state: dict[str, Any] = {}
        target: tuple[str, ...] | None = None
        cancel_new: tuple[str, ...] | None = None
        for rev in sorted(by_rev):
            keys = {str(k).rsplit(".", 1)[-1]: (c.get("new") if isinstance(c, dict) else c)
                    for k, c in (by_rev[rev].get("keys") or {}).items()}  # fmt: skip
            state.update(keys)
            for kind in ("pending", "planned"):
                if peers_of(keys.get(kind)):
                    target, cancel_new = peers_of(keys[kind]), None
            deleted_planned = "planned" in keys and not peers_of(keys["planned"])
            outstanding = state.get("cancel")
            if deleted_planned and "pending" not in keys:
                if isinstance(outstanding, dict):
                    # Under a cancel of that pending the cancel decides, old or
                    # new (seed 67), whatever planned was written since it.
                    target = peers_of(outstanding.get("old")) or target
                    cancel_new = peers_of(outstanding.get("new"))
                else:
                    target = peers_of(state.get("pending")) or target
            cancel = keys.get("cancel")
            if isinstance(cancel, dict):
                target = peers_of(cancel.get("old")) or target
                cancel_new = peers_of(cancel.get("new"))
            if target is None and peers_of(keys.get("stable")):
                target = peers_of(keys["stable"])
        out[part] = {t for t in (target, cancel_new) if t is not None}
    return out


class _GroupEnd:
    """Each node's last word on one group: role, term, leader, config, digest."""

    def __init__(self) -> None:
        self.role: dict[str, dict[str, Any]] = {}
        self.term: dict[str, int] = {}
        self.leader: dict[str, dict[str, Any]] = {}
        self.conf: dict[str, dict[str, Any]] = {}
        self.applied: dict[str, dict[str, Any]] = {}
        self.previous_applied: dict[str, dict[str, Any]] = {}  # the report before the last
        self.digests: dict[int, dict[str, Any]] = {}
        self.states: dict[int, dict[str, Any]] = {}  # index -> first report with a `state`
        self.snapshot: dict[str, int] = {}  # the index of each node's last snapshot install
        self.collected: dict[str, dict[str, Any]] = {}  # the report asked for at collection

    def restart(self, node: str) -> None:
        """A restarted node starts as a follower with no known leader."""
        self.role.pop(node, None)
        self.leader.pop(node, None)

    def feed(self, group: str, node: str, ev: dict[str, Any], out: list[Anomaly]) -> None:
        """Takes one of `node`'s events on this group."""
        kind = ev.get("kind")
        if isinstance(ev.get("term"), int):
            self.term[node] = max(self.term.get(node, 0), ev["term"])
        if kind == "role":
            self.role[node] = ev
            self.leader.pop(node, None)  # a new role: judge by what it names next
        elif kind == "step-down":
            self.role[node] = {**ev, "role": "follower"}
        elif kind == "leader":
            self.leader[node] = ev
        elif kind == "config-applied":
            self.conf[node] = ev
        elif kind == "snapshot-installed" and isinstance(ev.get("index"), int):
            self.snapshot[node] = ev["index"]
        elif kind == "applied" and isinstance(ev.get("index"), int):
            if ev.get("reason") == COLLECT:
                self.collected[node] = ev
            else:
                last = self.applied.get(node)
                if last is not None and last.get("index") != ev["index"]:
                    self.previous_applied[node] = last
                self.applied[node] = ev
            first = self.digests.setdefault(ev["index"], ev)
            if first.get("digest") != ev.get("digest"):
                _flag(
                    out,
                    "digest-mismatch",
                    f"{group} index {ev['index']}: "
                    f"{first.get('node')} and {node} applied different entries",
                    first,
                    ev,
                )
            if isinstance(ev.get("state"), str):
                seen = self.states.setdefault(ev["index"], ev)
                if seen.get("state") != ev["state"]:
                    same_log = seen.get("digest") == ev.get("digest")
                    _flag(
                        out,
                        "state-mismatch",
                        f"{group} index {ev['index']}: {seen.get('node')} and {node} hold "
                        f"different states{' from the same log' if same_log else ''}",
                        seen,
                        ev,
                    )


def group_ends(audit: dict[str, list[dict[str, Any]]], out: list[Anomaly]) -> dict[str, _GroupEnd]:
    """Replays every node's events into each group's end state."""
    ends: dict[str, _GroupEnd] = {}
    for node in sorted(audit):
        for ev in audit[node]:
            group = ev.get("group")
            if ev.get("kind") == "started" and group is None:
                for end in ends.values():
                    end.restart(node)
            elif isinstance(group, str):
                ends.setdefault(group, _GroupEnd()).feed(group, node, ev, out)
    return ends


def _conf_of(ev: dict[str, Any]) -> tuple[Any, ...]:
    # Not the index: a snapshot's configuration carries the snapshot's index.
    return peers_of(ev.get("peers")), peers_of(ev.get("old_peers"))


def _still_written(end: _GroupEnd, voters: tuple[str, ...], audit_end: float) -> bool:
    """Whether the group's voters differ at their last periodic reports only
    because it was still being written when the logs were collected: the
    furthest voter's report is within STILL_WRITTEN_S of the end (the
    metastore's group takes lease renewals to the very end; a KV group, quiet
    for the whole quiet period, never qualifies)."""

    def fresh(ev: dict[str, Any]) -> bool:
        wall = ev.get("wall")
        return isinstance(wall, int | float) and audit_end - wall <= STILL_WRITTEN_S

    return _caught_mid_write(end.applied, voters, fresh, lambda top: end.previous_applied.get(top))


def _written_at_collection(end: _GroupEnd, voters: tuple[str, ...]) -> bool:
    """Whether the voters' reports at collection differ only because the group
    was still being written as they were taken, one node after another: the
    furthest voter applied an entry within STILL_WRITTEN_S before its report
    (`idle_s`)."""

    def fresh(ev: dict[str, Any]) -> bool:
        idle = ev.get("idle_s")
        return isinstance(idle, int | float) and idle <= STILL_WRITTEN_S

    def floor_of(top: str) -> dict[str, Any] | None:
        return end.previous_applied.get(top) or end.applied.get(top)

    return _caught_mid_write(end.collected, voters, fresh, floor_of)


def _caught_mid_write(
    reports: dict[str, dict[str, Any]],
    voters: tuple[str, ...],
    fresh: Callable[[dict[str, Any]], bool],
    floor_of: Callable[[str], dict[str, Any] | None],
) -> bool:
    """The shape both excuses share: every voter reported, the furthest one's
    report is `fresh`, and no voter is below `floor_of(furthest)`, one periodic
    report back (no voter two reports behind); without an earlier report the
    floor is the furthest report itself."""
    if not voters or any(n not in reports for n in voters):
        return False
    indexes = {n: int(reports[n].get("index") or 0) for n in voters}
    top = max(indexes, key=indexes.__getitem__)
    if not fresh(reports[top]):
        return False
    floor = floor_of(top) or reports[top]
    return all(i >= int(floor.get("index") or 0) for i in indexes.values())


def _state(ev: dict[str, Any] | None) -> tuple[Any, Any, Any]:
    if ev is None:
        return None, None, None
    return ev.get("index"), ev.get("digest"), ev.get("state")
