"""SSH backend: hosts the user already has, listed in a hosts file.

Format, one node per line (blank lines and `#` comments ignored):

    name user@host[:port] [keyfile] [ip=ADDR]

`ip=` is the node's address as its peers see it (what partitions block);
it defaults to `host` resolved, and matters only when sshd is reached
through a forwarded port. `up()` checks that every host answers; `down()`
leaves the hosts alone: they are not ours to remove.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

from harness.backends.base import NodeHandle, SshTarget
from harness.control import Control

_TARGET = re.compile(r"^(?P<user>[^@\s]+)@(?P<host>\[[^\]]+\]|[^:\s]+)(?::(?P<port>\d+))?$")
FORMAT = "name user@host[:port] [keyfile] [ip=ADDR]"


class HostsFileError(ValueError):
    """A hosts file line is malformed; the message names file and line."""


def _parse_line(where: str, line: str) -> NodeHandle:
    words = line.split()
    if len(words) < 2 or len(words) > 4:
        raise HostsFileError(f"{where}: expected '{FORMAT}', got {line!r}")
    name, target, *rest = words
    match = _TARGET.match(target)
    if match is None:
        raise HostsFileError(f"{where}: {target!r} is not user@host[:port]")
    port = int(match["port"] or 22)
    if not 0 < port < 65536:
        raise HostsFileError(f"{where}: port {port} is out of range")
    host = match["host"].strip("[]")
    key_path: str | None = None
    ip: str | None = None
    for word in rest:
        if word.startswith("ip="):
            ip = word[3:]
        elif key_path is None:
            key_path = str(Path(word).expanduser())
        else:
            raise HostsFileError(f"{where}: unexpected {word!r}; expected '{FORMAT}'")
    if key_path is not None and not Path(key_path).is_file():
        raise HostsFileError(f"{where}: key file {key_path} does not exist")
    ssh = SshTarget(host=host, port=port, user=match["user"], key_path=key_path)
    return NodeHandle(name=name, ip=ip or host, ssh=ssh)


def parse_hosts(text: str, source: str = "hosts file") -> list[NodeHandle]:
    """The nodes listed in a hosts file's text; `HostsFileError` on bad lines."""
    nodes: list[NodeHandle] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if line:
            nodes.append(_parse_line(f"{source}:{number}", line))
    names = [n.name for n in nodes]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise HostsFileError(f"{source}: node names repeat: {', '.join(duplicates)}")
    if not nodes:
        raise HostsFileError(f"{source}: lists no hosts")
    return nodes


def _resolve(node: NodeHandle) -> NodeHandle:
    try:
        ip = socket.gethostbyname(node.ip)
    except OSError:
        return node  # unreachable names are reported by up()'s SSH check
    return NodeHandle(name=node.name, ip=ip, ssh=node.ssh)


class SshBackend:
    """A cluster of existing hosts reached over SSH."""

    def __init__(self, nodes: list[NodeHandle], *, connect_timeout_s: float = 10.0) -> None:
        self._listed = nodes
        self._nodes: list[NodeHandle] = []
        self.connect_timeout_s = connect_timeout_s

    @classmethod
    def from_file(cls, path: Path) -> SshBackend:
        """The backend for the hosts listed in `path`."""
        try:
            text = path.read_text()
        except OSError as exc:
            raise HostsFileError(f"cannot read hosts file {path}: {exc.strerror}") from exc
        return cls(parse_hosts(text, str(path)))

    @property
    def nodes(self) -> list[NodeHandle]:
        """The hosts, once `up()` has checked them."""
        return list(self._nodes)

    def up(self) -> list[NodeHandle]:
        """Resolve every host's address and check that each answers over SSH."""
        nodes = [_resolve(n) for n in self._listed]
        known = Path.home() / ".ssh" / "known_hosts"
        with Control(nodes, connect_timeout_s=self.connect_timeout_s, known_hosts=known) as c:
            c.run_all("true", timeout_s=self.connect_timeout_s)
        self._nodes = nodes
        return self.nodes

    def down(self) -> None:
        """Forget the hosts; they are the user's and stay as they are."""
        self._nodes = []
