"""Safety properties of RawNode under random schedules (hypothesis).

Random operations (ticks, proposals, membership changes, partitions, crashes
and restarts, compaction, message loss) drive five nodes through the test
driver; after every step we check Raft's safety properties, and at the end,
with the network healed, that the group converges.
"""

from __future__ import annotations

import contextlib
import random

from hypothesis import example, given, settings
from hypothesis import strategies as st

from ember.raft import Entry, RaftConfig, RaftError, RawNode

from .driver import Net

IDS = ["n1", "n2", "n3", "n4", "n5"]

op = st.one_of(
    st.tuples(st.just("tick"), st.sampled_from([*IDS, None]), st.integers(1, 12)),
    st.tuples(st.just("propose"), st.integers(0, 3)),
    st.tuples(
        st.just("change"),
        st.sets(st.sampled_from(IDS), min_size=1, max_size=5),
        st.sets(st.sampled_from(IDS), max_size=2),
    ),
    st.tuples(st.just("transfer"), st.sampled_from(IDS)),
    st.tuples(st.just("partition"), st.sets(st.sampled_from(IDS), min_size=1, max_size=2)),
    st.tuples(st.just("heal")),
    st.tuples(st.just("crash"), st.sampled_from(IDS)),
    st.tuples(st.just("restart"), st.sampled_from(IDS)),
    st.tuples(st.just("compact"), st.sampled_from(IDS)),
    st.tuples(st.just("loss"), st.sampled_from([0.0, 0.0, 0.1, 0.3])),
)


class Checker:
    """Accumulates what was observed and asserts the safety properties."""

    def __init__(self) -> None:
        self.leaders: dict[int, str] = {}
        self.applied: dict[int, Entry] = {}
        # For each applied index, an upper bound on the term it committed in:
        # the highest term any node had when we first saw it applied.
        self.commit_term: dict[int, int] = {}

    def check(self, net: Net) -> None:
        """Assert every safety property on the current state of `net`."""
        top_term = max(n.term for n in net.nodes.values())
        for node_id, node in net.nodes.items():
            if node.role == "leader":
                self.check_leader(node_id, node)
            # State machine safety: every node applies the same entry at an index.
            for e in net.disks[node_id].applied:
                seen = self.applied.setdefault(e.index, e)
                self.commit_term.setdefault(e.index, top_term)
                assert (seen.term, seen.data, seen.kind) == (e.term, e.data, e.kind)
            # Commit never exceeds the log and applied never exceeds commit.
            assert node.log.applied <= node.log.committed <= node.log.last_index

    def check_leader(self, node_id: str, node: RawNode) -> None:
        """Election safety, one pending config entry, leader completeness."""
        assert self.leaders.setdefault(node.term, node_id) == node_id
        pending = [
            e
            for e in node.log.slice(node.log.committed + 1, node.log.last_index + 1)
            if e.kind == "config"
        ]
        assert len(pending) <= 1, pending
        # A leader of a later term than an entry's commit holds that entry.
        for index, e in self.applied.items():
            if index > node.log.offset and node.term > self.commit_term[index]:
                assert node.log.term(index) == e.term, (node_id, index)


class Scenario:
    """Five nodes (three voters, two spare) and the knobs the ops turn."""

    def __init__(self, seed: int, bugs: frozenset[str]) -> None:
        cfg = RaftConfig(
            election_timeout_ticks=8,
            max_entries_per_append=4,
            catchup_margin=5,
            catchup_max_retries=1,
            planted_bugs=bugs,
        )
        self.net = Net(IDS[:3], config=cfg, seed=seed)
        self.net.add("n4")
        self.net.add("n5")
        self.rng = random.Random(seed)
        self.loss = 0.0
        self.net.drop = lambda m: self.rng.random() < self.loss
        self.token = 0
        # Start from a working group so that early operations meet a leader.
        while self.net.leader() is None:
            self.net.tick()

    def apply(self, o: tuple) -> None:
        """Run one random operation."""
        net, kind, leader = self.net, o[0], self.net.leader()
        if kind == "tick":
            net.tick(o[1], times=o[2])
        elif kind == "propose" and leader is not None:
            for _ in range(o[1]):
                with contextlib.suppress(RaftError):
                    leader.propose(b"%d" % self.rng.randrange(10**6))
            net.deliver()
        elif kind == "change" and leader is not None:
            self.token += 1
            with contextlib.suppress(RaftError):
                leader.change_peers(sorted(o[1]), sorted(o[2] - o[1]), token=self.token)
            net.deliver()
        elif kind == "transfer" and leader is not None:
            with contextlib.suppress(RaftError):
                leader.transfer_leader(o[1])
            net.deliver()
        elif kind == "partition":
            net.partition(o[1], set(IDS) - o[1])
        elif kind == "heal":
            net.heal()
        elif kind == "crash":
            net.down.add(o[1])
        elif kind == "restart" and o[1] in net.down:
            net.down.discard(o[1])
            net.restart(o[1])
        elif kind == "compact":
            node = net.nodes[o[1]]
            if node.log.applied > node.log.offset:
                node.compact(node.log.applied, b"state")
        elif kind == "loss":
            self.loss = o[1]

    def converge(self, checker: Checker, max_ticks: int = 300) -> None:
        """Heal everything; the group must agree on one leader and one log."""
        net = self.net
        net.heal()
        self.loss = 0.0
        for i in sorted(net.down):
            net.down.discard(i)
            net.restart(i)
        for _ in range(max_ticks):
            net.tick()
            checker.check(net)
            leader = net.leader()
            if leader is not None and leader.log.committed == leader.log.last_index:
                voters = set(leader.conf.peers)
                if all(net.nodes[v].log.applied == leader.log.committed for v in voters):
                    return
        raise AssertionError(f"the healed group did not converge within {max_ticks} ticks")


def run(ops: list[tuple], seed: int, bugs: frozenset[str] = frozenset()) -> Net:
    """Apply `ops`, checking safety after each, then check convergence."""
    scenario = Scenario(seed, bugs)
    checker = Checker()
    for o in ops:
        scenario.apply(o)
        checker.check(scenario.net)
    scenario.converge(checker)
    return scenario.net


@settings(deadline=None)
@example(  # a transfer outliving a change once left the group with no possible leader
    ops=[
        ("propose", 0),
        ("partition", {"n1"}),
        ("transfer", "n1"),
        ("change", {"n2", "n3"}, set()),
        ("change", {"n1"}, set()),
    ],
    seed=0,
)
@given(st.lists(op, min_size=5, max_size=60), st.integers(0, 2**16))
def test_random_schedules_keep_raft_safe_and_converge(ops, seed):
    """Under random faults: one leader per term, identical applied entries, convergence."""
    run(ops, seed)
