"""Docker backend: a named cluster of containers on one private network.

Theory of operation: `up()` makes, in order, a key pair for this cluster
(paramiko), a bridge network `faultline-<name>`, and N containers
`faultline-<name>-n1..nN` from the ember image, each with NET_ADMIN (for
iptables and tc), an init process (so killed daemons are reaped), the
database's data dir on an anonymous volume of its own (`volumes`: off the
image's layered file system, see `harness.dbs.System.data_dir`), the
nemesis's state dir on tmpfs (as /run is on a host), and sshd
published on 127.0.0.1 only; the public key is handed to each container's
entrypoint. It then waits until every sshd answers. Everything it makes
carries the label `faultline.cluster=<name>`, so `cleanup()` can find and
remove what a crashed run left, and `down()` is just `cleanup(name)` plus the
key directory. A failure half-way through `up()` removes what was made.

Everything also carries its owner: the host name, pid and process start time
of the process that made it (`faultline.owner.*`) and the key directory. A
process killed with SIGKILL cannot remove its cluster; `clusters()` lists
every cluster with its owner's state, and `cleanup_dead()` removes the ones
whose owner is gone (the next `faultline run`, pytest session or `faultline
clean --all-dead` calls it). A cluster whose owner lives, or lives on
another host, is never touched by it; nor is one made to outlive its owner
(`keep`: `faultline run --leave-running`), which only `faultline clean
--cluster NAME` removes.

Why the volume and the tmpfs: the image's layered file system (fuse-overlayfs
on this machine) costs a system call into a user-space daemon. A flushed
audit line cost 0.35 ms there against 9 us on a volume (5 nodes writing and
fsyncing at once). The nemesis's state dir holds the clock offset file each
node checks every 10 ms (ember/clock.py).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import docker.errors
import docker.types
import paramiko

from harness.backends.base import NodeHandle, SshTarget
from harness.backends.engine import DockerUnavailableError, connect_docker
from harness.control import Control
from nemesis.fault import STATE_DIR
from nemesis.journal import owner, owner_state

LABEL = "faultline.cluster"
NODE_LABEL = "faultline.node"
OWNER_HOST, OWNER_PID, OWNER_STARTED = (f"faultline.owner.{k}" for k in ("host", "pid", "started"))
KEY_DIR_LABEL = "faultline.keydir"
KEEP_LABEL = "faultline.keep"  # left running on purpose: not a dead owner's leftover
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

    removes_nodes = True  # `down` removes the nodes, with every fault on them

    def __init__(
        self,
        name: str,
        *,
        size: int = 5,
        image: str = DEFAULT_IMAGE,
        ssh_timeout_s: float = 60.0,
        on_step: Callable[[str], None] = lambda _m: None,
        keep: bool = False,
        volumes: Sequence[str] = (),
    ) -> None:
        if not name.replace("-", "").isalnum():
            raise ValueError(f"cluster name {name!r} must be letters, digits and '-'")
        if size < 1:
            raise ValueError(f"cluster size must be at least 1, got {size}")
        self.name = name
        self.size = size
        self.image = image
        self.ssh_timeout_s = ssh_timeout_s
        self.on_step = on_step  # what `up` is doing now, for the live status line
        self.keep = keep
        self.volumes = tuple(volumes)  # container paths, each on an anonymous volume
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
            me = owner()
            labels = {LABEL: self.name, OWNER_HOST: me["host"], OWNER_PID: str(me["pid"]),
                      OWNER_STARTED: me["started"], KEY_DIR_LABEL: str(self._key_dir)}  # fmt: skip
            if self.keep:
                labels[KEEP_LABEL] = "1"
            self.on_step(f"creating network {self.network_name}")
            client.networks.create(self.network_name, driver="bridge", labels=labels)
            names = [f"n{i}" for i in range(1, self.size + 1)]
            self.on_step(f"starting containers {', '.join(names)} of {self.name}")
            with ThreadPoolExecutor(max_workers=self.size) as pool:
                handles = list(
                    pool.map(lambda n: self._start(client, n, public_key, key_path, labels), names)
                )
            self._nodes = handles
            self.on_step(f"waiting for sshd on {', '.join(names)}")
            with Control(handles) as control:
                control.wait_reachable(self.ssh_timeout_s)
        except BaseException:
            self.down()
            raise
        return self.nodes

    def _start(
        self, client: Any, node: str, public_key: str, key_path: Path, labels: dict[str, str]
    ) -> NodeHandle:
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
                labels={**labels, NODE_LABEL: node},
                ports={"22/tcp": ("127.0.0.1", None)},
                # Removed with the container (`remove(v=True)`); labelled so a
                # cleanup finds any a removal by other means left behind.
                mounts=[
                    docker.types.Mount(path, None, type="volume", labels=labels)
                    for path in self.volumes
                ],
                # The nemesis's node state on tmpfs, as /run is on a host (module doc).
                tmpfs={STATE_DIR: "mode=0755"},
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
        except ClusterError as exc:
            # Teardown after a run: the run's verdict stands; the leftover is
            # named with the command that removes it later.
            print(f"warning: {exc}; remove it with `faultline clean --cluster {self.name}`",
                  file=sys.stderr)  # fmt: skip
        finally:
            if self._key_dir is not None:
                shutil.rmtree(self._key_dir, ignore_errors=True)
                self._key_dir = None


def cleanup(name: str | None = None) -> list[str]:
    """Remove the containers, volumes and networks of cluster `name` (of every
    faultline cluster when None); return what was removed."""
    client = connect_docker()
    selector = {"label": f"{LABEL}={name}" if name else LABEL}
    removed: list[str] = []
    key_dirs: set[str] = set()
    for container in client.containers.list(all=True, filters=selector):
        key_dirs.add(container.labels.get(KEY_DIR_LABEL, ""))
        try:
            container.remove(force=True, v=True)
        except docker.errors.NotFound:
            continue  # removed concurrently: the goal is reached
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: another cleanup is removing it right now
                raise
            _wait_gone(container)
            continue
        removed.append(f"container {container.name}")
    for volume in client.volumes.list(filters=selector):  # `v=True` took the rest
        try:
            volume.remove(force=True)
        except docker.errors.NotFound:
            continue
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: still in use by a container being removed
                raise
            continue
        removed.append(f"volume {volume.name}")
    stuck: list[str] = []
    for network in client.networks.list(filters=selector):
        key_dirs.add((network.attrs.get("Labels") or {}).get(KEY_DIR_LABEL, ""))
        refusal = _remove_network(network)
        if refusal is None:
            removed.append(f"network {network.name}")
        else:
            stuck.append(f"network {network.name} ({refusal})")
    for key_dir in sorted(d for d in key_dirs if _is_our_key_dir(d)):
        shutil.rmtree(key_dir, ignore_errors=True)  # what a killed owner could not remove
    if stuck:
        done = f"; removed {', '.join(removed)}" if removed else ""
        raise ClusterError(f"could not remove {', '.join(stuck)}{done}")
    return removed


NETWORK_TRIES = 20  # 0.25 s apart: endpoints of just-removed containers linger briefly


def _remove_network(network: Any) -> str | None:
    """Removes `network`; None once it is gone, else Docker's last refusal."""
    refusal = "not tried"
    for _attempt in range(NETWORK_TRIES):
        try:
            network.remove()
            return None
        except docker.errors.NotFound:
            return None
        except docker.errors.APIError as exc:
            refusal = str(exc.explanation or exc)
            time.sleep(0.25)
    return f"Docker refused {NETWORK_TRIES} times: {refusal}"


def _wait_gone(container: Any, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            container.reload()
        except docker.errors.NotFound:
            return
        time.sleep(0.2)
    raise ClusterError(f"container {container.name} is still being removed after {timeout_s:g}s")


def _is_our_key_dir(path: str) -> bool:
    # Only a directory make_key_pair could have made: never a label's arbitrary path.
    where = Path(path)
    return (
        bool(path)
        and where.parent == Path(tempfile.gettempdir())
        and where.name.startswith("faultline-")
        and where.is_dir()
    )


def clusters() -> dict[str, dict[str, Any]]:
    """Every faultline cluster on the engine: name -> its owner's labels and
    `state` (alive, dead, elsewhere, or unknown for a cluster made before
    owners were labelled) and how many containers it has."""
    client = connect_docker()
    found: dict[str, dict[str, Any]] = {}
    labelled = [
        *(c.labels for c in client.containers.list(all=True, filters={"label": LABEL})),
        *((n.attrs.get("Labels") or {}) for n in client.networks.list(filters={"label": LABEL})),
    ]
    for labels in labelled:
        entry = found.setdefault(labels[LABEL], {"containers": 0, "labels": labels})
        entry["containers"] += NODE_LABEL in labels
    for entry in found.values():
        labels = entry["labels"]
        pid = labels.get(OWNER_PID, "")
        entry["owner"] = f"pid {pid} on {labels.get(OWNER_HOST)}" if pid else "unknown"
        entry["state"] = (
            owner_state(labels[OWNER_HOST], int(pid), labels.get(OWNER_STARTED, ""))
            if pid.isdigit() and OWNER_HOST in labels
            else "unknown"
        )
    return found


def cleanup_dead() -> list[str]:
    """Remove every cluster whose owner process (on this host) is gone;
    return what was removed, cluster by cluster."""
    removed = []
    for name, entry in sorted(clusters().items()):
        if entry["state"] == "dead" and KEEP_LABEL not in entry["labels"]:
            whose = f"cluster {name} (owner {entry['owner']}, gone)"
            try:
                what = cleanup(name)
            except ClusterError as exc:  # one stuck network must not stop the others
                removed.append(f"{whose}: {exc}")
                continue
            removed.append(f"{whose}: removed {len(what)} containers, volumes and networks")
    return removed


def main(argv: list[str] | None = None) -> int:
    """`python -m harness.backends.docker cleanup [NAME]`: remove leftovers."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] != "cleanup" or len(args) > 2:
        print("usage: python -m harness.backends.docker cleanup [CLUSTER-NAME]", file=sys.stderr)
        return 2
    try:
        removed = cleanup(args[1] if len(args) == 2 else None)
    except (DockerUnavailableError, ClusterError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(removed) if removed else "nothing to remove")
    return 0


if __name__ == "__main__":
    sys.exit(main())
