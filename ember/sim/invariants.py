"""Safety properties of the cluster, checked after every step.

Theory of operation: the checker is the cluster's observer. It sees every
write (before fsync), every fsync, every applied entry and every node's
status after each event, and keeps a global, omniscient record:

- `leaders[term]`: who led each term (at most one leader per term), and
  `votes[(term, voter)]`: each leader won a majority of each voter set of its
  configuration (learners' votes never count);
- `entries[(index, term)]`: the entry's bytes and the term before it. Raft
  creates an (index, term) once, so one record per pair for all time, plus
  the predecessor's term, gives log matching by induction;
- `committed[index]`: term, bytes and the lowest term in which any node knew
  it committed. A committed entry is never overwritten, every later leader
  holds it (leader completeness), and each node's commit agrees;
- `applied[index]`: the bytes applied there (state-machine safety);
- configuration rules, checked on every configuration entry written:
  stable(C) -> joint(new, old=C) -> stable(new); a leader appends one only when
  the previous one is committed; a joint entry only once each new voter has
  been within the catch-up margin while the leader waited (or is now); a
  leader's commit point must be durable on a majority of its configuration
  (both majorities while joint; learners never count) and every joint entry
  on a majority of each side.

A violation is recorded with the simulated time and the node; the driver
stops at the first one.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from ember.raft import ConfState, Entry, Ready, Status
from ember.raft.messages import RequestVoteResp
from ember.sim.cluster import Cluster, Observer, SimNode
from ember.sim.rules import (
    chain_error,
    describe_conf,
    describe_entry,
    is_quorum,
    match_index,
)
from ember.sim.storage import DiskLog

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
)

_enc = msgspec.msgpack.Encoder()


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken property, where and when."""

    prop: str
    node: str
    at_ns: int
    detail: str

    def __str__(self) -> str:
        return f"{self.prop} at {self.at_ns / 1e9:.4f}s on {self.node}: {self.detail}"


@dataclass(slots=True)
class _Committed:
    term: int
    blob: bytes
    commit_term: int


def _blob(entry: Entry) -> bytes:
    return _enc.encode(entry)


class Invariants(Observer):
    """The omniscient checker of every safety property."""

    def __init__(self, cluster_ref: list[Cluster], catchup_margin: int) -> None:
        # A one-element list: the cluster is built after its observer.
        self._cluster_ref = cluster_ref
        self.catchup_margin = catchup_margin
        self.violations: list[Violation] = []
        self.leaders: dict[int, str] = {}
        self.entries: dict[tuple[int, int], tuple[bytes, int | None]] = {}
        self.committed: dict[int, _Committed] = {}
        self.applied: dict[int, bytes] = {}
        self.node_commit: dict[str, int] = {}
        self.checks = dict.fromkeys(SAFETY_PROPERTIES, 0)
        # (term, voter) -> the candidate it voted for.
        self.votes: dict[tuple[int, str], str] = {}
        self.last_status: dict[str, Status] = {}
        self._completeness_checked: set[tuple[int, str]] = set()
        self._joint_checked: set[int] = set()
        # (leader, term, peer): peer was within the margin while that leader waited.
        self._caught_up: set[tuple[str, int, str]] = set()
        # node -> (commit, conf before the batch, conf after) awaiting the fsync.
        self._pending_quorum: dict[str, tuple[int, ConfState, ConfState]] = {}

    @property
    def cluster(self) -> Cluster:
        return self._cluster_ref[0]

    def _fail(self, prop: str, node: str, detail: str) -> None:
        self.violations.append(Violation(prop, node, self.cluster.clock.now_ns, detail))

    # -- observer hooks --------------------------------------------------

    def on_status(self, node: SimNode, status: Status) -> None:
        self.last_status[node.id] = status
        if status.role != "leader":
            return
        self.checks["one-leader-per-term"] += 1
        first = self.leaders.setdefault(status.term, node.id)
        if first != node.id:
            self._fail("one-leader-per-term", node.id, f"term {status.term} also led by {first}")
        if (status.term, node.id) not in self._completeness_checked:
            # Once per leadership: later commits are checked as they happen.
            self._completeness_checked.add((status.term, node.id))
            self._check_leader_holds_committed(node, status.term, self.committed)
            self._check_election_quorum(node, status)

    def _check_election_quorum(self, node: SimNode, status: Status) -> None:
        """The votes this leader won: a majority of each voter set, no learners."""
        self.checks["election-quorum"] += 1
        voters = {
            v for (term, v), cand in self.votes.items() if term == status.term and cand == node.id
        }
        if not is_quorum(status.conf, voters):
            self._fail(
                "election-quorum",
                node.id,
                f"leader of term {status.term} with votes from {sorted(voters)} only, "
                f"not a quorum of {describe_conf(status.conf)}",
            )

    def on_crash(self, node: SimNode) -> None:
        self.last_status.pop(node.id, None)
        self._pending_quorum.pop(node.id, None)

    def on_write(self, node: SimNode, rd: Ready) -> None:
        log = node.written
        hs = rd.hard_state
        if hs is not None and hs.vote is not None:
            # Recorded when written: a vote is only sent after it is durable.
            self.votes[(hs.term, node.id)] = hs.vote
        for msg in rd.messages:
            # One Ready can grant a vote and then move to a higher term, so the
            # hard state alone may hide a grant; the granted reply never lies.
            if isinstance(msg, RequestVoteResp) and msg.granted:
                self.votes[(msg.term, msg.src)] = msg.dst
        for gone in node.removed:
            done = self.committed.get(gone.index)
            if done is not None and done.blob == _blob(gone):
                self._fail(
                    "state-machine-safety",
                    node.id,
                    f"committed entry {gone.index} (term {gone.term}) truncated from its log",
                )
        for entry in rd.entries:
            if entry.index > log.snap_index:
                self._check_entry(node, log, entry)
        if node.raw is None:
            return
        status = node.raw.status()
        before = self.last_status.get(node.id)
        # Only a node that already led this term before the batch advanced its
        # commit by counting; one elected inside the batch may have learned it.
        was_leader = (
            before is not None
            and before.role == "leader"
            and status.role == "leader"
            and before.term == status.term
        )
        if status.role == "leader":
            commit = max(status.commit, self.node_commit.get(node.id, 0))
            for entry in rd.entries:
                if entry.kind == "config" and entry.term == status.term:
                    self._check_leader_config_append(node, log, entry, commit)
        if rd.hard_state is not None:
            advanced = self._observe_commit(node, log, rd.hard_state.commit, status, was_leader)
            if advanced and was_leader and before is not None:
                self._pending_quorum[node.id] = (rd.hard_state.commit, before.conf, status.conf)

    def on_durable(self, node: SimNode, rd: Ready) -> None:
        pending = self._pending_quorum.pop(node.id, None)
        if pending is not None:
            self._check_quorum(node, *pending)
        if rd.entries or rd.snapshot is not None:
            self._note_caught_up(node)

    def _note_caught_up(self, node: SimNode) -> None:
        """Remember peers that were within the margin of a catching-up leader.

        A peer may catch up and fall behind again before the last new peer
        catches up (jraft waits for each separately), so the joint entry needs
        each new peer to have been within the margin during the wait, as seen
        from the peers' durable logs, not from what the leader reports.
        """
        for leader in self.cluster.leaders():
            st = leader.status
            if st is None or st.stage != "catching-up" or leader is node:
                continue
            last = leader.written.last_index
            if last - match_index(node.durable, leader.written, last) <= self.catchup_margin:
                self._caught_up.add((leader.id, st.term, node.id))

    def on_applied(self, node: SimNode, entry: Entry) -> None:
        self.checks["state-machine-safety"] += 1
        blob = _blob(entry)
        first = self.applied.setdefault(entry.index, blob)
        if first != blob:
            self._fail(
                "state-machine-safety",
                node.id,
                f"applied {describe_entry(entry)} at {entry.index}; another node applied a "
                "different entry there",
            )

    # -- log matching, committed entries never overwritten ----------------

    def _check_entry(self, node: SimNode, log: DiskLog, entry: Entry) -> None:
        self.checks["log-matching"] += 1
        blob = _blob(entry)
        prev = log.term_at(entry.index - 1)
        key = (entry.index, entry.term)
        seen = self.entries.get(key)
        if seen is None:
            self.entries[key] = (blob, prev)
        else:
            if seen[0] != blob:
                self._fail("log-matching", node.id, f"two different entries at {key}")
            elif prev is not None and seen[1] is not None and seen[1] != prev:
                self._fail(
                    "log-matching",
                    node.id,
                    f"entry {key} follows term {prev} here, term {seen[1]} elsewhere",
                )
        if entry.kind == "config":
            self._check_config_chain(node, log, entry)

    def _observe_commit(
        self, node: SimNode, log: DiskLog, commit: int, status: Status, was_leader: bool
    ) -> bool:
        """Record entries newly committed on `node`; True if its commit advanced."""
        before = self.node_commit.get(node.id, log.snap_index)
        if commit <= before:
            return False
        self.node_commit[node.id] = commit
        if was_leader:
            self.checks["commit-current-term"] += 1
            term = log.term_at(commit)
            if term is not None and term != status.term:
                self._fail(
                    "commit-current-term",
                    node.id,
                    f"leader of term {status.term} advanced commit to {commit}, an entry of term "
                    f"{term}",
                )
        for index in range(max(before, log.snap_index) + 1, commit + 1):
            entry = log.entry(index)
            if entry is None:
                break
            self._observe_committed(node, entry, status.term)
        return True

    def _observe_committed(self, node: SimNode, entry: Entry, term: int) -> None:
        blob = _blob(entry)
        known = self.committed.get(entry.index)
        if known is None:
            known = self.committed[entry.index] = _Committed(entry.term, blob, term)
            for leader in self.cluster.leaders():
                if leader.status is not None and leader.status.term > term:
                    self._check_leader_holds_committed(
                        leader, leader.status.term, {entry.index: known}
                    )
            return
        if known.blob != blob:
            self._fail(
                "state-machine-safety",
                node.id,
                f"commits entry term {entry.term} at {entry.index}, already committed with term "
                f"{known.term}",
            )
        known.commit_term = min(known.commit_term, term)

    def _check_leader_holds_committed(
        self, node: SimNode, term: int, committed: dict[int, _Committed]
    ) -> None:
        """Every entry committed before `term` is in the log of `term`'s leader."""
        self.checks["leader-completeness"] += 1
        log = node.written
        for index, done in committed.items():
            if done.commit_term >= term or index <= log.snap_index:
                continue
            have = log.term_at(index)
            if have != done.term:
                self._fail(
                    "leader-completeness",
                    node.id,
                    f"leader of term {term} lacks entry {index} (term {done.term}) committed "
                    f"in term {done.commit_term}; it has term {have}",
                )
                return

    # -- configuration rules ----------------------------------------------

    def _check_config_chain(self, node: SimNode, log: DiskLog, entry: Entry) -> None:
        self.checks["config-chain"] += 1
        _, prev, _ = log.conf_before(entry.index)
        if entry.conf is not None and prev is not None:
            problem = chain_error(prev, entry.conf, entry.index)
            if problem is not None:
                self._fail("config-chain", node.id, problem)

    def _check_leader_config_append(
        self, node: SimNode, log: DiskLog, entry: Entry, commit: int
    ) -> None:
        self.checks["one-uncommitted-config"] += 1
        prev_index, _, _ = log.conf_before(entry.index)
        if prev_index > commit:
            self._fail(
                "one-uncommitted-config",
                node.id,
                f"appended config at {entry.index} while config at {prev_index} is uncommitted "
                f"(commit {commit})",
            )
        conf = entry.conf
        if conf is None or not conf.is_joint:
            return
        self.checks["catchup-margin"] += 1
        leader_last = entry.index - 1
        for peer in sorted(set(conf.peers) - set(conf.old_peers or ())):
            if (node.id, entry.term, peer) in self._caught_up:
                continue
            match = match_index(self.cluster.nodes[peer].written, log, leader_last)
            if leader_last - match > self.catchup_margin:
                self._fail(
                    "catchup-margin",
                    node.id,
                    f"joint entry at {entry.index} appended while {peer} matched only {match} "
                    f"(margin {self.catchup_margin})",
                )

    def _check_quorum(
        self, node: SimNode, commit: int, conf_before: ConfState, conf_after: ConfState
    ) -> None:
        """The leader's commit point is durable on a majority of each voter set.

        The configuration may change inside the batch that advanced commit, so
        the point must satisfy the one in force before or the one after.
        """
        self.checks["quorum-commit"] += 1
        log = node.durable
        term = log.term_at(commit)
        if term is None or commit == 0:
            return
        holders = self._durable_holders(commit, term)
        if not (is_quorum(conf_before, holders) or is_quorum(conf_after, holders)):
            self._fail(
                "quorum-commit",
                node.id,
                f"commit {commit} held durably only by {sorted(holders)}, not a quorum of "
                f"{describe_conf(conf_before)} nor of {describe_conf(conf_after)}",
            )
            return
        for index in log.config_indexes:
            entry = log.entry(index)
            if index > commit or entry is None or entry.conf is None or not entry.conf.is_joint:
                continue
            if index in self._joint_checked:
                continue
            self._joint_checked.add(index)
            self.checks["joint-both-majorities"] += 1
            holders = self._durable_holders(index, entry.term)
            if not is_quorum(entry.conf, holders):
                self._fail(
                    "joint-both-majorities",
                    node.id,
                    f"joint entry {index} {describe_conf(entry.conf)} committed but held only by "
                    f"{sorted(holders)}",
                )
                return

    def _durable_holders(self, index: int, term: int) -> set[str]:
        holders = set()
        for other in self.cluster.nodes.values():
            log = other.durable
            if log.snap_index >= index or log.term_at(index) == term:
                holders.add(other.id)
        return holders
