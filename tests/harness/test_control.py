"""SSH control over the shared cluster: parallel commands, files, errors."""

import socket
from pathlib import Path

import pytest

from harness.backends.base import NodeHandle, SshTarget
from harness.control import CommandError, Control, ControlError, UnreachableError
from tests.harness.cluster_fixtures import SharedCluster

# The first test to ask for the cluster builds the image: minutes when cold.
pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]


def test_run_all_reaches_every_node(cluster: SharedCluster) -> None:
    """The same command runs on all five nodes, each answering with its own name."""
    results = cluster.control.run_all("hostname")
    assert {n: r.stdout.strip() for n, r in results.items()} == {
        n.name: n.name for n in cluster.nodes
    }


def test_commands_on_many_nodes_overlap_in_time(cluster: SharedCluster) -> None:
    """Commands on different nodes run at once: every node's interval overlaps every other's."""
    results = cluster.control.run_all("date +%s.%N; sleep 1; date +%s.%N")
    spans = [tuple(float(x) for x in r.stdout.split()) for r in results.values()]
    latest_start = max(start for start, _ in spans)
    earliest_end = min(end for _, end in spans)
    assert latest_start < earliest_end


def test_upload_then_fetch_round_trips_bytes(cluster: SharedCluster, tmp_path: Path) -> None:
    """A file uploaded to a node comes back byte for byte, into new folders."""
    payload = bytes(range(256)) * 1000
    src = tmp_path / "payload.bin"
    src.write_bytes(payload)
    cluster.control.upload("n2", src, "/tmp/faultline-test/deep/payload.bin")
    back = tmp_path / "fetched" / "n2" / "payload.bin"
    cluster.control.fetch("n2", "/tmp/faultline-test/deep/payload.bin", back)
    assert back.read_bytes() == payload
    cluster.control.run("n2", "rm -rf /tmp/faultline-test")


def test_fetching_a_missing_file_names_node_and_path(
    cluster: SharedCluster, tmp_path: Path
) -> None:
    """A missing remote file is one error naming node:path, and leaves no local file."""
    with pytest.raises(ControlError, match="cannot fetch n1:/no/such/log: no such file"):
        cluster.control.fetch("n1", "/no/such/log", tmp_path / "log")
    assert not (tmp_path / "log").exists()


def test_failing_command_reports_exit_status_and_stderr(cluster: SharedCluster) -> None:
    """With check, a non-zero exit raises with the node, status and stderr."""
    with pytest.raises(CommandError, match=r"(?s)on n3 exited 7: .*boom"):
        cluster.control.run("n3", "echo boom >&2; exit 7")
    result = cluster.control.run("n3", "exit 7", check=False)
    assert result.exit_status == 7
    assert not result.ok


def test_command_timeout_is_an_error_naming_the_node(cluster: SharedCluster) -> None:
    """A command that outlives its timeout raises, naming node and limit."""
    with pytest.raises(CommandError, match=r"on n4 \(127\.0\.0\.1:\d+\) timed out after 0\.5s"):
        cluster.control.run("n4", "sleep 5", timeout_s=0.5)


def test_large_output_on_both_streams_does_not_stall(cluster: SharedCluster) -> None:
    """Megabytes on stdout and stderr at once are read in full."""
    cmd = "head -c 3000000 /dev/zero | tr '\\0' a; head -c 3000000 /dev/zero | tr '\\0' b >&2"
    result = cluster.control.run("n1", cmd, timeout_s=60)
    assert len(result.stdout) == 3_000_000
    assert len(result.stderr) == 3_000_000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_host_is_one_error_naming_host_and_port(cluster: SharedCluster) -> None:
    """A node nobody listens for fails with its name and host:port, once."""
    port = _free_port()
    dead = NodeHandle(name="ghost", ip="10.255.0.1", ssh=SshTarget(host="127.0.0.1", port=port))
    with Control([dead], connect_timeout_s=2) as control, pytest.raises(UnreachableError) as info:
        control.run("ghost", "true")
    assert str(info.value) == (
        f"cannot reach node ghost at 127.0.0.1:{port} as root: connection refused"
    )


def test_one_dead_node_among_live_ones_is_named(cluster: SharedCluster) -> None:
    """run_all over live nodes plus a dead one raises an error naming only the dead one."""
    port = _free_port()
    dead = NodeHandle(name="ghost", ip="10.255.0.1", ssh=SshTarget(host="127.0.0.1", port=port))
    with Control([*cluster.nodes[:2], dead], connect_timeout_s=2) as control:
        with pytest.raises(UnreachableError, match=f"node ghost at 127.0.0.1:{port}"):
            control.run_all("true")
        assert control.run("n1", "echo alive").stdout.strip() == "alive"


def test_wrong_key_is_an_authentication_error(cluster: SharedCluster, tmp_path: Path) -> None:
    """A key the node does not know fails as authentication, naming the node."""
    import paramiko

    key = tmp_path / "other"
    paramiko.ECDSAKey.generate().write_private_key_file(str(key))
    node = cluster.nodes[0]
    wrong = NodeHandle(
        name=node.name,
        ip=node.ip,
        ssh=SshTarget(host=node.ssh.host, port=node.ssh.port, key_path=str(key)),
    )
    with (
        Control([wrong]) as control,
        pytest.raises(UnreachableError, match="authentication failed"),
    ):
        control.run(node.name, "true")


def test_fetch_all_gathers_a_log_per_node(cluster: SharedCluster, tmp_path: Path) -> None:
    """Each node's log lands in <dir>/<node>/<name>; a node without it is skipped when allowed."""
    c = cluster.control
    c.run_all("mkdir -p /var/log/faultline && hostname > /var/log/faultline/test-node.log")
    c.run("n5", "rm /var/log/faultline/test-node.log")
    try:
        missing = r"cannot fetch n5:/var/log/faultline/test-node\.log"
        with pytest.raises(ControlError, match=missing):
            c.fetch_all("/var/log/faultline/test-node.log", tmp_path / "strict")
        got = c.fetch_all("/var/log/faultline/test-node.log", tmp_path / "run", missing_ok=True)
        assert sorted(got) == ["n1", "n2", "n3", "n4"]
        for node, path in got.items():
            assert path == tmp_path / "run" / node / "test-node.log"
            assert path.read_text().strip() == node
    finally:
        c.run_all("rm -f /var/log/faultline/test-node.log")
