"""A wait for health ends at once when a node's process is gone, naming the node
and its log's last lines: before, a node that exited at start cost the full 90 s
and said only "not answering: n1; see ember.log", a log the run never kept."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from harness import db as db_module
from harness.backends.base import NodeHandle, SshTarget
from harness.control import CommandResult, ControlError
from harness.db import EmberDB
from harness.dbs.etcd import EtcdDB
from harness.process_db import EXIT_CHECK_S, DBError

NODES = [NodeHandle(name=f"n{i}", ip=f"10.0.0.{i}", ssh=SshTarget(host=f"10.0.0.{i}"))
         for i in (1, 2, 3)]  # fmt: skip


class Control:
    """Answers the pid lookup with `pids` and `tail` with `logs`, per node."""

    def __init__(self, pids: Mapping[str, str], logs: Mapping[str, str]) -> None:
        self.pids, self.logs = pids, logs
        self.fail = False

    def run_many(self, commands: Mapping[str, str], **_kw: Any) -> dict[str, CommandResult]:
        if self.fail:
            raise ControlError("n2: connection refused")
        out = {}
        for node, command in commands.items():
            text = self.logs[node] if command.startswith("tail ") else self.pids.get(node, "")
            out[node] = CommandResult(node, command, 0, text, "")
        return out


def test_exited_names_each_node_without_a_process_and_its_log_s_last_line() -> None:
    """Nodes whose logs end alike but for the time are named together."""
    control = Control(
        pids={"n1": "4242\n"},
        logs={
            "n2": "starting\n2026-12-04 16:43:37,883 ERROR ember: no such file\n\n",
            "n3": "2026-12-04 16:43:38,001 ERROR ember: no such file\n",
            "n4": "",
        },
    )
    nodes = [*NODES, NodeHandle(name="n4", ip="10.0.0.4", ssh=SshTarget(host="10.0.0.4"))]
    why = EmberDB(nodes, {}, 1).exited(control, ["n1", "n2", "n3", "n4"])  # type: ignore[arg-type]
    assert why == (
        "ember is not running on n2, n3 (log ends: ERROR ember: no such file); n4 (empty log)"
    )
    assert EmberDB(NODES, {}, 1).exited(control, ["n1"]) is None  # type: ignore[arg-type]


def test_exited_cannot_tell_when_the_shell_is_unreachable() -> None:
    control = Control(pids={}, logs={})
    control.fail = True
    assert EtcdDB(NODES, {}, 1).exited(control, ["n2"]) is None  # type: ignore[arg-type]


@pytest.fixture
def nobody_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(db_module, "http_json", lambda *_a, **_kw: None)


@pytest.mark.usefixtures("nobody_answers")
def test_a_gone_process_ends_the_wait_with_its_reason() -> None:
    asked: list[list[str]] = []

    def gone(down: Sequence[str]) -> str | None:
        asked.append(list(down))
        return "ember is not running on n2 (empty log)" if len(asked) > 1 else None

    began = time.monotonic()
    with pytest.raises(DBError, match=r"^ember is not running on n2 \(empty log\)$"):
        EmberDB(NODES, {}, 1).wait_healthy(["n1", "n2", "n3"], 60, gone=gone)
    took = time.monotonic() - began
    assert asked == [["n1", "n2", "n3"]] * 2
    # Asked no more often than EXIT_CHECK_S: the second answer came at the second ask.
    assert 2 * EXIT_CHECK_S <= took < 2 * EXIT_CHECK_S + 5


@pytest.mark.usefixtures("nobody_answers")
def test_without_a_reason_the_wait_runs_to_its_timeout() -> None:
    with pytest.raises(DBError, match=r"ember not healthy after 2.5s \(not answering: n1, n2"):
        EmberDB(NODES, {}, 1).wait_healthy(["n1", "n2"], 2.5, gone=lambda _down: None)
    with pytest.raises(DBError, match="not answering"):
        EmberDB(NODES, {}, 1).wait_healthy(["n1"], 0.3)


def test_an_etcd_zap_line_is_read_as_its_words() -> None:
    """etcd logs zap JSON; nodes refusing to start for one reason are named
    together, their reason as words, not a JSON object cut at 400 characters."""

    def line(ts: str) -> str:
        return ('{"level":"fatal","ts":"' + ts + '","caller":"etcdmain/etcd.go:271",'
                '"msg":"discovery failed","error":"listen tcp 10.0.0.9:2380: bind: '
                'cannot assign requested address","stacktrace":"main.main"}')  # fmt: skip

    control = Control(pids={}, logs={"n1": line("2026-12-07T10:00:00.1Z") + "\n",
                                     "n2": line("2026-12-07T10:00:00.4Z") + "\n",
                                     "n3": "{not json\n"})  # fmt: skip
    why = EtcdDB(NODES, {}, 1).exited(control, ["n1", "n2", "n3"])  # type: ignore[arg-type]
    assert why == ("etcd is not running on n1, n2 (log ends: fatal: discovery failed: listen "
                   "tcp 10.0.0.9:2380: bind: cannot assign requested address); "
                   "n3 (log ends: {not json)")  # fmt: skip
