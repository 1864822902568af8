"""The runtime's own audit events (docs/events.md): configurations and replica moves."""

from __future__ import annotations

from typing import Any

from ember.raft import ConfState
from ember.runtime.group import Group


def config_event(conf: ConfState, token: int, index: int, term: int, commit: int) -> dict[str, Any]:
    """`config-applied`: the configuration a group holds, and the commit index it knows."""
    return {
        "kind": "config-applied",
        "term": term,
        "index": index,
        "stage": "joint" if conf.is_joint else "stable",
        "peers": sorted(conf.peers),
        "old_peers": sorted(conf.old_peers) if conf.old_peers is not None else None,
        "learners": sorted(conf.learners),
        "token": token,
        "commit": commit,
    }


def replica_event(kind: str, group: Group, reason: str) -> dict[str, Any]:
    """`replica-stopped` / `replica-started`, with the state the replica stops or resumes at."""
    st = group.raw.status()
    return {
        "kind": kind,
        "term": st.term,
        "applied": group.sm.applied,
        "digest": group.sm.digest,
        "peers": sorted(st.conf.peers),
        "learners": sorted(st.conf.learners),
        "reason": reason,
    }
