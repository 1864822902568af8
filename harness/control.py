"""Runs commands on cluster nodes over SSH (paramiko), in parallel.

Theory of operation: a `Control` holds one SSH connection per node, opened
lazily and reused; each command runs on its own channel, so many commands
(to one node or to all) can run at once from a thread pool. Every command
has a timeout. Failures are `ControlError`s whose message names the node and
its `host:port`: an unreachable node, a failed login, a command that timed
out, or (when `check=True`) one that exited non-zero. Nothing here knows
about Docker: any host with sshd works, which is what lets the nemesis run
against every backend.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import paramiko

from harness.backends.base import NodeHandle, SshTarget

T = TypeVar("T")
DEFAULT_TIMEOUT_S = 60.0
# paramiko logs every failed handshake with a traceback from its transport
# thread; our errors already say what happened, once and clearly.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


class ControlError(RuntimeError):
    """A node could not be reached or a command on it failed."""


class UnreachableError(ControlError):
    """No SSH session could be opened to a node."""


class CommandError(ControlError):
    """A command exited non-zero (with `check=True`) or ran out of time."""


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What one command did on one node."""

    node: str
    command: str
    exit_status: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        """Whether the command exited 0."""
        return self.exit_status == 0


def _connect_reason(exc: BaseException, timeout_s: float) -> str:
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        return "connection refused"
    if isinstance(exc, socket.timeout | TimeoutError):
        return f"timed out after {timeout_s:g}s"
    if isinstance(exc, socket.gaierror):
        return f"unknown host ({exc.strerror})"
    if isinstance(exc, paramiko.AuthenticationException):
        return f"authentication failed ({exc})"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return f"ssh handshake failed ({exc})"


class Control:
    """SSH control of a fixed set of nodes; use as a context manager or `close()`."""

    def __init__(
        self,
        nodes: Sequence[NodeHandle],
        *,
        connect_timeout_s: float = 10.0,
        known_hosts: Path | None = None,
    ) -> None:
        self.nodes = {n.name: n for n in nodes}
        self.connect_timeout_s = connect_timeout_s
        self.known_hosts = known_hosts
        self._clients: dict[str, paramiko.SSHClient] = {}
        self._locks = {name: threading.Lock() for name in self.nodes}

    def __enter__(self) -> Control:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every open connection."""
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def _node(self, name: str) -> NodeHandle:
        try:
            return self.nodes[name]
        except KeyError:
            raise ControlError(f"unknown node {name!r}; known: {', '.join(self.nodes)}") from None

    def _open(self, node: NodeHandle) -> paramiko.SSHClient:
        target: SshTarget = node.ssh
        client = paramiko.SSHClient()
        if self.known_hosts is not None and self.known_hosts.exists():
            client.load_host_keys(str(self.known_hosts))
        # Like `StrictHostKeyChecking=accept-new`: cluster containers make
        # fresh host keys each start; a changed known key still fails.
        client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
        pkey = _load_key(node)
        try:
            client.connect(
                target.host,
                port=target.port,
                username=target.user,
                pkey=pkey,
                timeout=self.connect_timeout_s,
                banner_timeout=self.connect_timeout_s,
                auth_timeout=self.connect_timeout_s,
                allow_agent=target.key_path is None,
                look_for_keys=target.key_path is None,
            )
        except (OSError, paramiko.SSHException) as exc:
            client.close()
            reason = _connect_reason(exc, self.connect_timeout_s)
            raise UnreachableError(
                f"cannot reach node {node.name} at {target.host}:{target.port}"
                f" as {target.user}: {reason}"
            ) from exc
        transport = client.get_transport()
        # Small commands otherwise wait ~40 ms behind a delayed ACK (Nagle):
        # measured `true` 34 ms -> 7 ms; phase-triggered faults need it fast.
        # A proxied transport has no TCP socket of its own: nothing to set.
        with contextlib.suppress(OSError, AttributeError):
            if transport is not None:
                transport.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return client

    def client(self, name: str) -> paramiko.SSHClient:
        """The live SSH connection to `name`, opening (or reopening) it if needed."""
        node = self._node(name)
        with self._locks[name]:
            client = self._clients.get(name)
            transport = client.get_transport() if client else None
            if client is None or transport is None or not transport.is_active():
                client = self._open(node)
                self._clients[name] = client
            return client

    def wait_reachable(self, timeout_s: float = 60.0) -> None:
        """Retry connecting to every node until all answer or `timeout_s` passes."""
        deadline = time.monotonic() + timeout_s

        def wait_one(name: str) -> None:
            while time.monotonic() < deadline:
                try:
                    if _has_ssh_banner(self._node(name).ssh, deadline - time.monotonic()):
                        self.client(name)
                        return
                except UnreachableError:
                    pass  # sshd may still be starting: retry until the deadline
                time.sleep(0.2)
            self.client(name)  # one last try, which raises the precise error

        self.parallel(list(self.nodes), wait_one)

    def run(
        self, name: str, command: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, check: bool = True
    ) -> CommandResult:
        """Run `command` on node `name`; with `check`, a non-zero exit raises."""
        node = self._node(name)
        transport = self.client(name).get_transport()
        if transport is None:  # pragma: no cover - client() just made it active
            raise UnreachableError(f"lost the connection to {node.name} at {node.ssh.describe()}")
        try:
            chan = transport.open_session(timeout=self.connect_timeout_s)
        except (paramiko.SSHException, OSError) as exc:
            raise UnreachableError(
                f"cannot open a session on {name} at {node.ssh.host}:{node.ssh.port}: {exc}"
            ) from exc
        try:
            chan.exec_command(command)
            status, out, err = _collect(chan, timeout_s)
        finally:
            chan.close()
        if status is None:
            raise CommandError(
                f"command on {name} ({node.ssh.host}:{node.ssh.port}) timed out after "
                f"{timeout_s:g}s: {command}"
            )
        result = CommandResult(name, command, status, out, err)
        if check and not result.ok:
            tail = (err.strip() or out.strip())[-800:]
            raise CommandError(f"command on {name} exited {status}: {command}\n{tail}")
        return result

    def run_many(
        self,
        commands: Mapping[str, str],
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        check: bool = True,
    ) -> dict[str, CommandResult]:
        """Run `commands[node]` on each node at once; results keyed by node."""

        def one(name: str) -> CommandResult:
            return self.run(name, commands[name], timeout_s=timeout_s, check=check)

        return dict(zip(commands, self.parallel(list(commands), one), strict=True))

    def run_all(
        self, command: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, check: bool = True
    ) -> dict[str, CommandResult]:
        """Run the same command on every node at once."""
        return self.run_many(dict.fromkeys(self.nodes, command), timeout_s=timeout_s, check=check)

    def upload(self, name: str, local: Path, remote: str) -> None:
        """Copy a local file to `remote` on node `name` (parent dirs made)."""
        if not local.is_file():
            raise ControlError(f"cannot upload {local}: no such local file")
        parent = remote.rsplit("/", 1)[0] or "/"
        self.run(name, f"mkdir -p '{parent}'")
        with self._sftp(name) as sftp:
            sftp.put(str(local), remote)

    def fetch(self, name: str, remote: str, local: Path) -> None:
        """Copy `remote` from node `name` to the local path (parent dirs made)."""
        local.parent.mkdir(parents=True, exist_ok=True)
        with self._sftp(name) as sftp:
            try:
                sftp.get(remote, str(local))
            except FileNotFoundError:
                local.unlink(missing_ok=True)
                raise ControlError(f"cannot fetch {name}:{remote}: no such file") from None

    def fetch_all(
        self, remote: str, local_dir: Path, *, missing_ok: bool = False
    ) -> dict[str, Path]:
        """Fetch `remote` from every node at once into `local_dir/<node>/<name>`
        (the store's nodes/<node>/ layout); with `missing_ok`, nodes lacking
        the file are left out instead of failing."""
        name = remote.rstrip("/").rsplit("/", 1)[-1]

        def one(node: str) -> Path | None:
            dest = local_dir / node / name
            try:
                self.fetch(node, remote, dest)
            except ControlError:
                if missing_ok and not self.run(node, f"test -e '{remote}'", check=False).ok:
                    return None
                raise
            return dest

        got = dict(zip(self.nodes, self.parallel(list(self.nodes), one), strict=True))
        return {node: path for node, path in got.items() if path is not None}

    @contextmanager
    def _sftp(self, name: str) -> Iterator[paramiko.SFTPClient]:
        try:
            sftp = self.client(name).open_sftp()
        except paramiko.SSHException as exc:
            raise ControlError(f"sftp is unavailable on {name}: {exc}") from exc
        try:
            yield sftp
        finally:
            sftp.close()

    def parallel(self, names: Sequence[str], fn: Callable[[str], T]) -> list[T]:
        """`fn(name)` for every name at once; all errors are reported together."""
        if not names:
            return []
        with ThreadPoolExecutor(max_workers=min(32, len(names))) as pool:
            futures = [pool.submit(fn, name) for name in names]
            errors: list[BaseException] = []
            results: list[Any] = []
            for fut in futures:
                exc = fut.exception()
                errors += [exc] if exc is not None else []
                results.append(None if exc is not None else fut.result())
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise ControlError("; ".join(str(e) for e in errors)) from errors[0]
        return results


def _load_key(node: NodeHandle) -> paramiko.PKey | None:
    # Loaded here, not via connect(key_filename=...), which tries every key
    # type and reports the last type's parse error instead of a failed login.
    if node.ssh.key_path is None:
        return None
    try:
        return paramiko.PKey.from_path(node.ssh.key_path)
    except (OSError, paramiko.SSHException, ValueError) as exc:
        raise ControlError(
            f"cannot load SSH key {node.ssh.key_path} for {node.name}: {exc}"
        ) from exc


def _has_ssh_banner(target: SshTarget, timeout_s: float) -> bool:
    """Whether sshd answers with its banner (a port proxy may accept a
    connection long before the daemon behind it is listening)."""
    try:
        with socket.create_connection((target.host, target.port), max(0.1, min(timeout_s, 2))) as s:
            return s.recv(4) == b"SSH-"
    except OSError:
        return False


def _collect(chan: paramiko.Channel, timeout_s: float) -> tuple[int | None, str, str]:
    """Read stdout and stderr together (so neither can fill the window and
    stall the other) until exit; `None` status on timeout."""
    deadline = time.monotonic() + timeout_s
    out, err = bytearray(), bytearray()
    while True:
        while chan.recv_ready():
            out += chan.recv(65536)
        while chan.recv_stderr_ready():
            err += chan.recv_stderr(65536)
        drained = not chan.recv_ready() and not chan.recv_stderr_ready()
        if chan.exit_status_ready() and drained and chan.eof_received:
            break
        left = deadline - time.monotonic()
        if left <= 0:
            return None, out.decode(errors="replace"), err.decode(errors="replace")
        select.select([chan], [], [], min(left, 0.5))
    return chan.recv_exit_status(), out.decode(errors="replace"), err.decode(errors="replace")
