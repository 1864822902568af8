"""An interrupted run leaves no rule, qdisc, stopped process or container.

A child process brings up a cluster, applies a partition, a slow link and a
pause, and is then interrupted; the cleanup is in code (`managed_cluster`),
and these tests check its effects from outside the child."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import docker
import pytest

from harness.backends.docker import LABEL
from harness.control import Control
from nemesis.heal import heal_all
from tests.harness.cluster_fixtures import SharedCluster

# The first test to ask for the cluster builds the image: minutes when cold.
pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]
ROOT = Path(__file__).resolve().parents[2]


def _start(args: list[str]) -> tuple[subprocess.Popen[str], str]:
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.nemesis.sigint_child", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    line = child.stdout.readline()  # blocks until READY (or the child dies)
    if not line.startswith("READY"):
        child.kill()
        _out, err = child.communicate(timeout=60)
        pytest.fail(f"child did not get ready: {line!r}\n{err}")
    return child, line.split(maxsplit=1)[1].strip()


def _interrupt(child: subprocess.Popen[str], signum: int) -> str:
    child.send_signal(signum)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 130, err
    assert "Traceback" not in err
    return out


def test_sigint_mid_run_removes_the_docker_cluster() -> None:
    """SIGINT after faults: the child's containers, network and key are all gone."""
    from tests.harness.cluster_fixtures import require_docker

    require_docker()
    client = docker.from_env()
    image = client.images.get("faultline-ember:latest").id
    name = f"pytest-sigint-{os.getpid()}"
    child, key_path = _start(["docker", name, image])
    try:
        selector = {"label": f"{LABEL}={name}"}
        assert len(client.containers.list(filters=selector)) == 3
        assert "CLEANED" in _interrupt(child, signal.SIGINT)
        assert client.containers.list(all=True, filters=selector) == []
        assert client.networks.list(filters=selector) == []
        assert not Path(key_path).exists()
    finally:
        if child.poll() is None:
            child.kill()


def _node_state(control: Control, node: str) -> tuple[str, str, str]:
    rules = control.run(node, "iptables -S").stdout
    qdiscs = control.run(node, "tc qdisc show").stdout
    state = control.run(
        node, "grep '^State:' /proc/$(cat /run/faultline/sigint.pid)/status || echo 'State: gone'"
    ).stdout.split()[1]
    return rules, qdiscs, state


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_heals_every_fault_on_the_nodes(
    cluster: SharedCluster, tmp_path: Path, signum: int
) -> None:
    """Faults are in place before the signal and none remain after it, checked in the nodes."""
    hosts = tmp_path / "hosts"
    hosts.write_text(
        "".join(
            f"{n.name} root@{n.ssh.host}:{n.ssh.port} {n.ssh.key_path} ip={n.ip}\n"
            for n in cluster.nodes
        )
    )
    c = cluster.control
    child, _key = _start(["ssh", str(hosts)])
    try:
        rules, qdiscs, state = _node_state(c, "n1")
        assert "-A FAULTLINE -s" in rules
        assert "qdisc htb fa17: dev eth0 root" in qdiscs
        assert state == "T"
        _interrupt(child, signum)
        for node in cluster.nodes:
            rules, qdiscs, state = _node_state(c, node.name)
            assert "FAULTLINE" not in rules
            assert "fa17" not in qdiscs
            assert state == "S"
    finally:
        if child.poll() is None:
            child.kill()
            heal_all(c)  # the child died without cleaning: do not taint later tests
        # By pidfile: a `pkill -f` pattern would match the shell running it.
        c.run_all(
            "kill -9 $(cat /run/faultline/sigint.pid) 2>/dev/null;"
            " rm -f /run/faultline/sigint.pid; true"
        )
