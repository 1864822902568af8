"""ember-node configuration: flags, TOML, addressing and bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ember.runtime import ConfigError
from ember.runtime.config import parse_peers
from ember.server import _parser, build_config

PEERS = "n1=127.0.0.1:7001,n2=127.0.0.1:7002:9002"


def test_http_port_derives_from_raft_port_unless_given() -> None:
    """A peer without an HTTP port listens on raft_port + 1000."""
    peers = parse_peers(PEERS)
    assert peers["n1"].http_port == 8001
    assert peers["n2"].http_port == 9002


def test_toml_config_with_flag_override(tmp_path: Path) -> None:
    """TOML settings load, flags override them, Raft tunables and planted bugs pass through."""
    toml = tmp_path / "node.toml"
    toml.write_text(
        f'id = "n2"\npeers = "{PEERS}"\ndata-dir = "{tmp_path}/d"\npartitions = 4\n'
        'planted_bugs = "skip-joint"\ncatchup_margin = 10\n'
    )
    cfg = build_config(_parser().parse_args(["--config", str(toml), "--partitions", "2"]))
    assert cfg.node_id == "n2"
    assert cfg.partitions == 2
    assert cfg.http_listen == ("127.0.0.1", 9002)
    assert cfg.raft_listen == ("127.0.0.1", 7002)
    assert cfg.bootstrap == ("n1", "n2")
    assert cfg.raft.planted_bugs == frozenset({"skip-joint"})
    assert cfg.raft.catchup_margin == 10


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--peers", PEERS, "--data-dir", "d"], "--id is required"),
        (["--id", "n9", "--peers", PEERS, "--data-dir", "d"], "not in --peers"),
        (["--id", "n1", "--peers", "n1=host", "--data-dir", "d"], "expected id=host"),
        (["--id", "n1", "--peers", "n1=h:99999", "--data-dir", "d"], "outside 1..65535"),
        (["--id", "n1", "--peers", "n1=h:1,n1=h:2", "--data-dir", "d"], "listed twice"),
        (["--id", "n1", "--peers", PEERS, "--data-dir", "d", "--bootstrap", "n7"], "unknown"),
        (["--id", "n1", "--peers", PEERS, "--data-dir", "d", "--planted-bugs", "x"], "planted"),
        (["--id", "n1", "--peers", PEERS, "--data-dir", "d", "--listen", "nope"], "host:port"),
        (["--id", "n1", "--peers", PEERS, "--data-dir", "d", "--partitions", "0"], "partitions"),
        (
            ["--id", "n1", "--peers", PEERS, "--data-dir", "d", "--compact-every", "-3"],
            "compact_every must be 0 \\(never compact\\) or more, got -3",
        ),
    ],
)
def test_bad_configuration_names_the_problem(argv: list[str], fragment: str) -> None:
    """Each invalid setting raises ConfigError whose message names it."""
    with pytest.raises(ConfigError, match=fragment):
        build_config(_parser().parse_args(argv))


@pytest.mark.parametrize(
    ("toml", "fragment"),
    [
        ('no_pre_vote = "maybe"', "no_pre_vote must be true or false"),
        ("unsafe_no_fsync = 1", "unsafe_no_fsync must be true or false"),
        ('tick_ms = "fast"', "tick_ms must be a number"),
        ("compact_every = -1", "compact_every must be 0"),
    ],
)
def test_a_toml_value_of_the_wrong_kind_is_refused(
    tmp_path: Path, toml: str, fragment: str
) -> None:
    """A TOML file can hold any kind of value: a switch that is not a boolean, or a
    compaction interval below 0, is refused, not read as true or as 'never'."""
    path = tmp_path / "node.toml"
    path.write_text(f'id = "n1"\npeers = "{PEERS}"\ndata_dir = "d"\n{toml}\n')
    with pytest.raises(ConfigError, match=fragment):
        build_config(_parser().parse_args(["--config", str(path)]))


def test_cli_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    """The console entry point turns a bad config into one stderr line and exit code 2."""
    missing = tmp_path / "missing.toml"
    proc = subprocess.run(
        [sys.executable, "-m", "ember.server", "--config", str(missing)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"ember-node: --config {missing}: No such file or directory"
    ]


def test_second_process_on_a_data_dir_exits_with_one_line(tmp_path: Path) -> None:
    """A store already held by a running node: exit 1 naming it, no traceback."""
    from tests.node.cluster import ProcCluster, free_ports

    cluster = ProcCluster(tmp_path, ["n1"], extra=["--partitions", "1"])
    try:
        cluster.start("n1")
        raft, http = free_ports(2)
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "ember.server",
                "--id",
                "n1",
                "--peers",
                f"n1=127.0.0.1:{raft}:{http}",
                "--data-dir",
                str(cluster.data_dir("n1")),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        cluster.close()
    assert proc.returncode == 1
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("ember-node:")]
    assert len(lines) == 1
    assert "already open" in lines[0]
    assert "Traceback" not in proc.stderr
