"""Raft's safety properties over the whole simulated system, checked as it runs.

Theory of operation
-------------------
The checker is a `RaftObserver` (ember.runtime.observe) installed for one
simulation: every node's runtime tells it, per Raft group, each Ready as it
is taken (before the fsync), the instant the store's commit makes it
durable, every applied entry and the group's status after each round; the
world tells it of crashes. From that it keeps, per group across all nodes,
a global record no single node has:

- `leaders[term]`: who led each term (at most one leader per term), and
  `votes[(term, voter)]`: each leader won a majority of each voter set of its
  configuration (learners' votes never count);
- `entries[(index, term)]`: the entry's bytes and the term before it. Raft
  creates an (index, term) once, so one record per pair for all time, plus
  the predecessor's term, gives log matching by induction;
- `committed[index]`: term, bytes and the lowest term in which any node knew
  it committed. A committed entry is never truncated, every later leader
  holds it (leader completeness), and nodes agree on it;
- `applied[index]`: the bytes applied there (state-machine safety);
- configuration rules, checked on every configuration entry written:
  stable(C) -> joint(new, old=C) -> stable(new); a leader appends one only when
  the previous one is committed; a joint entry only once each new voter has
  been within the catch-up margin while the leader waited (or is now); a
  leader's commit point must be durable on a majority of its configuration
  (both majorities while joint; learners never count) and every joint entry
  on a majority of each side;
- after every Ready a node's configuration in force (and token) is its
  log's last configuration entry, or its snapshot's: applied on append,
  rolled back when truncated, restored exactly after a restart or install;
- a leader starts a change (its stage leaves `none` within its term) only
  once an entry of its own term is committed.

Each node's replica is two `LogView`s (written / durable), reset to what the
store read back whenever the node starts, so a crash loses exactly what the
simulated disk lost. A violation is kept with the property, node, group and
virtual time; the run goes on (the harness judges it at the end). An
exception inside the checker is kept as an error, never raised into the
node it observes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ember.raft import ConfState, Entry, PersistedState, Ready, Status
from ember.raft.messages import RequestVoteResp
from ember.sim.logview import LogView
from ember.sim.rules import chain_error, describe_conf, describe_entry, is_quorum, match_index

SAFETY_PROPERTIES: tuple[str, ...] = (
    "one-leader-per-term",
    "election-quorum",
    "log-matching",
    "leader-completeness",
    "state-machine-safety",
    "commit-current-term",
    "config-chain",
    "one-uncommitted-config",
    "quorum-commit",
    "joint-both-majorities",
    "catchup-margin",
    "config-in-force",
    "change-before-term-commit",
)
KEEP_PER_PROPERTY = 20  # a systematic defect repeats: keep the first few, count all

_enc = msgspec.msgpack.Encoder()


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken property, where and when."""

    prop: str
    node: str
    group: str
    at_s: float
    detail: str

    def __str__(self) -> str:
        return f"{self.prop} at {self.at_s:.4f}s on {self.node}/{self.group}: {self.detail}"


@dataclass(slots=True)
class _Committed:
    term: int
    blob: bytes
    commit_term: int


@dataclass(slots=True, eq=False)
class _Replica:
    """One node's copy of one group."""

    node: str
    durable: LogView
    written: LogView
    status: Status | None = None
    # The status its last Ready was taken with. `status` moves on after the
    # Ready too (messages stepped while the round's fsync runs), so its
    # configuration may be newer than the one a commit advance in the next
    # Ready was counted under: the quorum check accepts this one's.
    ready_status: Status | None = None
    commit: int | None = None  # highest commit index seen; None before the first
    # (commit, conf before the Ready, conf after) awaiting the Ready's fsync.
    pending_quorum: tuple[int, ConfState, ConfState] | None = None


@dataclass(slots=True, eq=False)
class _Group:
    """The global record of one Raft group (see the module doc)."""

    id: str
    replicas: dict[str, _Replica] = field(default_factory=dict)
    leaders: dict[int, str] = field(default_factory=dict)
    entries: dict[tuple[int, int], tuple[bytes, int | None]] = field(default_factory=dict)
    committed: dict[int, _Committed] = field(default_factory=dict)
    applied: dict[int, bytes] = field(default_factory=dict)
    votes: dict[tuple[int, str], str] = field(default_factory=dict)
    completeness_checked: set[tuple[int, str]] = field(default_factory=set)
    joint_checked: set[int] = field(default_factory=set)
    # (leader, term, peer): peer was within the margin while that leader waited.
    caught_up: set[tuple[str, int, str]] = field(default_factory=set)

    def leaders_now(self) -> list[_Replica]:
        """Replicas that believe they lead, highest term first."""
        found = [r for r in self.replicas.values() if r.status and r.status.role == "leader"]
        return sorted(found, key=lambda r: -(r.status.term if r.status else 0))

    def written(self, node: str) -> LogView:
        rep = self.replicas.get(node)
        return rep.written if rep is not None else LogView()

    def durable_holders(self, index: int, term: int) -> set[str]:
        return {
            r.node
            for r in self.replicas.values()
            if r.durable.snap_index >= index or r.durable.term_at(index) == term
        }


class Omniscient:
    """The omniscient checker of every safety property (see the module doc)."""

    def __init__(self, clock: Callable[[], float], catchup_margin: int) -> None:
        self.clock = clock
        self.catchup_margin = catchup_margin
        self.violations: list[Violation] = []
        self.counts: dict[str, int] = {}
        self.errors: list[str] = []  # the first few of the checker's own failures
        self.error_count = 0
        self.checks = dict.fromkeys(SAFETY_PROPERTIES, 0)
        self.groups: dict[str, _Group] = {}

    # -- results -----------------------------------------------------------------

    def _fail(self, prop: str, node: str, group: _Group, detail: str) -> None:
        self.counts[prop] = self.counts.get(prop, 0) + 1
        if self.counts[prop] <= KEEP_PER_PROPERTY:
            self.violations.append(Violation(prop, node, group.id, round(self.clock(), 6), detail))

    def report(self) -> dict[str, Any]:
        """What sim-invariants.json holds (the `sim` checker reads it)."""
        return {
            "properties": list(SAFETY_PROPERTIES),
            "violations": [_as_dict(v) for v in self.violations],
            "violation_counts": dict(sorted(self.counts.items())),
            "checks": self.checks,
            "errors": self.errors,
            "error_count": self.error_count,
            "groups": sorted(self.groups),
        }

    def _guard(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:  # the checker's own fault: kept, never raised into a node
            self.error_count += 1
            if len(self.errors) < KEEP_PER_PROPERTY:
                self.errors.append(f"{fn.__name__}{args[:2]}: {type(exc).__name__}: {exc}")

    def _group(self, group: str) -> _Group:
        rec = self.groups.get(group)
        if rec is None:
            rec = self.groups[group] = _Group(group)
        return rec

    # -- RaftObserver --------------------------------------------------------------

    def on_start(self, node: str, group: str, state: PersistedState) -> None:
        self._guard(self._start, node, group, state)

    def on_write(self, node: str, group: str, rd: Ready, status: Status) -> None:
        self._guard(self._write, node, group, rd, status)

    def on_durable(self, node: str, group: str, rd: Ready) -> None:
        self._guard(self._durable, node, group, rd)

    def on_applied(self, node: str, group: str, entry: Entry) -> None:
        self._guard(self._applied, node, group, entry)

    def on_status(self, node: str, group: str, status: Status) -> None:
        self._guard(self._status, self._group(group), node, status)

    def on_crash(self, node: str) -> None:
        """`node` died: what it had not made durable is gone, and it leads nothing."""
        for rec in self.groups.values():
            rep = rec.replicas.get(node)
            if rep is not None:
                rep.status, rep.ready_status, rep.pending_quorum = None, None, None
                rep.written = rep.durable.copy()

    # -- the hooks' bodies ------------------------------------------------------------

    def _start(self, node: str, group: str, state: PersistedState) -> None:
        rec = self._group(group)
        old = rec.replicas.get(node)
        durable = LogView.of(state)
        rec.replicas[node] = _Replica(node, durable, durable.copy(),
                                      commit=old.commit if old is not None else None)  # fmt: skip

    def _status(self, rec: _Group, node: str, status: Status) -> None:
        rep = rec.replicas.get(node)
        if rep is None:
            return
        rep.status = status
        if status.role != "leader":
            return
        self.checks["one-leader-per-term"] += 1
        first = rec.leaders.setdefault(status.term, node)
        if first != node:
            self._fail("one-leader-per-term", node, rec, f"term {status.term} also led by {first}")
        if (status.term, node) not in rec.completeness_checked:
            # Once per leadership: later commits are checked as they happen.
            rec.completeness_checked.add((status.term, node))
            self._check_leader_holds_committed(rec, rep, status.term, rec.committed)
            self._check_election_quorum(rec, node, status)

    def _check_election_quorum(self, rec: _Group, node: str, status: Status) -> None:
        """The votes this leader won: a majority of each voter set, no learners."""
        self.checks["election-quorum"] += 1
        voters = {v for (term, v), cand in rec.votes.items()
                  if term == status.term and cand == node}  # fmt: skip
        if not is_quorum(status.conf, voters):
            self._fail("election-quorum", node, rec,
                       f"leader of term {status.term} with votes from {sorted(voters)} only, "
                       f"not a quorum of {describe_conf(status.conf)}")  # fmt: skip

    def _write(self, node: str, group: str, rd: Ready, status: Status) -> None:
        rec = self._group(group)
        rep = rec.replicas.get(node)
        if rep is None:
            return
        log = rep.written
        removed = log.write(rd.snapshot, rd.entries, rd.hard_state)
        hs = rd.hard_state
        if hs is not None and hs.vote is not None:
            # Recorded when written: a vote is only sent after it is durable.
            rec.votes[(hs.term, node)] = hs.vote
        for msg in rd.messages:
            # One Ready can grant a vote and then move to a higher term, so the
            # hard state alone may hide a grant; the granted reply never lies.
            if isinstance(msg, RequestVoteResp) and msg.granted and not msg.pre:
                rec.votes[(msg.term, msg.src)] = msg.dst
        # A follower may write back entries it already holds (the leader's
        # append overlaps its log): the same (index, term) again is no
        # truncation (sim sweep seed 56, a false state-machine-safety).
        again = {e.index: _enc.encode(e) for e in rd.entries} if removed else {}
        for gone in removed:
            done = rec.committed.get(gone.index)
            blob = _enc.encode(gone)
            if done is not None and done.blob == blob and again.get(gone.index) != blob:
                self._fail("state-machine-safety", node, rec,
                           f"committed entry {gone.index} (term {gone.term}) truncated from "
                           "its log")  # fmt: skip
        for entry in rd.entries:
            if entry.index > log.snap_index:
                self._check_entry(rec, node, log, entry)
        self._check_config_in_force(rec, node, log, status)
        before = rep.status
        if (before is not None and before.role == "leader" and status.role == "leader"
                and before.term == status.term and before.stage == "none"
                and status.stage != "none"):  # fmt: skip
            self._check_change_start(rec, node, log, status)
        # Only a node that already led this term before the Ready advanced its
        # commit by counting; one elected since may have learned it.
        was_leader = (before is not None and before.role == "leader"
                      and status.role == "leader" and before.term == status.term)  # fmt: skip
        if status.role == "leader":
            commit = max(status.commit, rep.commit or 0)
            for entry in rd.entries:
                if entry.kind == "config" and entry.term == status.term:
                    self._check_leader_config_append(rec, node, log, entry, commit)
        if hs is not None:
            advanced = self._observe_commit(rec, rep, hs.commit, status, was_leader)
            if advanced and was_leader and before is not None:
                counted_under = (rep.ready_status or before).conf
                rep.pending_quorum = (hs.commit, counted_under, status.conf)
        rep.ready_status = status
        self._status(rec, node, status)

    def _durable(self, node: str, group: str, rd: Ready) -> None:
        rec = self._group(group)
        rep = rec.replicas.get(node)
        if rep is None:
            return
        rep.durable.write(rd.snapshot, rd.entries, rd.hard_state)
        pending, rep.pending_quorum = rep.pending_quorum, None
        if pending is not None:
            self._check_quorum(rec, rep, *pending)
        if rd.entries or rd.snapshot is not None:
            self._note_caught_up(rec, rep)

    def _note_caught_up(self, rec: _Group, rep: _Replica) -> None:
        """Remember peers that were within the margin of a catching-up leader.

        A peer may catch up and fall behind again before the last new peer
        catches up (jraft waits for each separately), so the joint entry needs
        each new peer to have been within the margin during the wait, as seen
        from the peers' durable logs, not from what the leader reports.
        """
        for leader in rec.leaders_now():
            st = leader.status
            if st is None or st.stage != "catching-up" or leader is rep:
                continue
            last = leader.written.last_index
            if last - match_index(rep.durable, leader.written, last) <= self.catchup_margin:
                rec.caught_up.add((leader.node, st.term, rep.node))

    def _applied(self, node: str, group: str, entry: Entry) -> None:
        rec = self._group(group)
        self.checks["state-machine-safety"] += 1
        blob = _enc.encode(entry)
        first = rec.applied.setdefault(entry.index, blob)
        if first != blob:
            self._fail("state-machine-safety", node, rec,
                       f"applied {describe_entry(entry)} at {entry.index}; another node applied "
                       "a different entry there")  # fmt: skip

    # -- log matching, committed entries never overwritten ---------------------------

    def _check_entry(self, rec: _Group, node: str, log: LogView, entry: Entry) -> None:
        self.checks["log-matching"] += 1
        blob = _enc.encode(entry)
        prev = log.term_at(entry.index - 1)
        key = (entry.index, entry.term)
        seen = rec.entries.get(key)
        if seen is None:
            rec.entries[key] = (blob, prev)
        elif seen[0] != blob:
            self._fail("log-matching", node, rec, f"two different entries at {key}")
        elif prev is not None and seen[1] is not None and seen[1] != prev:
            detail = f"entry {key} follows term {prev} here, term {seen[1]} elsewhere"
            self._fail("log-matching", node, rec, detail)
        if entry.kind == "config":
            self.checks["config-chain"] += 1
            _, conf_before, _ = log.conf_before(entry.index)
            if entry.conf is not None and conf_before is not None:
                problem = chain_error(conf_before, entry.conf, entry.index)
                if problem is not None:
                    self._fail("config-chain", node, rec, problem)

    def _observe_commit(
        self, rec: _Group, rep: _Replica, commit: int, status: Status, was_leader: bool
    ) -> bool:
        """Record entries newly committed on `rep`; True if its commit advanced."""
        log = rep.written
        before = rep.commit if rep.commit is not None else log.snap_index
        if commit <= before:
            return False
        rep.commit = commit
        if was_leader:
            self.checks["commit-current-term"] += 1
            term = log.term_at(commit)
            if term is not None and term != status.term:
                self._fail("commit-current-term", rep.node, rec,
                           f"leader of term {status.term} advanced commit to {commit}, an entry "
                           f"of term {term}")  # fmt: skip
        for index in range(max(before, log.snap_index) + 1, commit + 1):
            entry = log.entry(index)
            if entry is None:
                break
            self._observe_committed(rec, rep.node, entry, status.term)
        return True

    def _observe_committed(self, rec: _Group, node: str, entry: Entry, term: int) -> None:
        blob = _enc.encode(entry)
        known = rec.committed.get(entry.index)
        if known is None:
            known = rec.committed[entry.index] = _Committed(entry.term, blob, term)
            for leader in rec.leaders_now():
                if leader.status is not None and leader.status.term > term:
                    self._check_leader_holds_committed(
                        rec, leader, leader.status.term, {entry.index: known}
                    )
            return
        if known.blob != blob:
            self._fail("state-machine-safety", node, rec,
                       f"commits entry term {entry.term} at {entry.index}, already committed "
                       f"with term {known.term}")  # fmt: skip
        known.commit_term = min(known.commit_term, term)

    def _check_leader_holds_committed(
        self, rec: _Group, rep: _Replica, term: int, committed: dict[int, _Committed]
    ) -> None:
        """Every entry committed before `term` is in the log of `term`'s leader."""
        self.checks["leader-completeness"] += 1
        log = rep.written
        for index, done in committed.items():
            if done.commit_term >= term or index <= log.snap_index:
                continue
            have = log.term_at(index)
            if have != done.term:
                self._fail("leader-completeness", rep.node, rec,
                           f"leader of term {term} lacks entry {index} (term {done.term}) "
                           f"committed in term {done.commit_term}; it has term {have}")  # fmt: skip
                return

    # -- configuration rules ------------------------------------------------------------

    def _check_config_in_force(self, rec: _Group, node: str, log: LogView, status: Status) -> None:
        """The configuration in force is the one the log (or snapshot) ends with."""
        _, conf, token = log.conf_before(log.last_index + 1)
        if conf is None:
            return  # a joining node with nothing yet
        self.checks["config-in-force"] += 1
        if conf != status.conf or token != status.token:
            self._fail("config-in-force", node, rec,
                       f"in force {describe_conf(status.conf)} token {status.token}, but its "
                       f"log ends with {describe_conf(conf)} token {token}")  # fmt: skip

    def _check_change_start(self, rec: _Group, node: str, log: LogView, status: Status) -> None:
        """A change starts only after an entry of the leader's term committed."""
        self.checks["change-before-term-commit"] += 1
        term = log.term_at(status.commit)
        if term is not None and term != status.term:
            self._fail("change-before-term-commit", node, rec,
                       f"leader of term {status.term} started a change ({status.stage}) with "
                       f"commit {status.commit} of term {term}")  # fmt: skip

    def _check_leader_config_append(
        self, rec: _Group, node: str, log: LogView, entry: Entry, commit: int
    ) -> None:
        self.checks["one-uncommitted-config"] += 1
        prev_index, _, _ = log.conf_before(entry.index)
        if prev_index > commit:
            self._fail("one-uncommitted-config", node, rec,
                       f"appended config at {entry.index} while config at {prev_index} is "
                       f"uncommitted (commit {commit})")  # fmt: skip
        conf = entry.conf
        if conf is None or not conf.is_joint:
            return
        self.checks["catchup-margin"] += 1
        leader_last = entry.index - 1
        for peer in sorted(set(conf.peers) - set(conf.old_peers or ())):
            if (node, entry.term, peer) in rec.caught_up:
                continue
            match = match_index(rec.written(peer), log, leader_last)
            if leader_last - match > self.catchup_margin:
                self._fail("catchup-margin", node, rec,
                           f"joint entry at {entry.index} appended while {peer} matched only "
                           f"{match} (margin {self.catchup_margin})")  # fmt: skip

    def _check_quorum(
        self, rec: _Group, rep: _Replica, commit: int, before: ConfState, after: ConfState
    ) -> None:
        """The leader's commit point is durable on a majority of each voter set.

        The configuration may change inside the Ready that advanced commit, so
        the point must satisfy the one in force before or the one after.
        """
        self.checks["quorum-commit"] += 1
        log = rep.durable
        term = log.term_at(commit)
        if term is None or commit == 0:
            return
        holders = rec.durable_holders(commit, term)
        if not (is_quorum(before, holders) or is_quorum(after, holders)):
            self._fail("quorum-commit", rep.node, rec,
                       f"commit {commit} held durably only by {sorted(holders)}, not a quorum "
                       f"of {describe_conf(before)} nor of {describe_conf(after)}")  # fmt: skip
            return
        for index in log.config_indexes:
            entry = log.entry(index)
            if index > commit or entry is None or entry.conf is None or not entry.conf.is_joint:
                continue
            if index in rec.joint_checked:
                continue
            rec.joint_checked.add(index)
            self.checks["joint-both-majorities"] += 1
            holders = rec.durable_holders(index, entry.term)
            if not is_quorum(entry.conf, holders):
                self._fail("joint-both-majorities", rep.node, rec,
                           f"joint entry {index} {describe_conf(entry.conf)} committed but "
                           f"held only by {sorted(holders)}")  # fmt: skip
                return


def _as_dict(v: Violation) -> dict[str, Any]:
    return {"property": v.prop, "node": v.node, "group": v.group, "at_s": v.at_s,
            "detail": v.detail}  # fmt: skip


__all__ = ["SAFETY_PROPERTIES", "Omniscient", "Violation"]
