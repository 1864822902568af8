"""Docker backend: a named cluster of containers on one private network.

Theory of operation: `up()` makes, in order, a key pair for this cluster
(paramiko), a bridge network `faultline-<name>`, and N containers
`faultline-<name>-n1..nN` from the ember image, each with NET_ADMIN (for
iptables and tc), an init process (so killed daemons are reaped), and sshd
published on 127.0.0.1 only; the public key is handed to each container's
entrypoint. It then waits until every sshd answers. Everything it makes
carries the label `faultline.cluster=<name>`, so `cleanup()` can find and
remove what a crashed run left, and `down()` is just `cleanup(name)` plus the
key directory. A failure half-way through `up()` removes what was made.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import docker.errors
import paramiko

from harness.backends.base import NodeHandle, SshTarget
from harness.backends.engine import DockerUnavailableError, connect_docker
from harness.control import Control

LABEL = "faultline.cluster"
NODE_LABEL = "faultline.node"
DEFAULT_IMAGE = "faultline-ember:latest"


class ClusterError(RuntimeError):
    """A Docker cluster could not be brought up."""


def make_key_pair(directory: Path, comment: str) -> tuple[Path, str]:
    """A fresh ECDSA key pair: (private key file, OpenSSH public key line)."""
    # ECDSA because paramiko cannot generate ed25519, and RSA is slow to make.
    key = paramiko.ECDSAKey.generate(bits=256)
    path = directory / "id_ecdsa"
    key.write_private_key_file(str(path))
    path.chmod(0o600)
    return path, f"{key.get_name()} {key.get_base64()} {comment}"


class DockerBackend:
    """A cluster of `size` containers named after `name`."""

    def __init__(
        self,
        name: str,
        *,
        size: int = 5,
        image: str = DEFAULT_IMAGE,
        ssh_timeout_s: float = 60.0,
    ) -> None:
        if not name.replace("-", "").isalnum():
            raise ValueError(f"cluster name {name!r} must be letters, digits and '-'")
        if size < 1:
            raise ValueError(f"cluster size must be at least 1, got {size}")
        self.name = name
        self.size = size
        self.image = image
        self.ssh_timeout_s = ssh_timeout_s
        self._nodes: list[NodeHandle] = []
        self._key_dir: Path | None = None

    @property
    def network_name(self) -> str:
        """The cluster's private network."""
        return f"faultline-{self.name}"

    @property
    def nodes(self) -> list[NodeHandle]:
        """Handles of the running nodes (empty when down)."""
        return list(self._nodes)

    def up(self) -> list[NodeHandle]:
        """Create network and containers, wait for sshd on each, return the nodes."""
        client = connect_docker()
        try:
            client.images.get(self.image)
        except docker.errors.ImageNotFound:
            raise ClusterError(
                f"image {self.image} is not built; run `python -m harness.images` first"
            ) from None
        try:
            self._key_dir = Path(tempfile.mkdtemp(prefix=f"faultline-{self.name}-"))
            key_path, public_key = make_key_pair(self._key_dir, f"faultline-{self.name}")
            labels = {LABEL: self.name}
            client.networks.create(self.network_name, driver="bridge", labels=labels)
            names = [f"n{i}" for i in range(1, self.size + 1)]
            with ThreadPoolExecutor(max_workers=self.size) as pool:
                handles = list(
                    pool.map(lambda n: self._start(client, n, public_key, key_path), names)
                )
            self._nodes = handles
            with Control(handles) as control:
                control.wait_reachable(self.ssh_timeout_s)
        except BaseException:
            self.down()
            raise
        return self.nodes

    def _start(self, client: Any, node: str, public_key: str, key_path: Path) -> NodeHandle:
        try:
            container = client.containers.run(
                self.image,
                detach=True,
                name=f"faultline-{self.name}-{node}",
                hostname=node,
                network=self.network_name,
                # Peers find each other by node name (n1, n2, ...) on our network.
                networking_config={
                    self.network_name: client.api.create_endpoint_config(aliases=[node])
                },
                cap_add=["NET_ADMIN"],
                init=True,
                environment={"FAULTLINE_AUTHORIZED_KEY": public_key},
                labels={LABEL: self.name, NODE_LABEL: node},
                ports={"22/tcp": ("127.0.0.1", None)},
            )
        except docker.errors.APIError as exc:
            raise ClusterError(f"cannot start node {node} of cluster {self.name}: {exc}") from exc
        container.reload()
        settings = container.attrs["NetworkSettings"]
        ip = settings["Networks"][self.network_name]["IPAddress"]
        port = int(settings["Ports"]["22/tcp"][0]["HostPort"])
        target = SshTarget(host="127.0.0.1", port=port, user="root", key_path=str(key_path))
        return NodeHandle(name=node, ip=ip, ssh=target)

    def down(self) -> None:
        """Remove this cluster's containers, network and key pair."""
        self._nodes = []
        try:
            cleanup(self.name)
        finally:
            if self._key_dir is not None:
                shutil.rmtree(self._key_dir, ignore_errors=True)
                self._key_dir = None


def cleanup(name: str | None = None) -> list[str]:
    """Remove the containers and networks of cluster `name` (of every
    faultline cluster when None); return what was removed."""
    client = connect_docker()
    selector = {"label": f"{LABEL}={name}" if name else LABEL}
    removed: list[str] = []
    for container in client.containers.list(all=True, filters=selector):
        try:
            container.remove(force=True, v=True)
        except docker.errors.NotFound:
            continue  # removed concurrently: the goal is reached
        removed.append(f"container {container.name}")
    for network in client.networks.list(filters=selector):
        for _attempt in range(20):
            try:
                network.remove()
                break
            except docker.errors.NotFound:
                break
            except docker.errors.APIError:
                time.sleep(0.25)  # endpoints of just-removed containers linger briefly
        removed.append(f"network {network.name}")
    return removed


def main(argv: list[str] | None = None) -> int:
    """`python -m harness.backends.docker cleanup [NAME]`: remove leftovers."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] != "cleanup" or len(args) > 2:
        print("usage: python -m harness.backends.docker cleanup [CLUSTER-NAME]", file=sys.stderr)
        return 2
    try:
        removed = cleanup(args[1] if len(args) == 2 else None)
    except DockerUnavailableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(removed) if removed else "nothing to remove")
    return 0


if __name__ == "__main__":
    sys.exit(main())
