"""Real ember-node processes on loopback for tests and the benchmark.

Ports are picked free at run time; every process is killed (by pid) and
waited for in `close()`, which the fixtures call even when a test fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# A generous bound on waiting for a cluster to reach a state: the suite
# shares 2 cores, so this is a liveness guard, not a speed assertion.
WAIT_S = 60.0


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports free on 127.0.0.1 right now."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class ProcCluster:
    """A set of ember-node processes sharing one --peers list."""

    def __init__(
        self,
        root: Path,
        names: list[str],
        *,
        bootstrap: list[str] | None = None,
        extra: list[str] | None = None,
    ) -> None:
        self.root = root
        self.names = names
        ports = free_ports(2 * len(names))
        self.raft_port = {n: ports[2 * i] for i, n in enumerate(names)}
        self.http_port = {n: ports[2 * i + 1] for i, n in enumerate(names)}
        self.peers = ",".join(
            f"{n}=127.0.0.1:{self.raft_port[n]}:{self.http_port[n]}" for n in names
        )
        self.bootstrap = bootstrap or names
        self.extra = extra or []
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def url(self, name: str) -> str:
        """The node's HTTP base URL."""
        return f"http://127.0.0.1:{self.http_port[name]}"

    def urls(self, names: list[str] | None = None) -> list[str]:
        """HTTP base URLs of `names` (default: all)."""
        return [self.url(n) for n in names or self.names]

    def data_dir(self, name: str) -> Path:
        """The node's data directory."""
        return self.root / name

    def start(self, name: str, *, wait: bool = True) -> None:
        """Start (or restart) one node and wait until it answers /health."""
        args = [
            sys.executable,
            "-m",
            "ember.server",
            "--id",
            name,
            "--peers",
            self.peers,
            "--data-dir",
            str(self.data_dir(name)),
            "--bootstrap",
            ",".join(self.bootstrap),
            *self.extra,
        ]
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / f"{name}.log", "ab") as logf:
            self.procs[name] = subprocess.Popen(
                args, stdout=logf, stderr=subprocess.STDOUT, env=node_env()
            )
        if wait:
            self.wait_for(lambda: self.health(name), f"{name} to answer /health")

    def start_all(self, names: list[str] | None = None) -> None:
        """Start several nodes, then wait for each."""
        for n in names or self.names:
            self.start(n, wait=False)
        for n in names or self.names:
            self.wait_for(functools.partial(self.health, n), f"{n} to answer /health")

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Send `sig` to the node and reap it."""
        proc = self.procs.pop(name, None)
        if proc is not None and proc.poll() is None:
            proc.send_signal(sig)
            proc.wait(timeout=30)

    def close(self) -> None:
        """Kill every process this cluster started."""
        for name in list(self.procs):
            with contextlib.suppress(Exception):
                self.kill(name)

    # -- HTTP helpers (blocking, for setup and polling) --------------------------

    def call(self, name: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One HTTP request; (status, decoded JSON or None)."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url(name) + path, data=data, method=method)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as err:
            raw = err.read()
            try:
                return err.code, json.loads(raw)
            except ValueError:
                return err.code, raw

    def health(self, name: str) -> bool:
        """Whether the node answers /health."""
        try:
            return self.call(name, "GET", "/health")[0] == 200
        except OSError:
            return False

    def status(self, name: str) -> dict[str, Any]:
        """The node's /admin/status document."""
        code, doc = self.call(name, "GET", "/admin/status")
        assert code == 200, doc
        assert isinstance(doc, dict)
        return doc

    def leader(self, group: str, among: list[str] | None = None) -> str | None:
        """The node that reports itself leader of `group`, if any."""
        for n in among or list(self.procs):
            with contextlib.suppress(OSError):
                st = self.status(n)["groups"].get(group)  # absent: replica stopped
                if st is not None and st["role"] == "leader":
                    return n
        return None

    def wait_leader(self, group: str, among: list[str] | None = None) -> str:
        """Wait until some node leads `group` and has committed an entry of its
        term (its election's no-op); return it. Before that ember rightly
        refuses reads (no-leader) and changes (change-busy): CI met both gaps."""
        found: list[str] = []

        def check() -> bool:
            # Every candidate is asked: a deposed leader that has not heard of
            # the new term still says leader, but never commits in its term.
            for name in among or list(self.procs):
                with contextlib.suppress(OSError):
                    st = self.status(name)["groups"].get(group)  # absent: replica stopped
                    if st and st["role"] == "leader" and st["commit_term"] == st["term"]:
                        found.append(name)
                        return True
            return False

        self.wait_for(check, f"a leader of {group} that committed in its term")
        return found[-1]

    def wait_for(self, predicate: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
        """Poll `predicate` until true; fail naming `what` after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate():
                return
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    log = (self.root / f"{name}.log").read_text()[-2000:]
                    msg = f"{name} exited ({proc.returncode}) waiting for {what}"
                    raise AssertionError(f"{msg}:\n{log}")
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}")

    def events(self, name: str) -> list[dict[str, Any]]:
        """The node's audit events so far."""
        path = self.data_dir(name) / "events.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def node_env() -> dict[str, str]:
    """The environment for child processes (unbuffered output)."""
    return {**os.environ, "PYTHONUNBUFFERED": "1"}


async def fill(urls: list[str], count: int, *, partitions: int, prefix: str = "f") -> int:
    """Write keys `<prefix>0..count-1` (value = i) with 64 concurrent clients.

    A failed write (certainly not applied) is retried; an unknown one is not
    counted. Returns how many were acknowledged.
    """
    from ember.client import EmberClient  # here: cluster.py is also imported by bench/

    acked = 0
    todo = list(range(count))

    async def worker() -> None:
        nonlocal acked
        async with EmberClient(urls, timeout_s=10.0, partitions=partitions) as c:
            while todo:
                i = todo.pop()
                out = await c.put(f"{prefix}{i}", i)
                while out.type == "fail":
                    await asyncio.sleep(0.02)
                    out = await c.put(f"{prefix}{i}", i)
                acked += out.type == "ok"

    await asyncio.gather(*(worker() for _ in range(64)))
    return acked


@contextlib.contextmanager
def meta_cluster(root: Path, names: list[str], flags: list[str],
                 meta: list[str]) -> Iterator[ProcCluster]:  # fmt: skip
    """`names` started with `flags`, once the metastore group has a leader among
    `meta`; every process ended on the way out, a failing test's too."""
    cluster = ProcCluster(root, names, extra=flags)
    try:
        cluster.start_all()
        cluster.wait_leader("meta", meta)
        yield cluster
    finally:
        cluster.close()
