"""The `logs` checker (H1): what a node's own log says went wrong, by level, for
ember's and etcd's formats; what the harness asked for is exempt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checkers.api import CheckContext
from checkers.catalog import rule_of
from checkers.compose import check, select
from checkers.node_logs import MAX_ANOMALIES_PER_NODE, NodeLogsChecker, load_logs, scan

T = "2026-01-01 00:00:12,035"
CLEAN_EMBER = [
    f"{T} INFO ember.server: node n3 serving HTTP on 0.0.0.0:8000",
    f"{T} INFO ember.net.transport: n3: link with n1 lost: ConnectionResetError(104, 'reset')",
    f"{T} WARNING ember.storage.node: wal-1.log: torn tail at byte offset 4096: dropping 12 bytes",
    f"{T} WARNING ember.rebalance.agent: rebalance of default/2 failed (ECATCHUP): cancelling",
    f"{T} ERROR ember.runtime.node: failpoint crash at after-apply: exiting now",
]


def _kinds(lines: list[str]) -> list[tuple[str, int, str]]:
    found, _ = scan(lines)
    return [(f.kind, f.line, f.text) for f in found]


def test_a_clean_ember_log_and_a_crash_the_harness_asked_for_are_nothing() -> None:
    found, levels = scan(CLEAN_EMBER)
    assert found == []
    assert levels == {"INFO": 2, "WARNING": 2, "ERROR": 1}


def test_an_ember_error_line_names_its_traceback_s_cause() -> None:
    lines = [
        *CLEAN_EMBER[:1],
        f"{T} ERROR ember.placement.driver: placement driver tick failed",
        "Traceback (most recent call last):",
        '  File "ember/placement/driver.py", line 130, in run',
        "    await self.tick()",
        "KeyError: 'part-9'",
        f"{T} CRITICAL ember.api: out of descriptors",
        f"{T} ERROR ember.sim.loop: simulation: Future exception was never retrieved: "
        "ProposalDropped('index 320 committed from term 3')",
        "ember.runtime.group.ProposalDropped: index 320 committed from term 3",
        f"{T} INFO ember.server: stopping",
    ]
    assert _kinds(lines) == [
        ("error-logged", 2, "ERROR ember.placement.driver: placement driver tick failed "
                            "[KeyError: 'part-9']"),
        ("error-logged", 7, "CRITICAL ember.api: out of descriptors"),
        ("error-logged", 8, "ERROR ember.sim.loop: simulation: Future exception was never "
                            "retrieved: ProposalDropped('index 320 committed from term 3')"),
    ]  # fmt: skip


def test_a_traceback_outside_any_line_is_a_process_that_died_of_it() -> None:
    lines = [
        CLEAN_EMBER[0],
        "Traceback (most recent call last):",
        '  File "ember/server.py", line 300, in main',
        "RuntimeError: event loop is closed",
        "",
    ]
    assert _kinds(lines) == [("uncaught-exception", 2, "RuntimeError: event loop is closed")]


def test_etcd_s_errors_and_exits_are_what_faults_and_operators_cause_its_panics_not() -> None:
    lines = [
        "2026-12-04 16:43:37.883839 I | pkg/flags: recognized and used environment variable",
        "2026-12-04 16:43:37.883839 E | rafthttp: failed to dial 3b2e: connection refused",
        json.dumps({"level": "warn", "msg": "lost TCP streaming connection with remote peer"}),
        json.dumps({"level": "error", "msg": "failed to send out heartbeat on time"}),
        json.dumps({"level": "fatal", "msg": "discovery failed", "error": "member bootstrapped"}),
        json.dumps({"level": "panic", "msg": "failed to recover v3 backend from snapshot"}),
        "2026-12-04 16:43:38.000001 C | etcdmain: member 3b2e has already been bootstrapped",
        "panic: runtime error: index out of range [3] with length 3",
        "fatal error: concurrent map writes",
    ]
    assert [(k, line) for k, line, _ in _kinds(lines)] == [
        ("uncaught-exception", 6), ("uncaught-exception", 8), ("uncaught-exception", 9),
    ]  # fmt: skip
    _, levels = scan(lines)
    assert levels == {"I": 1, "E": 1, "WARN": 1, "ERROR": 1, "FATAL": 1, "PANIC": 1, "C": 1}


def test_a_known_upstream_panic_is_named_with_its_issue_and_not_counted() -> None:
    """etcd-io/etcd#21966, as a CI run's etcd membership test met it on n4: the
    member being removed panicked on a status call. Said in the summary with
    the issue; another panic on the same node still counts."""
    removed = [
        json.dumps({"level": "panic", "caller": "membership/cluster.go:813",
                    "msg": "failed to find local ID in cluster members"}),
        "panic: failed to find local ID in cluster members",
        "",
        "goroutine 461 [running]:",
    ]  # fmt: skip
    ok = check({"name": "t", "nodes": ["n4"]}, [], logs={"n4": removed})
    logs = ok.checkers["logs"]
    assert logs.valid is True
    assert logs.figures["known_upstream"] == [
        {"node": "n4", "issue": "https://github.com/etcd-io/etcd/issues/21966", "lines": [1, 2]}
    ]
    (said,) = [r for r in ok.reasons if r.startswith("logs: ")]
    assert "known upstream defect on n4 (log lines 1, 2), not counted" in said
    assert "etcd-io/etcd/issues/21966" in said
    other = NodeLogsChecker().check(
        CheckContext(logs={"n4": [*removed, "panic: runtime error: index out of range"]})
    )
    assert other.valid is False
    assert [a.events[0]["line"] for a in other.anomalies] == [5]


def test_the_checker_reports_h1_per_node_and_caps_a_flood() -> None:
    error = f"{T} ERROR ember.api: unexpected error in POST /kv/k"
    ctx = CheckContext(logs={"n1": CLEAN_EMBER, "n2": [error] * (MAX_ANOMALIES_PER_NODE + 5)})
    result = NodeLogsChecker().check(ctx)
    assert result.valid is False
    assert {rule_of("logs", a.kind) for a in result.anomalies} == {"H1"}
    assert result.anomalies[0].message == f"n2 log line 1: {error[len(T) + 1 :]}"
    assert result.figures["found"] == {"n2": MAX_ANOMALIES_PER_NODE + 5}
    assert result.figures["by_level"]["n1"] == {"ERROR": 1, "INFO": 2, "WARNING": 2}
    assert NodeLogsChecker().check(CheckContext(logs={"n1": CLEAN_EMBER})).valid is True
    partial = NodeLogsChecker().check(
        CheckContext(plan={"nodes": ["n1", "n2", "n3"]}, logs={"n1": CLEAN_EMBER})
    )
    assert (partial.valid, partial.figures["unread"]) == (True, ["n2", "n3"])
    # Chosen by name for a run without logs: not checked, so not valid.
    nothing = NodeLogsChecker().check(CheckContext())
    assert (nothing.valid, nothing.error) == ("unknown", "no nodes/<n>/ember.log")


def test_runs_with_logs_select_the_checker_and_others_do_not(tmp_path: Path) -> None:
    assert load_logs(tmp_path) is None
    for node, text in (("n1", "\n".join(CLEAN_EMBER)), ("n2", "")):
        (tmp_path / "nodes" / node).mkdir(parents=True)
        (tmp_path / "nodes" / node / "ember.log").write_text(text)
    logs = load_logs(tmp_path)
    assert logs == {"n1": CLEAN_EMBER, "n2": []}
    assert "logs" in select(None, {}, True, has_logs=True)
    assert "logs" not in select(None, {}, True)
    result = check({}, [], audit={}, logs=logs)
    assert result.checkers["logs"].valid is True


@pytest.mark.slow
def test_a_simulated_run_keeps_its_logs_and_is_judged_on_them(tmp_path: Path) -> None:
    """The runner hands the logs to the checkers: a clean simulated run's `logs`
    is valid, with every node's lines counted."""
    from harness import plan as plans
    from harness.progress import RunStatus
    from harness.runner import run

    plan = plans.Plan(seed=2, backend="sim", nodes=("n1", "n2", "n3"), time_limit_s=5.0,
                      quiet_s=2.0, workload=("register",), nemesis=("kill",))  # fmt: skip
    outcome = run(plan, tmp_path, status=RunStatus())
    logs = outcome.result.checkers["logs"]
    assert logs.valid is True, logs.anomalies
    assert set(logs.figures["by_level"]) == {"n1", "n2", "n3"}
    assert all(levels.get("INFO") for levels in logs.figures["by_level"].values())
