"""The failpoints the harness switched on at a node survive its restart: the EmberDB
writes them into the node's config as it switches them, and ember-node switches them
on before it serves anything."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from ember.runtime import ConfigError
from ember.server import _parser, build_config
from harness.backends.base import NodeHandle, SshTarget
from harness.control import ControlError
from harness.db import EmberDB
from harness.process_db import DBError

NODES = [NodeHandle(name=f"n{i}", ip=f"10.0.0.{i}", ssh=SshTarget(host=f"10.0.0.{i}"))
         for i in (1, 2, 3)]  # fmt: skip


def _node_config(db: EmberDB, tmp_path: Path, name: str) -> Any:
    text = db._config(next(n for n in NODES if n.name == name))
    path = tmp_path / f"{name}.toml"
    path.write_text(text.replace(f'"{db.root}"', f'"{tmp_path / name}"'))
    return build_config(_parser().parse_args(["--config", str(path)]))


def test_a_node_restarts_with_the_failpoints_the_harness_has_on(tmp_path: Path) -> None:
    """On: kept with its parameters; off, or one-shot: not kept; other nodes untouched."""
    db = EmberDB(NODES, {}, 7)
    db.remember_failpoint("n1", "kv.ack-before-commit", {})
    db.remember_failpoint("n1", "raft.append.delay", {"delay_ms": 300, "peer": None})
    db.remember_failpoint("n1", "crash", {"point": "after-apply", "one_shot": True})
    db.remember_failpoint("n2", "raft.skip-catchup", {})
    db.remember_failpoint("n2", "raft.skip-catchup", None)
    assert _node_config(db, tmp_path, "n1").failpoints == {
        "kv.ack-before-commit": {}, "raft.append.delay": {"delay_ms": 300}
    }  # fmt: skip
    assert _node_config(db, tmp_path, "n2").failpoints == {}
    assert "failpoints" not in tomllib.loads(db._config(NODES[2]))


class Control:
    """Records the scripts run per node; fails when told to."""

    def __init__(self) -> None:
        self.sent: list[dict[str, str]] = []
        self.fail = False

    def run_many(self, commands: dict[str, str], **_kw: Any) -> None:
        if self.fail:
            raise ControlError("n2: connection refused")
        self.sent.append(dict(commands))


def test_a_switched_failpoint_rewrites_that_nodes_config() -> None:
    """Whatever starts the node next (a kill's heal runs the start command itself)
    reads a config with the failpoints on; an unchanged switch writes nothing."""
    control = Control()
    db = EmberDB(NODES, {}, 7)
    db.remember_failpoint("n2", "kv.ack-before-commit", {})  # before install: nothing to write
    db.install(control)  # type: ignore[arg-type]
    control.sent.clear()
    db.remember_failpoint("n2", "raft.skip-catchup", {})
    db.remember_failpoint("n2", "raft.skip-catchup", {})
    assert [list(c) for c in control.sent] == [["n2"]]
    script = control.sent[0]["n2"]
    assert '"kv.ack-before-commit" = {}' in script
    assert '"raft.skip-catchup" = {}' in script
    assert script.endswith(f"> {db.config_path}")
    db.remember_failpoint("n2", "raft.skip-catchup", None)
    assert '"raft.skip-catchup"' not in control.sent[-1]["n2"]
    control.fail = True
    with pytest.raises(DBError, match="config a restart reads could not be written"):
        db.remember_failpoint("n2", "raft.step-down-on-joint", {})


def test_a_bad_failpoints_table_is_refused_by_the_node(tmp_path: Path) -> None:
    """ember-node checks the table as the admin API would."""
    path = tmp_path / "n.toml"
    path.write_text('id = "n1"\npeers = "n1=127.0.0.1:1:2"\ndata_dir = "/tmp/x"\n'
                    'failpoints = {"no.such" = {}}\n')  # fmt: skip
    with pytest.raises(ConfigError, match=r"failpoints\.no\.such"):
        build_config(_parser().parse_args(["--config", str(path)]))
