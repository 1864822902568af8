"""Whole runs against a 5-node Docker cluster of etcd 3.4 (marked docker).

Two runs, each one cluster: register + membership changes under partitions
and kills (60 s), and the metastore workload with its full traffic (deletes,
compactions, past reads, watches of every kind; 20 s).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from checkers.api import UNKNOWN
from checkers.history import load_history, pair
from harness.plan import Plan
from harness.runner import RunOutcome, run
from reports.render import write_report
from tests.harness.cluster_fixtures import require_docker

pytestmark = pytest.mark.docker

NODES = ("n1", "n2", "n3", "n4", "n5")
PHASES = ["catching-up", "stable"]


def _plan(**kw: Any) -> Plan:
    base: dict[str, Any] = {"name": "pytest-etcd", "db": "etcd", "nodes": NODES,
                            "concurrency": 8, "rate_hz": 40.0, "quiet_s": 3.0}  # fmt: skip
    return Plan(**(base | kw))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One store for the module's runs."""
    require_docker()
    return tmp_path_factory.mktemp("store")


@pytest.fixture(scope="module")
def register_run(store: Path) -> RunOutcome:
    """60 s of register traffic and membership moves under partitions and kills."""
    plan = _plan(seed=1010, time_limit_s=60.0, nemesis=("partition", "kill"),
                 workload=("register", "change-peers"),
                 options={"change_interval_s": 2.0, "nemesis_phases": PHASES})  # fmt: skip
    return run(plan, store)


@pytest.fixture(scope="module")
def watch_run(store: Path) -> RunOutcome:
    """20 s of the full metastore traffic under kills timed by compactions and
    defragmentations (compact-kill). At 5 ops/s a key goes a second unwritten
    often enough for etcd's 1 s progress notifications to reach the watches
    (at 25 ops/s a 20 s run got none in CI)."""
    plan = _plan(seed=2020, time_limit_s=20.0, nemesis=("compact-kill",), rate_hz=5.0,
                 workload=("metastore",), options={"nemesis_gap_s": 4.0})  # fmt: skip
    return run(plan, store)


def _ops(outcome: RunOutcome) -> list[Any]:
    return pair(load_history(outcome.run.history))


def test_a_register_run_with_membership_changes_under_faults_is_valid(
    register_run: RunOutcome,
) -> None:
    """Linearizable, faults overlapped membership changes, and the verdict is valid."""
    result = register_run.result
    assert register_run.error is None, register_run.error
    assert result.valid is True, result.reasons
    ops = _ops(register_run)
    changes = [op for op in ops if op.f == "change-peers" and op.type == "ok"]
    moves = {op.value["move"] for op in changes}
    assert moves & {"add", "promote", "remove", "replace"}, moves
    faults = {op.f for op in ops if op.process == "nemesis" and op.type == "ok"}
    assert faults & {"kill", "partition"}, faults
    stats = result.checkers["stats"].figures
    assert stats["fault_change_overlaps"] > 0


def test_the_phase_nemesis_fires_on_etcd_membership_transitions(register_run: RunOutcome) -> None:
    """At least one fault names a trigger seen in etcd's member list."""
    ops = _ops(register_run)
    triggered = [op for op in ops if op.process == "nemesis" and isinstance(op.value, dict)
                 and (op.value.get("trigger") or {}).get("group") == "etcd"]  # fmt: skip
    assert triggered, "no phase-triggered fault"
    assert {op.value["trigger"]["stage"] for op in triggered} <= set(PHASES)


# etcd-io/etcd#18089, in Debian's etcd 3.4.23 (fixed upstream in 3.4.34 / 3.5.16): a
# delete at the revision a compaction is made at is compacted away, so a watch from
# that revision never delivers it. faultline found it in its first run with compactions.
KNOWN_ETCD_BUGS = {"watch-compaction-lost-event"}


def test_etcd_watch_streams_keep_every_guarantee_but_a_known_etcd_bug(
    watch_run: RunOutcome,
) -> None:
    """The full metastore traffic (deletes, past reads, compactions, probing, key and
    slow watches) is judged by every guarantee; the only breaks are etcd#18089's,
    each a delete lost at a compaction revision."""
    result = watch_run.result
    for name, checker in result.checkers.items():
        if name != "revisions":
            assert checker.valid is True, (name, checker.anomalies)
    revisions = result.checkers["revisions"]
    assert revisions.valid is not UNKNOWN, revisions.error
    unexpected = [a for a in revisions.anomalies if a.kind not in KNOWN_ETCD_BUGS]
    assert not unexpected, unexpected
    ops = _ops(watch_run)
    by_index = {op.invoke_index: op for op in ops}
    for anomaly in revisions.anomalies:
        lost = by_index[anomaly.ops[1]]
        assert (lost.f, lost.result.get("deleted")) == ("delete", 1), anomaly
    assert revisions.figures["watches"] >= 3
    assert revisions.figures["compactions"] >= 1
    kills = [op.result for op in ops if op.f == "compact-kill" and op.type == "ok"]
    assert kills, "no compact-kill was applied"
    for value in kills:
        done = value["maintenance"]
        assert done["action"] in ("compact", "defrag"), value
        assert value["pids"][value["node"]], value  # somebody was killed
        assert done["kill_after_ms"] >= value["delay_ms"], value  # the request went first
    streams = [op.result for op in ops if op.f == "watch" and isinstance(op.result, dict)]
    responses = [r for s in streams for r in s["responses"]]
    assert any(r.get("progress") for r in responses), "etcd sent no progress notification"
    for stream in streams:
        delivered = [e["revision"] for r in stream["responses"] for e in r.get("events", [])]
        assert delivered == sorted(delivered)


def test_the_report_shows_an_etcd_run_like_an_ember_run(register_run: RunOutcome) -> None:
    """The HTML report renders the etcd run's plan, verdicts and membership windows."""
    html = write_report(register_run.run.path).read_text()
    assert "&quot;etcd&quot;" in html or '"etcd"' in html
    assert "linearizable" in html
    assert "change-peers" in html
    assert json.loads(register_run.run.results.read_text())["valid"] is True


def test_etcd_refusing_a_setting_at_start_is_named_at_once(store: Path) -> None:
    """A setting etcd refuses only when it starts (each value of the right kind,
    the pair not: an election timeout under five heartbeats; a value of the
    wrong kind is refused before anything starts, harness/etcd_flags.py): the
    health wait ends at its first look at the processes, with etcd's own
    words, and the logs are kept."""
    settings = {"heartbeat-interval": 100, "election-timeout": 200}
    plan = _plan(seed=3030, nodes=("n1", "n2", "n3"), time_limit_s=5.0, nemesis=(),
                 workload=("register",), db_settings=settings)  # fmt: skip
    outcome = run(plan, store)
    assert outcome.exit_code == 2
    assert outcome.error is not None
    assert outcome.error.startswith("etcd is not running on n1, n2, n3 (log ends: "), outcome.error
    assert "--election-timeout" in outcome.error, outcome.error
    for node in ("n1", "n2", "n3"):
        assert "ETCD_ELECTION_TIMEOUT" in outcome.run.log(node).read_text()
