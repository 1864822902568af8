"""The follower half of RawNode: accepting entries and snapshots, and the
configuration bookkeeping every role shares.

The configuration in force is always the one of the last configuration entry
in the log, or, without one, the snapshot's (or the bootstrap one). It is
recomputed whenever a configuration entry is appended or the tail of the log
is truncated, which is what makes "in force on append, rolled back on
truncation" hold without separate undo state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _membership as mem
from . import quorum
from .messages import (
    AppendEntries,
    AppendEntriesResp,
    ConfState,
    Entry,
    InstallSnapshot,
    InstallSnapshotResp,
)

if TYPE_CHECKING:
    from .node import RawNode


def conf_at(n: RawNode, index: int) -> tuple[ConfState, int, int]:
    """(conf, index of its entry, token) in force at log position `index`."""
    for i in range(min(index, n.log.last_index), n.log.offset, -1):
        e = n.log.entry(i)
        if e.kind == "config" and e.conf is not None:
            return e.conf, e.index, e.token
    return n._base_conf, n.log.offset, n._base_token


def refresh_conf(n: RawNode) -> bool:
    """Re-derive the configuration in force; emit config-applied if it moved."""
    conf, index, token = conf_at(n, n.log.last_index)
    if (conf, index, token) == (n.conf, n.conf_index, n.conf_token):
        return False
    n.conf, n.conf_index, n.conf_token = conf, index, token
    stage = "joint" if conf.is_joint else "stable"
    fields = {"peers": sorted(conf.peers), "learners": sorted(conf.learners)}
    old = None if conf.old_peers is None else sorted(conf.old_peers)
    # `commit`: whether this configuration is known committed here (index <=
    # commit), which a restart or a snapshot otherwise never says again.
    n._emit(
        "config-applied", index=index, stage=stage, token=token, old_peers=old,
        commit=n.log.committed, **fields,
    )  # fmt: skip
    if n._transferee is not None and n._transferee not in quorum.voters(conf):
        n._transferee = None  # leadership can only go to a voter of the config in force
    return True


def on_appended(n: RawNode, entries: list[Entry], truncated: bool) -> None:
    """Bookkeeping after `entries` joined the log (after a truncation or not)."""
    has_config = False
    for e in entries:
        if e.kind == "config":
            has_config = True
            n._emit_config("config-appended", e)
    if has_config or truncated:
        refresh_conf(n)


def on_commit_advanced(n: RawNode, old_commit: int) -> None:
    """Emit config-committed and let the leader's change context move on."""
    for e in n.log.slice(old_commit + 1, n.log.committed + 1):
        if e.kind == "config":
            n._emit_config("config-committed", e)
    if n.role == "leader":
        mem.advance_change(n)


def handle_append(n: RawNode, m: AppendEntries) -> None:
    """Follower: accept (or reject) entries after (prev_index, prev_term)."""
    n._election_elapsed = 0
    n._set_leader(m.src)
    committed = n.log.committed
    prev_index, prev_term, entries = m.prev_index, m.prev_term, list(m.entries)
    if prev_index < committed:
        # Everything up to our commit matches the leader's log already; keep
        # only what lies beyond it (the prefix may even be compacted here).
        entries = [e for e in entries if e.index > committed]
        prev_index = committed
        prev_term = n.log.term(committed) or 0
        if not entries:
            if m.answer:
                append_resp(n, m.src, True, committed, read_ctx=m.read_ctx)
            return
    old_last, old_commit = n.log.last_index, n.log.committed
    res = n.log.maybe_append(prev_index, prev_term, entries, m.commit)
    if res is None:
        append_resp(n, m.src, False, m.prev_index, hint=reject_hint(n, m), read_ctx=m.read_ctx)
        return
    last_new, truncated_at = res
    start = truncated_at if truncated_at is not None else old_last + 1
    on_appended(n, [e for e in entries if e.index >= start], truncated=truncated_at is not None)
    if n.log.committed > old_commit:
        on_commit_advanced(n, old_commit)
    if m.answer or entries:
        append_resp(n, m.src, True, last_new, read_ctx=m.read_ctx)


def reject_hint(n: RawNode, m: AppendEntries) -> int:
    """Where the leader should probe next: our last index, or before the
    entries whose term shows they cannot match (etcd's findConflictByTerm)."""
    idx = min(m.prev_index - 1, n.log.last_index)
    while idx > n.log.offset and (n.log.term(idx) or 0) > m.prev_term:
        idx -= 1
    return max(idx, 0)


def append_resp(
    n: RawNode, to: str, ok: bool, index: int, hint: int = 0, read_ctx: int = 0
) -> None:
    """Queue an AppendEntriesResp to `to`."""
    # On success match_index is what we hold; on rejection it echoes the
    # rejected prev_index so the leader can tell a stale answer.
    n._msgs.append(
        AppendEntriesResp(
            group=n.group,
            src=n.id,
            dst=to,
            term=n.term,
            success=ok,
            match_index=index,
            reject_hint=hint,
            last_index=n.log.last_index,
            read_ctx=read_ctx,
        )
    )


def handle_snapshot(n: RawNode, m: InstallSnapshot) -> None:
    """Follower: install a snapshot we lack, or just commit up to it."""
    n._election_elapsed = 0
    n._set_leader(m.src)
    meta = m.snapshot.meta
    index = n.log.committed
    if meta.index == 0 and n.log.last_index == 0 and not n._base_conf.peers:
        # The leader's bootstrap configuration: we start from it (once).
        n.log.restore(m.snapshot)
        n._base_conf, n._base_token = meta.conf, meta.conf_token
        refresh_conf(n)
        n._emit("snapshot-installed", index=0, snap_term=0, commit=n.log.committed)
    elif meta.index > n.log.committed:
        old_commit = n.log.committed
        if n.log.match_term(meta.index, meta.term):
            # We hold the snapshot's last entry: just commit up to it.
            n.log.commit_to(meta.index)
            on_commit_advanced(n, old_commit)
        else:
            n.log.restore(m.snapshot)
            n._base_conf, n._base_token = meta.conf, meta.conf_token
            refresh_conf(n)
            n._emit(
                "snapshot-installed", index=meta.index, snap_term=meta.term, commit=n.log.committed
            )
        index = meta.index
    n._msgs.append(
        InstallSnapshotResp(
            group=n.group, src=n.id, dst=m.src, term=n.term, index=index, success=True
        )
    )
