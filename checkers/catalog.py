"""The invariant catalog (../shared/INVARIANTS.md) and where each rule is checked.

Theory of operation: every rule of the catalog is one `Rule`, naming the
anomaly kinds that report it, per checker. `sim` is the simulator's
omniscient checker (ember/sim/omniscient.py, judged by checkers/sim.py): its
kinds are the properties it watches as the simulation runs. Every other
checker reads what any run leaves behind (history.jsonl and the nodes'
events.jsonl), so a simulated run checks those rules with the very same code
on its own files; `where` says what else a rule needs, and why a rule is
simulator-only where it is.

Each anomaly kind belongs to at most one rule, so a verdict maps back to the
rules it breaks (`rules_broken`). The metastore's revision-ordering and
watch guarantees (checkers/revisions.py, checkers/watches.py) are etcd's
documented KV and watch API guarantees, not ember's invariants: they are
`GUARANTEES` (G1-G9), which hold for etcd and for ember's metastore alike
(`guarantees_broken`); what neither list names is `OUTSIDE`.
docs/invariants.md lists the same tables for readers;
tests/checkers/test_catalog.py holds them to each other and to the
checkers' sources, and breaks each rule alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Rule:
    """One catalog rule: its id, name, and the anomaly kinds per checker."""

    id: str
    name: str
    kinds: Mapping[str, frozenset[str]]
    where: str = ""

    @property
    def checkers(self) -> tuple[str, ...]:
        """The checkers that report this rule."""
        return tuple(self.kinds)


def _k(*names: str) -> frozenset[str]:
    return frozenset(names)


RULES: tuple[Rule, ...] = (
    Rule("R1", "election safety",
         {"raft": _k("two-leaders"), "sim": _k("one-leader-per-term")}),
    Rule("R2", "legal leader",
         {"raft": _k("leader-not-voter", "timeout-now-to-non-voter",
                     "timeout-now-acted-by-non-voter"),
          "sim": _k("election-quorum")},
         "votes won are seen only by the simulator (events record grants, not which "
         "configuration counted them)"),
    Rule("R3", "log matching", {"sim": _k("log-matching")},
         "simulator only: audit events carry no entry terms outside configurations"),
    Rule("R4", "state-machine safety",
         {"raft": _k("conflicting-committed-config"),
          "convergence": _k("digest-mismatch", "state-mismatch"),
          "sim": _k("state-machine-safety", "leader-completeness", "commit-current-term")},
         "events show committed configurations and applied digests; entries, commits of "
         "ordinary entries and leaders' logs only the simulator sees"),
    Rule("R5", "joint quorum",
         {"raft": _k("commit-without-quorum"), "sim": _k("quorum-commit", "joint-both-majorities")},
         "from events: configuration entries only (who stored them by their first commit, "
         "where nodes share a clock); every commit point in the simulator"),
    Rule("R6", "configuration chain",
         {"raft": _k("joint-skipped", "bad-config-transition"), "sim": _k("config-chain")}),
    Rule("R7", "one change at a time",
         {"raft": _k("two-uncommitted-configs", "restored-config-stale"),
          "sim": _k("one-uncommitted-config", "config-in-force", "change-before-term-commit")},
         "the own-term commit before a change, and truncation rolling a configuration back, "
         "need the log: simulator only"),
    Rule("R8", "catch-up precondition",
         {"raft": _k("joint-before-catchup", "catchup-outside-margin"),
          "sim": _k("catchup-margin")}),
    Rule("R9", "token and term fencing", {"raft": _k("stale-token-committed")},
         "a request refused (older token, other term) leaves only the client's error; its "
         "effect would be a committed configuration with an older token"),
    Rule("R10", "vote lease", {"raft": _k("vote-in-lease")},
         "judged on the voter's own lease counters (`vote-request`)"),
    Rule("R11", "check quorum", {"raft": _k("leader-kept-without-quorum")},
         "needs the nemesis's partitions (history) and the run's timeline.json to place "
         "events on the history's clock"),
    Rule("R12", "leaving the group",
         {"raft": _k("removed-before-stable", "removed-leader-stayed")}),
    Rule("M1", "stable follows Raft",
         {"revisions": _k("stable-before-commit", "stable-not-pending")}),
    Rule("M2", "stable moves forward", {"revisions": _k("stable-went-back")}),
    Rule("M3", "compare-and-set discipline",
         {"revisions": _k("assignment-chain-broken", "planned-without-pending",
                          "assignment-write-conflict", "assignment-revision-went-back")},
         "`unchanged since it read them` shows as a write whose old values are not the "
         "keys' current ones"),
    Rule("M4", "triggers move forward",
         {"revisions": _k("change-trigger-not-increasing"), "convergence": _k("stable-not-target")},
         "pending/planned holding the newest trigger's target is judged where it ends: "
         "stable must reach it"),
    Rule("M5", "cancel fencing",
         {"revisions": _k("cancel-wrong-pending", "cancel-reverted-new-config",
                          "cancel-cleared-alone")}),
    Rule("M6", "stale-request fencing",
         {"revisions": _k("stale-request-applied", "last-seen-went-back")},
         "the token half is R9's stale-token-committed"),
    Rule("M7", "membership containment",
         {"revisions": _k("voters-outside-assignments", "replica-stopped-while-wanted")},
         "voters against every node ever assigned to the partition; a stop against the "
         "assignments in force around it (events carry wall times, not read revisions)"),
    Rule("M8", "read safety", {"linearizable": _k("nonlinearizable")},
         "judged by what reads returned: a read served by a replica behind the leader's "
         "commit is a non-linearizable history"),
    Rule("M9", "one authority at a time",
         {"revisions": _k("driver-acted-after-successor", "primary-acted-after-successor")},
         "the placement driver's and each partition's primary's actions against their "
         "leases, in real time (events placed on the harness's clock)"),
    Rule("L1", "convergence",
         {"convergence": _k("rebalance-not-finished", "leader-count", "joint-at-end",
                            "voters-not-stable", "voters-not-following", "voters-config-differs",
                            "replicas-diverge")}),
    Rule("L2", "stability", {"convergence": _k("leader-changed-in-quiet")},
         "needs timeline.json to place events in the quiet period"),
    Rule("L3", "availability", {"convergence": _k("unavailable-after-heal")},
         "the quiet period's client ops (the final reads) are answered within a bound; the "
         "leaderless time around each change is the stats checker's unavailable_ms figure"),
)  # fmt: skip

BY_ID = {r.id: r for r in RULES}

# etcd's documented KV and watch guarantees (etcd's api_guarantees page), held
# by every revisioned store faultline drives: etcd, and ember's metastore.
GUARANTEES: tuple[Rule, ...] = (
    Rule("G1", "revisions never go back",
         {"revisions": _k("stale-revision", "write-revision-not-increasing",
                          "duplicate-write-revision")},
         "in real time across clients, so for each client too"),
    Rule("G2", "reads see acknowledged writes",
         {"revisions": _k("snapshot-missed-write", "snapshot-from-future",
                          "snapshot-wrong-value")},
         "reads at a past revision here; reads of the latest are M8's linearizability check"),
    Rule("G3", "watch ordered and unique",
         {"revisions": _k("watch-revision-went-back", "watch-duplicate")}),
    Rule("G4", "watch reliable", {"revisions": _k("watch-gap")},
         "no certain write missing between a stream's first and last event"),
    Rule("G5", "watch atomic", {"revisions": _k("watch-split-revision")},
         "needs response boundaries (watch results as {responses})"),
    Rule("G6", "watch bounded",
         {"revisions": _k("watch-before-start", "watch-outside-range", "watch-event-mismatch",
                          "watch-phantom-event", "watch-write-applied-twice")},
         "nothing before its start, outside its range, or that no write made (one write "
         "delivered at two revisions: applied twice)"),
    Rule("G7", "progress truthful",
         {"revisions": _k("watch-progress-ahead", "watch-progress-behind")},
         "needs progress notifications in the stream"),
    Rule("G8", "watch resumable", {"revisions": _k("watch-resume-gap")},
         "a watch from r loses nothing between r and its first event"),
    Rule("G9", "compaction honoured",
         {"revisions": _k("watch-compacted-not-refused", "watch-refused-wrongly",
                          "watch-compaction-lost-event")},
         "needs compactions in the history (declared `compaction`)"),
)  # fmt: skip

GUARANTEE_BY_ID = {g.id: g for g in GUARANTEES}

# faultline's own rule, which ../shared/INVARIANTS.md lacks: a correct node meets
# nothing its code was written never to meet, faults included (checkers/node_logs.py).
HEALTH: tuple[Rule, ...] = (
    Rule("H1", "no unexpected error",
         {"logs": _k("error-logged", "uncaught-exception")},
         "read from each node's own log: a line at ERROR or above, a traceback or a "
         "panic; a crash failpoint's own line is exempt"),
)  # fmt: skip

# Checked, but neither a catalog rule nor a guarantee: input the checker cannot read.
OUTSIDE: Mapping[str, frozenset[str]] = {
    "revisions": _k("watch-malformed", "assignments-malformed"),
}


def _index(rules: tuple[Rule, ...]) -> dict[tuple[str, str], str]:
    out: dict[tuple[str, str], str] = {}
    for rule in rules:
        for checker, kinds in rule.kinds.items():
            for kind in kinds:
                if (checker, kind) in out:
                    raise ValueError(
                        f"{checker}/{kind} belongs to {out[checker, kind]} and {rule.id}"
                    )
                out[checker, kind] = rule.id
    return out


RULE_OF = _index(RULES)
GUARANTEE_OF = _index(GUARANTEES)
HEALTH_OF = _index(HEALTH)


def rule_of(checker: str, kind: str) -> str | None:
    """The catalog rule (or faultline's own H1) an anomaly kind reports, or None
    (outside the catalog)."""
    return RULE_OF.get((checker, kind)) or HEALTH_OF.get((checker, kind))


def rules_broken(results: Mapping[str, Any], index: Mapping[tuple[str, str], str] = RULE_OF,
                 ) -> set[str]:  # fmt: skip
    """The rules a set of checker results report broken: {checker name: result},
    each result a CheckerResult or its results.json dict."""
    out: set[str] = set()
    for checker, result in results.items():
        anomalies = result.get("anomalies") if isinstance(result, dict) else result.anomalies
        for a in anomalies or ():
            kind = a.get("kind") if isinstance(a, dict) else a.kind
            rule = index.get((checker, str(kind)))
            if rule is not None:
                out.add(rule)
    return out


def guarantees_broken(results: Mapping[str, Any]) -> set[str]:
    """The API guarantees (G1-G9) a set of checker results report broken."""
    return rules_broken(results, GUARANTEE_OF)
