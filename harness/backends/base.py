"""The `Backend` protocol and the node handle every backend returns.

Theory of operation: a backend owns the life of a cluster. `up()` makes the
nodes reachable over SSH and returns their handles; `down()` removes what
`up()` made (for hosts the user owns, that is nothing). Everything else the
harness does to a node (run commands, inject faults) goes through SSH via
`harness.control`, so the same nemesis code runs against any backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True, kw_only=True)
class SshTarget:
    """Where and how to open an SSH session to a node."""

    host: str
    port: int = 22
    user: str = "root"
    key_path: str | None = None

    def describe(self) -> str:
        """`user@host:port`, for error messages."""
        return f"{self.user}@{self.host}:{self.port}"


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeHandle:
    """A node of a cluster: its name, its address on the cluster network
    (what peers and partitions use) and how the harness reaches it."""

    name: str
    ip: str
    ssh: SshTarget


class Backend(Protocol):
    """Brings a cluster up and down; `nodes` is valid between the two."""

    def up(self) -> list[NodeHandle]:
        """Start (or connect to) the cluster and return its nodes."""
        ...

    def down(self) -> None:
        """Remove everything `up` created. Safe to call twice or after a failed `up`."""
        ...

    @property
    def nodes(self) -> list[NodeHandle]:
        """The nodes `up` returned (empty before `up` and after `down`)."""
        ...


class NoopBackend:
    """A backend with no nodes: for plans that need none (the simulator)
    and for testing what drives a backend."""

    def up(self) -> list[NodeHandle]:
        """Nothing to start."""
        return []

    def down(self) -> None:
        """Nothing to remove."""

    @property
    def nodes(self) -> list[NodeHandle]:
        """Always empty."""
        return []
