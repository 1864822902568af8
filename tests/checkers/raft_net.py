"""Real Raft cores (tests/raft/driver.py) writing audit logs as the daemon does.

`AuditNet` drives RawNodes with the test driver and keeps each node's events
as the daemon writes them (docs/events.md): a restart appends `started` and
the runtime's own `config-applied` (ember.runtime.events.config_event, with
the commit index read back from the hard state), and `lose_round` drops the
events of one node's next rounds that match a test, as a `kill -9` between a
round's fsync and its event write does. What the checkers read from it is
what the real code emits, not a hand-written script.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ember.raft import Ready
from ember.runtime.events import config_event
from tests.raft.driver import Net

Audit = dict[str, list[dict[str, Any]]]


class AuditNet(Net):
    """A driver Net whose events read like the nodes' events.jsonl."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.clock_ns = 0
        self._lose: dict[str, Callable[[Ready], bool]] = {}
        self.lost: dict[str, list[dict[str, Any]]] = {}

    def lose_round(self, node_id: str, when: Callable[[Ready], bool]) -> None:
        """Drop the events of `node_id`'s next round for which `when` holds (once)."""
        self._lose[node_id] = when

    def handle(self, node_id: str, rd: Ready) -> None:
        """The driver's handling of one Ready, with a lost round's events dropped."""
        before = len(self.events[node_id])
        super().handle(node_id, rd)
        when = self._lose.get(node_id)
        if when is not None and when(rd):
            self.lost.setdefault(node_id, []).extend(self.events[node_id][before:])
            del self.events[node_id][before:]
            del self._lose[node_id]

    def restart(self, node_id: str) -> None:
        """Crash and restart from disk, then log what the runtime logs on start."""
        super().restart(node_id)
        node = self.nodes[node_id]
        st = node.status()
        self.events[node_id].append({"kind": "started"})
        if st.conf.peers:
            event = config_event(st.conf, st.token, node.conf_index, st.term, st.commit)
            self.events[node_id].append({**event, "group": node.group})

    def audit(self) -> Audit:
        """Every node's events with the envelope the audit log adds."""
        out: Audit = {}
        for node_id, events in self.events.items():
            out[node_id] = []
            for i, ev in enumerate(events):
                out[node_id].append({**ev, "node": node_id, "mono_ns": i * 1000})
        return out
