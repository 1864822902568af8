"""Raft invariants over nodes' audit events (docs/events.md).

Theory of operation: each node's events are replayed in the order the node
emitted them, one small state per (node, group): its role and term, the
configuration in force and its index, the highest index it knows
committed (its config-committed events, and the `commit` that config-applied
and snapshot-installed report: a restarted node reads its commit from its
hard state and says nothing more), the peers that caught up in the current
change, and whether it must step down. Global tables span nodes: leaders per (group, term) and the
committed configuration at each (group, index). The invariants:

- election safety: at most one node becomes leader per (group, term);
- a node becomes leader only while it is a voter of its configuration;
- configuration entries follow stable(old) -> joint(new, old) -> stable(new)
  (a repeat of the configuration in force is allowed), checked on each
  leader's appends and on each group's committed sequence (followers' logs
  may hold entries a new leader overwrites, committed ones never change);
- a leader appends no configuration entry while the one in force is
  uncommitted (the core applies configurations on append);
- a leader appends joint(new, old) only after every peer in new - old was
  reported caught up (`catchup-done`, within its margin) in this change;
- a leader that commits a stable entry without itself steps down;
- a committed configuration entry was stored by a majority of its voters,
  of both sets when joint, by the time it was first known committed (where
  nodes share a clock; ever, elsewhere): the leader commits it while it is
  the configuration in force, so only such a quorum may commit it (checked
  where every voter's log is in; the evidence and its timing are
  checkers/raft_stored.py). A node stored it if it reported it appended, a
  snapshot at or past it, or the same configuration at that index as applied
  or committed: both come from the node's own log, and the daemon writes a
  round's events only after its fsync, so a kill -9 in between leaves the
  entry stored with its `config-appended` unwritten; the restart's
  config-applied (from the durable log) and later config-committed remain;
- nodes agree on the configuration committed at each index, and committed
  configurations' tokens (the change request's revision) never go back;
- a configuration restored from a snapshot (a config-applied at an index
  where no configuration entry was appended) is the newest one committed at
  or before that index.

The leadership rules (R2 transfers, R10 vote lease, R12 removal) are in
checkers/raft_leadership.py, R11 (check quorum, from the history's
partitions) in checkers/raft_quorum.py; every anomaly kind's catalog rule is in
checkers/catalog.py.

A node's starting configuration is taken from its first `change-stage`
(catching-up) when the core reported none; a node that names another node
as leader (or reports `started`) is a follower again, since a restart emits
no role change. Where the configuration is still unknown, the checks that
need it are skipped rather than guessed: the `figures` count the checks run.
"""

from __future__ import annotations

from typing import Any

from checkers import raft_leadership as lead
from checkers.api import UNKNOWN, Anomaly, CheckContext, CheckerResult, verdict
from checkers.raft_conf import (
    Conf,
    NodeGroup,
    conf_of,
    describe,
    has_majority,
    transition_error,
)
from checkers.raft_quorum import check_quorum_loss
from checkers.raft_stored import SHARED_CLOCK_BACKENDS, StoreEvidence


class RaftChecker:
    """Checks election safety and change-peers invariants from audit events."""

    name = "raft"

    def check(self, ctx: CheckContext) -> CheckerResult:
        """Replays every node's audit events; unknown when there are none."""
        if not ctx.audit:
            return CheckerResult(name=self.name, valid=UNKNOWN, error="no audit events")
        run = Run()
        for node in sorted(ctx.audit):
            run.replay(node, ctx.audit[node])
        run.check_committed_sequence()
        run.check_restored_configs()
        shared = ctx.setting("shared_clock")
        if shared is None:
            shared = ctx.plan.get("backend") in SHARED_CLOCK_BACKENDS
        run.check_commit_quorums(set(ctx.audit), timed=bool(shared))
        timing = check_quorum_loss(ctx, run.flag)
        return verdict(self.name, run.anomalies, **run.figures(), **timing)


class Run:
    def __init__(self) -> None:
        self.anomalies: list[Anomaly] = []
        self._seen: set[tuple[str, str, Any]] = set()
        self.leaders: dict[tuple[str, int], dict[str, dict[str, Any]]] = {}
        self.committed: dict[tuple[str, int], tuple[Conf, dict[str, Any]]] = {}
        self.appended: set[tuple[str, int]] = set()
        # Who stored which configuration entry, and when: a commit quorum's evidence.
        self.evidence = StoreEvidence()
        self.applied: list[dict[str, Any]] = []  # every config-applied, for the end check
        self.checked = dict.fromkeys(
            ("leader-voter", "transition", "joint-catchup", "commit-quorum", "vote-lease",
             "transfer-voter", "removed-step-down"), 0,
        )  # fmt: skip

    def flag(self, kind: str, key: Any, message: str, *events: dict[str, Any]) -> None:
        group = str(events[0].get("group")) if events else ""
        if (kind, group, key) in self._seen:
            return  # one anomaly per fact, however many nodes report it
        self._seen.add((kind, group, key))
        when = events[-1].get("mono_ns") if events else None
        self.anomalies.append(Anomaly(kind=kind, message=message, events=list(events), time=when))

    def figures(self) -> dict[str, Any]:
        groups = {g for g, _ in self.leaders}
        return {
            "groups": len(groups),
            "terms-with-leader": len(self.leaders),
            "committed-configs": len(self.committed),
            "checks": dict(self.checked),
        }

    def check_committed_sequence(self) -> None:
        """Consecutive committed configurations of each group are legal steps."""
        last: dict[str, tuple[int, Conf, dict[str, Any]]] = {}
        for (group, index), (conf, ev) in sorted(self.committed.items()):
            if group in last:
                _, prev, prev_ev = last[group]
                self.checked["transition"] += 1
                problem = transition_error(prev, conf)
                if problem is not None:
                    self.flag(
                        problem,
                        index,
                        f"{group} committed {describe(conf)} at {index} right after "
                        f"{describe(prev)}",
                        prev_ev,
                        ev,
                    )
                # The token is the change request's revision: a committed
                # configuration from an older request than the one before it
                # means a stale request changed the group.
                old_token, token = prev_ev.get("token"), ev.get("token")
                if isinstance(old_token, int) and isinstance(token, int) and token < old_token:
                    self.flag(
                        "stale-token-committed",
                        index,
                        f"{group} committed token {token} at {index} after token {old_token}",
                        prev_ev,
                        ev,
                    )
            last[group] = (index, conf, ev)

    def check_restored_configs(self) -> None:
        """A configuration not from any appended entry (restored from a snapshot)
        equals the newest configuration committed at or before the snapshot."""
        by_group: dict[str, list[tuple[int, Conf]]] = {}
        for (group, index), (conf, _) in sorted(self.committed.items()):
            by_group.setdefault(group, []).append((index, conf))
        for ev in self.applied:
            group, index = str(ev.get("group")), int(ev.get("index") or 0)
            if (group, index) in self.appended:
                continue
            earlier = [c for i, c in by_group.get(group, []) if i <= index]
            if earlier and earlier[-1] != conf_of(ev):
                self.flag(
                    "restored-config-stale",
                    (ev.get("node"), index),
                    f"{ev.get('node')} restored {describe(conf_of(ev))} in {group} at {index}, "
                    f"but the configuration committed by then is {describe(earlier[-1])}",
                    ev,
                )

    def check_commit_quorums(self, logged: set[str], timed: bool) -> None:
        """Each committed configuration entry was stored by a majority of each
        of its voter sets by its first commit (checkers/raft_stored.py; at any
        time unless `timed`); skipped where a voter's audit log is missing."""
        when = "by its first commit" if timed else "ever"
        for (group, index), (conf, ev) in sorted(self.committed.items()):
            peers, old = conf
            if (group, index) not in self.appended or not set(peers) | set(old or ()) <= logged:
                continue  # a bootstrap configuration (no entry), or a voter's log is missing
            holders = self.evidence.holders(group, index, conf, timed)
            self.checked["commit-quorum"] += 1
            for members in [peers] if old is None else [peers, old]:
                if not has_majority(members, holders):
                    self.flag(
                        "commit-without-quorum",
                        index,
                        f"{group} committed {describe(conf)} at {index}, but only "
                        f"{sorted(holders & set(members))} of {list(members)} stored it {when}",
                        ev,
                    )
                    break

    def replay(self, node: str, events: list[dict[str, Any]]) -> None:
        states: dict[str, NodeGroup] = {}
        for ev in events:
            group = ev.get("group")
            if not isinstance(group, str):
                if ev.get("kind") == "started":  # a restart: every group starts over
                    for name, st in states.items():
                        _on_started(self, node, name, st, ev)
                continue
            st = states.setdefault(group, NodeGroup())
            kind = str(ev.get("kind"))
            if st.must_step_down is not None and kind not in _SAME_COMMIT:
                _stayed(self, node, group, st.must_step_down, f"then emitted {kind} as leader")
                st.must_step_down = None
            if st.timeout_now is not None and kind not in ("term", "role"):
                st.timeout_now = None  # it did not campaign on it
            handler = _HANDLERS.get(kind)
            if handler is not None:
                handler(self, node, group, st, ev)
        for group, st in states.items():
            if st.must_step_down is not None:
                _stayed(self, node, group, st.must_step_down, "never stepped down")


def _on_role(run: Run, node: str, group: str, st: NodeGroup, ev: dict[str, Any]) -> None:
    st.role = str(ev.get("role"))
    st.term = int(ev.get("term") or st.term)
    if st.role == "candidate":
        lead.on_candidate(run, node, group, st, ev)
    if st.role != "leader":
        st.must_step_down = None
        return
    st.caught_up = set()
    holders = run.leaders.setdefault((group, st.term), {})
    holders.setdefault(node, ev)
    if len(holders) > 1:
        run.flag(
            "two-leaders",
            st.term,
            f"{sorted(holders)} were all leader of {group} in term {st.term}",
            *holders.values(),
        )
    conf = st.applied
    if conf is not None:
        run.checked["leader-voter"] += 1
        # The core lets a node campaign as a voter of the previous
        # configuration while the entry that removed it is uncommitted
        # (RawNode._is_promotable): otherwise a group can deadlock.
        if not lead.may_campaign(node, st):
            run.flag(
                "leader-not-voter",
                (node, st.term),
                f"{node} became leader of {group} in term {st.term} outside {describe(conf)}",
                ev,
            )


def _on_step_down(run: Run, node: str, group: str, st: NodeGroup, ev: dict[str, Any]) -> None:
    if ev.get("reason") == "removed":
        lead.on_removed_step_down(run, node, group, st, ev)
    if st.must_step_down is not None and ev.get("reason") != "removed":
        _stayed(run, node, group, st.must_step_down, f"stepped down only for {ev.get('reason')}")
    st.role = "follower"
    st.must_step_down = None


def _stayed(run: Run, node: str, group: str, ev: dict[str, Any], why: str) -> None:
    run.flag(
        "removed-leader-stayed",
        (node, ev.get("index")),
        f"{node} committed {describe(conf_of(ev))} in {group} without itself and {why}",
        ev,
    )


def _on_leader(run: Run, node: str, group: str, st: NodeGroup, ev: dict[str, Any]) -> None:
    # A node that names another leader is not the leader, whatever its last
    # role event said: a restarted node starts as a follower silently.
    if ev.get("leader") != node:
        st.role = "follower" if st.role == "leader" else st.role
        st.must_step_down = None


def _on_started(run: Run, node: str, group: str, st: NodeGroup, ev: dict[str, Any]) -> None:
    st.role = "follower"
    st.must_step_down = None


def _on_applied_conf(run: Run, node: str, group: str, st: NodeGroup, ev: dict[str, Any]) -> None:
    run.applied.append(ev)
    # The configuration in force is the last configuration entry of the
    # node's log (or its snapshot's, at the snapshot's index, which covers
    # it): evidence the node stored it even when its config-appended was lost.
    _stored(run, node, group, ev)
    if conf_of(ev) != st.applied:
        st.previous = st.applied
    st.applied = conf_of(ev)
    st.applied_index = int(ev.get("index") or 0)
    _knows_commit(st, ev)


def _knows_commit(st: NodeGroup, ev: dict[str, Any]) -> None:
    """The node's commit index as the event reports it (docs/events.md): a
    restarted node reads it from its hard state and a snapshot carries it,
    and neither emits the config-committed it learned before."""
    commit = ev.get("commit")
    if isinstance(commit, int) and not isinstance(commit, bool):
        st.committed_index = max(st.committed_index, commit)


def _on_change_stage(run: Run, node: str, group: str, st: NodeGroup, ev: dict[str, Any]) -> None:
    if ev.get("stage") in ("catching-up", "none"):
        st.caught_up = set()
    if ev.get("stage") == "catching-up" and st.applied is None and ev.get("old_peers"):
        # A node reports no config-applied for its bootstrap configuration;
        # a change starting from it names it as the old peers.
        st.applied = conf_of({"peers": ev["old_peers"]})


def _on_catchup_done(run: Run, node: str, group: str, st: NodeGroup, ev: dict[str, Any]) -> None:
    peer = str(ev.get("peer"))
    margin = st.margins.get(peer)
    lag = int(ev.get("leader_last") or 0) - int(ev.get("match") or 0)
    if margin is not None and lag > margin:
        run.flag(
            "catchup-outside-margin",
            (node, peer, ev.get("leader_last")),
            f"{node} reported {peer} caught up in {group} {lag} entries behind (margin {margin})",
            ev,
        )
        return
    st.caught_up.add(peer)


def _on_appended(run: Run, node: str, group: str, st: NodeGroup, ev: dict[str, Any]) -> None:
    run.appended.add((group, int(ev["index"])))
    _stored(run, node, group, ev)
    # Only a leader's appends are judged here: a follower's log may still hold
    # entries a new leader is about to overwrite, and a truncation shows only
    # in the config-applied that follows. Followers are covered by the check
    # of the committed sequence, which nothing can overwrite.
    if st.role != "leader":
        return
    index, conf, prev = int(ev["index"]), conf_of(ev), st.applied
    if prev is not None:
        run.checked["transition"] += 1
        problem = transition_error(prev, conf)
        if problem is not None:
            run.flag(
                problem,
                index,
                f"{node} went from {describe(prev)} to {describe(conf)} in {group} at {index}",
                ev,
            )
    if st.applied_index > st.committed_index:
        run.flag(
            "two-uncommitted-configs",
            index,
            f"{node} appended a config at {index} in {group} while its config at "
            f"{st.applied_index} was uncommitted",
            ev,
        )
    peers, old = conf
    if old is not None and prev != conf:
        run.checked["joint-catchup"] += 1
        lagging = sorted(set(peers) - set(old) - st.caught_up)
        if lagging:
            run.flag(
                "joint-before-catchup",
                index,
                f"{node} appended {describe(conf)} in {group} before {lagging} caught up",
                ev,
            )


def _stored(run: Run, node: str, group: str, ev: dict[str, Any]) -> None:
    run.evidence.store(node, group, ev)


def _on_committed(run: Run, node: str, group: str, st: NodeGroup, ev: dict[str, Any]) -> None:
    index, conf = int(ev["index"]), conf_of(ev)
    st.committed_index = max(st.committed_index, index)
    _stored(run, node, group, ev)  # the core reports commits from the node's own log
    run.evidence.committed(group, ev)
    first = run.committed.setdefault((group, index), (conf, ev))
    if first[0] != conf:
        run.flag(
            "conflicting-committed-config",
            index,
            f"{group} index {index} committed as {describe(first[0])} and {describe(conf)}",
            first[1],
            ev,
        )
    if st.role == "leader" and conf[1] is None and node not in conf[0]:
        st.must_step_down = ev


def _on_snapshot(run: Run, node: str, group: str, st: NodeGroup, ev: dict[str, Any]) -> None:
    # A snapshot holds only committed state; its configuration arrives as the
    # config-applied the core emits with it.
    st.committed_index = max(st.committed_index, int(ev.get("index") or 0))
    _knows_commit(st, ev)
    run.evidence.snapshot(node, group, ev)


def _on_catchup_start(run: Run, node: str, group: str, st: NodeGroup, ev: dict[str, Any]) -> None:
    peer = str(ev.get("peer"))
    st.caught_up.discard(peer)
    if isinstance(ev.get("margin"), int):
        st.margins[peer] = ev["margin"]


# What a removed leader may emit while it processes the commit, before it
# steps down (the core emits these from the same Ready).
_SAME_COMMIT = frozenset(
    {"config-committed", "config-applied", "change-stage", "change-done", "applied",
     "timeout-now-sent", "leader", "role", "step-down"}
)  # fmt: skip

_HANDLERS = {
    "role": _on_role,
    "step-down": _on_step_down,
    "leader": _on_leader,
    "config-applied": _on_applied_conf,
    "config-appended": _on_appended,
    "config-committed": _on_committed,
    "change-stage": _on_change_stage,
    "catchup-start": _on_catchup_start,
    "catchup-done": _on_catchup_done,
    "snapshot-installed": _on_snapshot,
    "vote-request": lead.on_vote_request,
    "timeout-now-sent": lead.on_timeout_now_sent,
    "timeout-now-received": lead.on_timeout_now_received,
}
