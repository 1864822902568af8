"""Watches nodes' audit logs for the phases a phase-triggered nemesis waits for.

Theory of operation. On each node an SSH channel runs `tail -F` on the
database's events.jsonl; a reader thread per node turns each line into an
event, and every event that marks a phase is handed to `on_phase` at once:

- `change-stage` with stage `catching-up`, `joint` or `stable` (emitted by
  the leader of a group as its change-peers context moves), and
  `change-done` as stage `done` (the STABLE entry committed);
- `assignments-written` that writes a non-empty `pending` assignment (a
  rebalance starting), reported as stage `pending`; one that changes
  `stable` is stage `switched` (the rebalance's done invoke, or the zone's
  creation). The schedule uses the two to aim at the window between them
  (`pending-open`); a pending's joining peers are its peers minus the
  group's stable assignment as last seen written.

The observation names the group, stage, reporting node, the new peers, the
joining peers (new minus old; at `stable`, whose event names no old peers,
those the same change's catching-up or joint stage named), which the
nemesis uses to isolate or slow a joining peer, and the event's `wall`
time, so a completed fault can say how long after the event it landed.
`stages` keeps the latest stage per group for the progress display.
Tailing (rather than polling /admin/status) sees
a JOINT stage that lasts a few milliseconds. A node that is down (killed by
the nemesis) ends its tail; the watcher re-opens it after a short pause
until `stop()`.

Reaction latency: every phase-triggered completion carries `reaction_ms`,
the trigger event's `wall` to the moment the fault's commands returned
(and `seen_to_applied_ms`, `apply_ms`, `resolve_ms` for the parts).
Measured on the 5-node docker cluster of this 2-core CI box, from the
history (`reaction_ms`) and the nodes' audit logs:

- placement-driver / primary kills at pending and joint
  (tests/nemesis/test_role_kills_docker.py). With `tail -F` at its
  default: 230-1025 ms, median 665 ms, ~500 ms of it the tail, which polls
  once a second (GNU tail cannot use inotify on overlayfs). Now: 45-206
  ms, median 77 ms (7 kills): the tail 2-18 ms, resolving the role over
  GET /admin/placement 21-148 ms, the kill 6-54 ms.
- leader / random-node kills at JOINT under a register + change-peers
  load (seed 77, as tests/runner/test_run_docker.py without its append
  hold): 34, 46 and 75 ms, one outlier at 869 ms. JOINT itself lasted
  3-82 ms there (median 10 ms), so an unwidened JOINT is still mostly
  missed; a few hundred ms of `raft.append.delay` is enough to land in it.
- the kill alone (20 kills of a stand-in, `nemesis.process`): a session
  per command, pid lookup then kill, 27-80 ms median; looked up and killed
  in one script, 16-25 ms; that script on the persistent shell with
  TCP_NODELAY (`nemesis.shell`), 6-8 ms.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from harness.control import Control, ControlError

STAGES = ("catching-up", "joint", "stable")
RETRY_S = 0.5
# GNU tail polls when it cannot use inotify (overlayfs in containers): at its
# default 1 s a trigger arrived 0.5 s late on average. 20 ms costs one stat
# per poll.
POLL_S = 0.02


def _written(keys: dict[str, Any], kind: str) -> tuple[bool, Any]:
    """(whether `keys` names the assignment `kind`, its new value)."""
    for name, change in keys.items():
        if str(name) == kind or str(name).endswith("." + kind):
            return True, change.get("new") if isinstance(change, dict) else change
    return False, None


def _peers(value: Any) -> list[str]:
    if isinstance(value, dict):
        value = value.get("peers")
    return sorted(str(p) for p in value) if isinstance(value, list) else []


def phase_of(event: dict[str, Any]) -> dict[str, Any] | None:
    """The phase observation an audit event marks, or None."""
    kind = event.get("kind")
    wall = event.get("wall")
    if kind == "change-stage" and event.get("stage") in STAGES:
        peers = sorted(event.get("peers") or [])
        old = event.get("old_peers")
        joining = sorted(set(peers) - set(old)) if isinstance(old, list) else []
        return {"group": event.get("group"), "stage": event["stage"], "node": event.get("node"),
                "peers": peers, "old_peers": old, "joining": joining,
                "token": event.get("token"), "wall": wall}  # fmt: skip
    if kind == "change-done":
        return {"group": event.get("group"), "stage": "done", "node": event.get("node"),
                "peers": sorted(event.get("peers") or []), "joining": [],
                "token": event.get("token"), "wall": wall}  # fmt: skip
    if kind == "assignments-written":
        keys = event.get("keys") or {}
        part = event.get("partition")
        group = event.get("group") or (f"part-{part}" if part is not None else None)
        has_pending, pending = _written(keys, "pending")
        has_stable, stable = _written(keys, "stable")
        if has_pending and _peers(pending):
            return {"group": group, "stage": "pending", "node": event.get("node"),
                    "peers": _peers(pending), "joining": [],
                    "revision": event.get("revision"), "wall": wall}  # fmt: skip
        if has_stable:
            return {"group": group, "stage": "switched", "node": event.get("node"),
                    "peers": _peers(stable), "joining": [],
                    "revision": event.get("revision"), "wall": wall}  # fmt: skip
    return None


class PhaseWatcher:
    """Tails every node's audit log; calls `on_phase(observation)` per phase event."""

    def __init__(
        self,
        control: Control,
        names: Sequence[str],
        path: str,
        on_phase: Callable[[dict[str, Any]], None],
    ) -> None:
        self.control, self.names, self.path = control, list(names), path
        self.on_phase = on_phase
        self.stages: dict[str, str] = {}
        self.stable: dict[str, list[str]] = {}  # group -> its stable assignment, as last written
        # group -> (change token, joining peers) of its change's catching-up / joint stage
        self.joining: dict[str, tuple[Any, list[str]]] = {}
        self.seen = 0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._channels: dict[str, Any] = {}
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start one reader thread per node."""
        for name in self.names:
            t = threading.Thread(target=self._follow, args=(name,), daemon=True,
                                 name=f"phase-{name}")  # fmt: skip
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        """Close every channel and join the readers."""
        self._stop.set()
        with self._lock:
            channels = list(self._channels.values())
        for chan in channels:
            with contextlib.suppress(Exception):
                chan.close()
        for t in self._threads:
            t.join(timeout=5)

    def _follow(self, name: str) -> None:
        # -n +1 from the start on the first open (the node may have logged the
        # phase before we attached); -n 0 on re-opens so nothing is seen twice.
        first = True
        while not self._stop.is_set():
            lines = "+1" if first else "0"
            command = (f"exec tail -s {POLL_S:g} -n {lines} -F {shlex.quote(self.path)}"
                       " 2>/dev/null")  # fmt: skip
            try:
                chan = self.control.client(name).get_transport().open_session()
                chan.exec_command(command)
            except (ControlError, OSError, AttributeError, Exception):  # node down: retry
                self._stop.wait(RETRY_S)
                continue
            first = False
            with self._lock:
                self._channels[name] = chan
            self._read(chan)
            self._stop.wait(RETRY_S)

    def _read(self, chan: Any) -> None:
        buffer = b""
        with contextlib.suppress(Exception):
            while not self._stop.is_set():
                chunk = chan.recv(65536)
                if not chunk:
                    return
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    self._handle(line)

    def _handle(self, line: bytes) -> None:
        try:
            event = json.loads(line)
        except ValueError:
            return  # a line cut by a kill -9: the node's own log is the evidence
        if isinstance(event, dict):
            self.handle_event(event)

    def handle_event(self, event: dict[str, Any]) -> None:
        """Track stages and report the phase `event` marks, if any."""
        self.seen += 1
        if event.get("kind") == "change-stage" and event.get("group"):
            self.stages[str(event["group"])] = str(event.get("stage"))
        obs = phase_of(event)
        if obs is None:
            return
        group = str(obs.get("group"))
        if obs["stage"] in ("catching-up", "joint"):
            self.joining[group] = (obs.get("token"), list(obs["joining"]))
        elif obs["stage"] == "stable" and not obs["joining"]:
            # ember's stable event names the new peers only (no old ones): the
            # change's earlier stage said whom it brings in, so a fault at
            # stable aimed at the joining peer finds it, not a random node.
            token, joining = self.joining.get(group, (None, []))
            if token is not None and token == obs.get("token"):
                obs["joining"] = joining
        if obs["stage"] == "switched":
            self.stable[group] = list(obs["peers"])
        elif obs["stage"] == "pending" and group in self.stable:
            # The replicas the rebalance adds: what slow catch-up and
            # isolate-joining aim at in a rebalance window.
            obs["joining"] = sorted(set(obs["peers"]) - set(self.stable[group]))
        self.on_phase({**obs, "seen_wall": time.time()})
