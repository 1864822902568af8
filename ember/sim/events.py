"""Audit events the simulator's driver writes itself, as the node daemon does.

The Raft core emits its events without the envelope; the driver adds it
(docs/events.md), and at each start records what ember/runtime records: a
node-wide `started` and the configuration the node starts with.
"""

from __future__ import annotations

from typing import Any

from ember.raft import RawNode


def envelope(event: dict[str, Any], node: str, now_ns: int, group: str | None) -> dict[str, Any]:
    """`event` with the driver's fields; node-wide events (no group) carry none."""
    full = {**event, "node": node, "mono_ns": now_ns, "wall": now_ns / 1e9}
    if group is not None:
        full["group"] = group
    return full


def start_events(raw: RawNode, node: str, now_ns: int, group: str) -> list[dict[str, Any]]:
    """The events of a (re)start of `node`: a node-wide `started` (it is a
    follower again) and, when it has one, the configuration of `group` it
    starts with, so checkers forget what an unflushed Ready had said."""
    events = [envelope({"kind": "started"}, node, now_ns, None)]
    st = raw.status()
    conf = st.conf
    if conf.peers:
        applied = {
            "kind": "config-applied",
            "term": st.term,
            "index": raw.conf_index,
            "stage": "joint" if conf.is_joint else "stable",
            "peers": sorted(conf.peers),
            "old_peers": sorted(conf.old_peers) if conf.old_peers is not None else None,
            "learners": sorted(conf.learners),
            "token": st.token,
        }
        events.append(envelope(applied, node, now_ns, group))
    return events
