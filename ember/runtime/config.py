"""The node's configuration: from `ember-node` flags or a TOML file.

Addressing: every node has a Raft transport address and an HTTP address.
`--peers` lists every node of the cluster as `id=host:raft_port[:http_port]`;
when `http_port` is left out it is `raft_port + 1000`. A node's own entry
gives its Raft listen address unless `--raft-listen` overrides it; `--listen`
is its HTTP address (default: the host and http port of its own entry).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ember.raft import RaftConfig

HTTP_PORT_OFFSET = 1000


class ConfigError(ValueError):
    """A configuration value is invalid; the message names it."""


@dataclass(frozen=True, slots=True)
class PeerAddr:
    """Where one node listens."""

    host: str
    raft_port: int
    http_port: int

    @property
    def http_url(self) -> str:
        """Base URL of the node's HTTP API."""
        return f"http://{self.host}:{self.http_port}"


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeConfig:
    """Everything a node needs to start."""

    node_id: str
    data_dir: Path
    peers: dict[str, PeerAddr]
    http_listen: tuple[str, int]
    raft_listen: tuple[str, int]
    bootstrap: tuple[str, ...]  # initial voters of every partition; others start empty
    meta_nodes: tuple[str, ...] = ()  # voters of the metastore group (set by the server)
    partitions: int = 8
    seed: int = 0
    tick_ms: float = 50.0
    compact_every: int = 10_000
    fsync: bool = True  # False only for benchmarks: acknowledged writes may be lost
    raft: RaftConfig = field(default_factory=RaftConfig)
    # Failpoints switched on as the node starts, before it serves anything:
    # how the harness keeps a failpoint it set on through a restart.
    failpoints: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The file a clock fault writes this node's wall-clock offset to (ember.clock).
    clock_offset_file: Path | None = None


def parse_port(text: str, what: str) -> int:
    """A TCP port number, or ConfigError naming `what`."""
    try:
        port = int(text)
    except ValueError:
        raise ConfigError(f"{what}: port {text!r} is not a number") from None
    if not 0 < port < 65536:
        raise ConfigError(f"{what}: port {port} is outside 1..65535")
    return port


def parse_hostport(text: str, what: str) -> tuple[str, int]:
    """`host:port` as a tuple, or ConfigError naming `what`."""
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise ConfigError(f"{what}: expected host:port, got {text!r}")
    return host, parse_port(port, what)


def parse_peer(spec: str) -> tuple[str, PeerAddr]:
    """One `id=host:raft_port[:http_port]` entry."""
    node_id, sep, addr = spec.strip().partition("=")
    if not sep or not node_id:
        raise ConfigError(f"--peers: expected id=host:raft_port[:http_port], got {spec!r}")
    parts = addr.split(":")
    if len(parts) not in (2, 3) or not parts[0]:
        raise ConfigError(f"--peers: expected id=host:raft_port[:http_port], got {spec!r}")
    raft_port = parse_port(parts[1], f"--peers {node_id}")
    if len(parts) == 3:
        http_port = parse_port(parts[2], f"--peers {node_id}")
    else:
        http_port = raft_port + HTTP_PORT_OFFSET
        if http_port > 65535:
            raise ConfigError(f"--peers {node_id}: derived HTTP port {http_port} is too high")
    return node_id, PeerAddr(parts[0], raft_port, http_port)


def parse_peers(text: str) -> dict[str, PeerAddr]:
    """The comma-separated `--peers` list."""
    peers: dict[str, PeerAddr] = {}
    for spec in text.split(","):
        if not spec.strip():
            continue
        node_id, addr = parse_peer(spec)
        if node_id in peers:
            raise ConfigError(f"--peers: node {node_id} is listed twice")
        peers[node_id] = addr
    if not peers:
        raise ConfigError("--peers: no peers given")
    return peers
