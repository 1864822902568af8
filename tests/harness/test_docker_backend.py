"""The ember image and Docker clusters: build, cache, up, down, leftovers."""

import shlex
import time
from pathlib import Path

import docker
import pytest

from harness.backends.docker import LABEL, DockerBackend, cleanup
from harness.backends.ssh import SshBackend
from harness.control import Control, UnreachableError
from harness.db import EmberDB
from harness.images import ImageBuildError, base_tag, build_image, docker_build, snapshot_source
from harness.process_db import empty_dir
from tests.harness.cluster_fixtures import SharedCluster

# The first test to ask for the cluster builds the image: minutes when cold.
pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]


def _leftovers(name: str) -> list[str]:
    client = docker.from_env()
    selector = {"label": f"{LABEL}={name}"}
    found = [c.name for c in client.containers.list(all=True, filters=selector)]
    found += [v.name for v in client.volumes.list(filters=selector)]
    return found + [n.name for n in client.networks.list(filters=selector)]


def test_warm_rebuild_reuses_every_layer(cluster: SharedCluster) -> None:
    """With unchanged inputs, a second build finds all three layers cached."""
    started = time.monotonic()
    report = build_image(source_root=cluster.source)
    print(f"\nwarm image build: {time.monotonic() - started:.2f}s")
    assert report.tag == cluster.report.tag
    assert [(step, action.split()[0]) for step, action, _ in report.steps] == [
        ("base", "cached"),
        ("deps", "cached"),
        ("top", "cached"),
    ]


def test_changed_source_rebuilds_only_the_top_layer(cluster: SharedCluster, tmp_path: Path) -> None:
    """Editing ember's source makes a new top layer on the cached base and deps."""
    source = snapshot_source(tmp_path / "src", cluster.source)
    with (source / "ember" / "__init__.py").open("a") as f:
        f.write("\n# changed by test_changed_source_rebuilds_only_the_top_layer\n")
    started = time.monotonic()
    report = build_image(source_root=source, tag_latest=False)
    print(f"\nrebuild after a source change: {time.monotonic() - started:.2f}s")
    assert [(step, action.split()[0]) for step, action, _ in report.steps] == [
        ("base", "cached"),
        ("deps", "cached"),
        ("top", "built"),
    ]
    assert report.tag != cluster.report.tag
    docker.from_env().images.remove(report.tag)


def test_image_has_the_node_tools_and_faultline(cluster: SharedCluster) -> None:
    """Nodes have python3 3.11, iptables, tc, ps, and faultline importable in the venv."""
    result = cluster.control.run(
        "n1",
        "python3 --version && iptables --version && tc -V && ps --version"
        " && /opt/faultline/bin/python -c 'import ember, harness, nemesis; print(\"ok\")'",
    )
    assert "Python 3.11" in result.stdout
    assert result.stdout.strip().endswith("ok")


def test_failed_build_step_is_named(cluster: SharedCluster, tmp_path: Path) -> None:
    """A failing Dockerfile step raises ImageBuildError naming the step and the command."""
    (tmp_path / "Dockerfile").write_text(f"FROM {base_tag()}\nRUN echo broken-step && false\n")
    with pytest.raises(ImageBuildError, match=r"(?s)at step 'top: probe'.*false"):
        docker_build(docker.from_env(), "top: probe", tmp_path, "Dockerfile", "faultline-probe:x")


def test_cluster_has_five_nodes_on_one_private_network(cluster: SharedCluster) -> None:
    """Five named nodes, distinct addresses, sshd published on loopback only."""
    assert [n.name for n in cluster.nodes] == ["n1", "n2", "n3", "n4", "n5"]
    assert len({n.ip for n in cluster.nodes}) == 5
    assert {n.ssh.host for n in cluster.nodes} == {"127.0.0.1"}
    ips = cluster.control.run("n1", "hostname -I").stdout.split()
    assert ips == [cluster.nodes[0].ip]


def test_nodes_reach_each_other_on_the_cluster_network(cluster: SharedCluster) -> None:
    """n1 opens a TCP connection to every other node's sshd by its cluster address."""
    for node in cluster.nodes[1:]:
        probe = f"python3 -c \"import socket; socket.create_connection(('{node.ip}', 22), 3)\""
        cluster.control.run("n1", probe)


def test_nodes_resolve_each_other_by_node_name(cluster: SharedCluster) -> None:
    """Inside the cluster, `n2` resolves to n2's address on the private network."""
    for node in cluster.nodes[1:]:
        out = cluster.control.run("n1", f"getent hosts {node.name}").stdout.split()
        assert out[0] == node.ip


def test_cluster_up_and_down_leaves_nothing() -> None:
    """A cluster brought up and down leaves no container, volume, network or key
    behind; each node's data dir is a volume of its own, which the databases'
    install empties in place (a mount point cannot be removed)."""
    backend = DockerBackend("pytest-updown", size=2, volumes=(EmberDB.root,))
    try:
        started = time.monotonic()
        nodes = backend.up()
        print(f"\n2-node cluster up: {time.monotonic() - started:.2f}s")
        key_dir = Path(str(nodes[0].ssh.key_path)).parent
        assert len(_leftovers("pytest-updown")) == 5  # 2 containers, 2 volumes, 1 network
        with Control(nodes) as control:
            root = shlex.quote(EmberDB.root)
            probe = f"python3 -c \"import os; print(os.path.ismount('{EmberDB.root}'))\""
            assert control.run("n1", probe).stdout.strip() == "True"
            control.run("n1", f"mkdir -p {root}/sub && touch {root}/sub/f {root}/g")
            control.run("n1", empty_dir(EmberDB.root))
            assert control.run("n1", f"ls -A {root}").stdout.strip() == ""
    finally:
        started = time.monotonic()
        backend.down()
        print(f"2-node cluster down: {time.monotonic() - started:.2f}s")
    assert _leftovers("pytest-updown") == []
    assert not key_dir.exists()
    assert backend.nodes == []


def test_cleanup_removes_what_a_crashed_run_left() -> None:
    """Labelled containers and networks of a dead run are found and removed by name."""
    client = docker.from_env()
    labels = {LABEL: "pytest-crashed"}
    try:
        client.networks.create("faultline-pytest-crashed", labels=labels)
        client.containers.create(base_tag(), "true", name="faultline-pytest-crashed-n1",
                                 labels=labels)  # fmt: skip
        client.volumes.create("faultline-pytest-crashed-v", labels=labels)
        removed = cleanup("pytest-crashed")
        assert sorted(removed) == [
            "container faultline-pytest-crashed-n1",
            "network faultline-pytest-crashed",
            "volume faultline-pytest-crashed-v",
        ]
        assert _leftovers("pytest-crashed") == []
    finally:
        cleanup("pytest-crashed")  # the network, if making the container failed


def test_missing_image_is_a_clear_error() -> None:
    """Bringing up a cluster of an image that was never built says how to build it."""
    backend = DockerBackend("pytest-noimage", image="faultline-ember:does-not-exist")
    with pytest.raises(RuntimeError, match=r"faultline-ember:does-not-exist is not built"):
        backend.up()
    assert _leftovers("pytest-noimage") == []


def _hosts_file(cluster: SharedCluster, path: Path, extra: str = "") -> Path:
    lines = [
        f"{n.name} root@{n.ssh.host}:{n.ssh.port} {n.ssh.key_path} ip={n.ip}" for n in cluster.nodes
    ]
    path.write_text("\n".join(lines) + "\n" + extra)
    return path


def test_ssh_backend_controls_hosts_from_a_hosts_file(
    cluster: SharedCluster, tmp_path: Path
) -> None:
    """The ssh backend reaches the same nodes through a hosts file, and down leaves them up."""
    backend = SshBackend.from_file(_hosts_file(cluster, tmp_path / "hosts"))
    nodes = backend.up()
    assert [(n.name, n.ip) for n in nodes] == [(n.name, n.ip) for n in cluster.nodes]
    with Control(nodes) as control:
        assert control.run("n5", "hostname").stdout.strip() == "n5"
    backend.down()
    assert cluster.control.run("n5", "true").ok


def test_ssh_backend_up_names_the_unreachable_host(cluster: SharedCluster, tmp_path: Path) -> None:
    """One dead host in the hosts file fails up() with its name and host:port."""
    hosts = _hosts_file(cluster, tmp_path / "hosts", "n6 root@127.0.0.1:1\n")
    with pytest.raises(UnreachableError, match=r"node n6 at 127\.0\.0\.1:1 as root"):
        SshBackend.from_file(hosts).up()


def test_a_local_standard_debian_image_is_preferred(cluster: SharedCluster) -> None:
    """When debian:bookworm-slim sits in the engine, it is chosen over debootstrap."""
    from harness.images import STANDARD_BASES, find_standard_base

    client = docker.from_env()
    present = [ref for ref in STANDARD_BASES if client.images.list(name=ref)]
    if present:
        pytest.skip(f"{present[0]} is already present; cannot test its absence")
    assert find_standard_base(client, allow_pull=False) is None
    client.images.get(base_tag()).tag("debian", "bookworm-slim")
    try:
        assert find_standard_base(client, allow_pull=False) == "debian:bookworm-slim"
    finally:
        client.images.remove("debian:bookworm-slim")
