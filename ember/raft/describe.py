"""Human-readable one-line descriptions of the Raft core's values.

Golden interaction scripts (tests/raft/testdata) print their expected output
with these functions, as etcd-io/raft's tests do with its describe helpers,
so the format is part of the tests' contract: change it and regenerate them
(REWRITE_GOLDEN=1).
"""

from __future__ import annotations

from typing import Any

from .facade import ChangeResult, Status
from .messages import (
    AppendEntries,
    AppendEntriesResp,
    ConfState,
    Entry,
    InstallSnapshot,
    InstallSnapshotResp,
    Message,
    RequestVote,
    RequestVoteResp,
    TimeoutNow,
)


def describe_conf(conf: ConfState) -> str:
    """`voters=(a b) old=(a c) learners=(d)`, omitting empty parts."""
    out = f"voters=({' '.join(conf.peers)})"
    if conf.old_peers is not None:
        out += f" old=({' '.join(conf.old_peers)})"
    if conf.learners:
        out += f" learners=({' '.join(conf.learners)})"
    return out


def describe_entry(e: Entry) -> str:
    """`term/index` plus the kind and payload of one entry."""
    if e.kind == "config" and e.conf is not None:
        return f"{e.term}/{e.index} conf[{describe_conf(e.conf)} token={e.token}]"
    if e.kind == "noop":
        return f"{e.term}/{e.index} noop"
    return f"{e.term}/{e.index} {e.data.decode(errors='replace')!r}"


def describe_message(m: Message) -> str:
    """`src->dst Kind term=T ...fields` for one message."""
    head = f"{m.src}->{m.dst} {type(m).__name__} term={m.term}"
    if isinstance(m, AppendEntries):
        ents = " ".join(describe_entry(e) for e in m.entries)
        body = f"prev={m.prev_term}/{m.prev_index} commit={m.commit}"
        quiet = "" if m.answer else " unanswered"
        return f"{head} {body}{quiet}" + (f" [{ents}]" if ents else "")
    if isinstance(m, AppendEntriesResp):
        if m.success:
            return f"{head} ok match={m.match_index}"
        return f"{head} reject at={m.match_index} hint={m.reject_hint}"
    if isinstance(m, RequestVote):
        force = " force" if m.force else ""
        return f"{head} last={m.last_term}/{m.last_index}{force}"
    if isinstance(m, RequestVoteResp):
        return f"{head} {'granted' if m.granted else 'refused'}"
    if isinstance(m, InstallSnapshot):
        meta = m.snapshot.meta
        return f"{head} snap={meta.term}/{meta.index} {describe_conf(meta.conf)}"
    if isinstance(m, InstallSnapshotResp):
        return f"{head} {'ok' if m.success else 'failed'} index={m.index}"
    assert isinstance(m, TimeoutNow)
    return head


def describe_event(ev: dict[str, Any]) -> str:
    """`kind k=v ...` for one audit event (group and term left out)."""
    fields = []
    for k, v in ev.items():
        if k in ("kind", "group", "term") and not (k == "term" and ev["kind"] == "term"):
            continue
        if isinstance(v, list):
            v = "(" + " ".join(str(x) for x in v) + ")"
        fields.append(f"{k}={v}")
    return " ".join([str(ev["kind"]), *fields])


def describe_status(s: Status) -> str:
    """One line: role, term, leader, log cursors, configuration and stage."""
    out = (
        f"{s.id} {s.role} term={s.term} leader={s.leader} last={s.last_index} "
        f"commit={s.commit} applied={s.applied} {describe_conf(s.conf)} "
        f"token={s.token} stage={s.stage}"
    )
    if s.progress:
        out += " match=" + ",".join(f"{p}:{i}" for p, i in s.progress.items())
    return out


def describe_result(r: ChangeResult) -> str:
    """`ticket=N ok|failed status=S token=T: reason`."""
    verdict = "ok" if r.ok else "failed"
    return f"ticket={r.ticket} {verdict} status={r.status} token={r.token}: {r.reason}"
