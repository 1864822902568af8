"""The membership half of RawNode: driving a ChangeContext through its stages.

`changepeers.ChangeContext` decides which stage comes next; these functions do
what each stage needs on the leader: start replicating to new peers and arm
their catch-up waits, append C(old, new) once they are caught up and the
previous configuration is committed (never two uncommitted configuration
entries in a log), append C(new) once the joint entry commits, and on its
commit stop replicating to removed peers, report the result and, if the
leader itself was removed, step down and wake the voter with the longest log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _leader as lead
from . import confchange
from .changepeers import ChangeContext, Event, Stage
from .facade import ChangeResult, ChangeTicket
from .messages import ConfState, Entry, NodeId

if TYPE_CHECKING:
    from .node import RawNode


def start_change(n: RawNode, ticket: ChangeTicket, target: ConfState) -> None:
    """Enter CATCHING_UP: replicate to the new voters and arm their waits."""
    ctx = ChangeContext(
        ticket,
        ticket.token,
        n.conf,
        target,
        n.cfg.election_timeout_ticks,
        n.cfg.catchup_max_retries,
    )
    ctx.fire(Event.START)
    n._ctx = ctx
    emit_stage(n)
    new = [] if "skip-catchup" in n._bugs else ctx.new_voters()  # PLANTED BUG if skipped
    ctx.start_waits(new)
    for p in new:
        if p not in n._prs:
            n._prs[p] = lead.new_progress(n, p)
        pr = n._prs[p]
        n._emit(
            "catchup-start",
            peer=p,
            margin=n.cfg.catchup_margin,
            leader_last=n.log.last_index,
            match=pr.match,
        )
        lead.send_append(n, p, allow_empty=True)
    for p in new:
        check_catchup(n, p)
    maybe_finish_catchup(n)


def check_catchup(n: RawNode, peer: NodeId) -> None:
    """Whether `peer` is now within the margin; if so stop waiting for it."""
    ctx = n._ctx
    if ctx is None or ctx.stage is not Stage.CATCHING_UP or peer not in ctx.waiting:
        return
    pr = n._prs[peer]
    if pr.acked and n.log.last_index - pr.match <= n.cfg.catchup_margin:
        ctx.caught_up(peer)
        n._emit("catchup-done", peer=peer, leader_last=n.log.last_index, match=pr.match)
        maybe_finish_catchup(n)


def maybe_finish_catchup(n: RawNode) -> None:
    """All new peers caught up and the previous config committed: go joint."""
    ctx = n._ctx
    if ctx is None or ctx.stage is not Stage.CATCHING_UP or ctx.waiting:
        return
    if n.conf_index > n.log.committed:
        return  # wait: at most one uncommitted configuration entry
    if "skip-catchup" not in n._bugs and _rewait_fallen_behind(n, ctx):
        return
    if "skip-joint" in n._bugs:  # PLANTED BUG: straight to C(new)
        ctx.fire(Event.SKIP_JOINT)
        conf = ctx.target
    else:
        ctx.fire(Event.CAUGHT_UP)
        conf = confchange.enter_joint(n.conf, ctx.target)
    emit_stage(n)
    append_config(n, ctx, conf)


def _rewait_fallen_behind(n: RawNode, ctx: ChangeContext) -> bool:
    """Catch-up ends when ALL new peers are within the margin at once (seed 000):
    a peer that caught up early and fell behind while another was still
    catching up (isolated meanwhile, say) is waited for again."""
    for p in ctx.new_voters():
        if p not in n._prs:
            n._prs[p] = lead.new_progress(n, p)
    behind = [
        p for p in ctx.new_voters()
        if not n._prs[p].acked or n.log.last_index - n._prs[p].match > n.cfg.catchup_margin
    ]  # fmt: skip
    ctx.start_waits(behind)
    for p in behind:
        n._emit("catchup-start", peer=p, margin=n.cfg.catchup_margin,
                leader_last=n.log.last_index, match=n._prs[p].match, again=True)  # fmt: skip
        lead.send_append(n, p, allow_empty=True)
    return bool(behind)


def append_config(n: RawNode, ctx: ChangeContext, conf: ConfState) -> None:
    """Append the configuration entry this stage waits on."""
    ctx.entry_index = n.log.last_index + 1
    entry = Entry(term=n.term, index=ctx.entry_index, kind="config", conf=conf, token=ctx.token)
    lead.append(n, [entry])


def advance_change(n: RawNode) -> None:
    """Move the change on after the commit index advanced."""
    ctx = n._ctx
    if ctx is not None and ctx.stage is Stage.CATCHING_UP:
        maybe_finish_catchup(n)
    elif ctx is not None and ctx.entry_index <= n.log.committed:
        if ctx.stage is Stage.JOINT:
            if "step-down-on-joint" in n._bugs and n.id not in n.conf.peers:  # PLANTED BUG
                n._become_follower(n.term, None, "removed")
                return
            ctx.fire(Event.JOINT_COMMITTED)
            emit_stage(n)
            append_config(n, ctx, confchange.leave_joint(n.conf))
        elif ctx.stage is Stage.STABLE:
            ctx.fire(Event.STABLE_COMMITTED)
            n._ctx = None
            emit_stage(n)
            n._emit(
                "change-done",
                peers=sorted(n.conf.peers),
                learners=sorted(n.conf.learners),
                token=ctx.token,
            )
            if ctx.ticket is not None:
                finish_ticket(n, ctx.ticket, True, None, "configuration changed")
    maybe_step_down_removed(n)


def maybe_step_down_removed(n: RawNode) -> None:
    """Once C(new) is committed: stop removed peers' replication, and a
    leader outside C(new) steps down, waking the longest-log voter."""
    if n.role != "leader" or n.conf.is_joint or n.conf_index > n.log.committed:
        return
    if n._ctx is None:
        lead.sync_progress(n, drop=True)
    if n.id in n.conf.peers:
        return
    voters = [p for p in n.conf.peers if p in n._prs]
    if voters:
        best = max(sorted(voters), key=lambda p: n._prs[p].match)  # ties: lowest id
        lead.send_timeout_now(n, best)
    n._become_follower(n.term, None, "removed")


def tick_change(n: RawNode) -> None:
    """Count catch-up waits down; retry or fail the change on timeouts."""
    ctx = n._ctx
    if ctx is None or ctx.stage is not Stage.CATCHING_UP:
        return
    for t in ctx.tick():
        n._emit("catchup-timeout", peer=t.peer, attempt=t.attempt)
        if t.exhausted:
            margin = n.cfg.catchup_margin
            reason = f"{t.peer} not within {margin} entries after {t.attempt} waits"
            fail_change(n, "ECATCHUP", reason)
            return
        n._emit("catchup-retry", peer=t.peer, attempt=t.attempt + 1)


def fail_change(n: RawNode, status: str, reason: str) -> None:
    """Reset a change that failed before its joint entry (ECATCHUP)."""
    ctx = n._ctx
    if ctx is None:
        return
    ctx.fire(Event.CATCHUP_FAILED)
    n._ctx = None
    lead.sync_progress(n, drop=True)
    emit_stage(n)
    n._emit("change-error", status=status, reason=reason, token=ctx.token)
    if ctx.ticket is not None:
        finish_ticket(n, ctx.ticket, False, status, reason)


def abort_change(n: RawNode, why: str) -> None:
    """The leader stepped down mid-change: reset it, status None (as jraft)."""
    ctx = n._ctx
    if ctx is None:
        return
    ctx.fire(Event.RESET)
    n._ctx = None
    reason = f"leader stepped down ({why})"
    n._emit("change-stage", stage="none", token=n.conf_token, **_fields(n.conf))
    n._emit("change-error", status=None, reason=reason, token=ctx.token)
    if ctx.ticket is not None:
        finish_ticket(n, ctx.ticket, False, None, reason)


def finish_ticket(
    n: RawNode, ticket: ChangeTicket, ok: bool, status: str | None, reason: str
) -> None:
    """Record the ticket's result and hand it to the driver."""
    result = ChangeResult(ticket=ticket.id, ok=ok, status=status, reason=reason, token=ticket.token)
    ticket.result = result
    n._results.append(result)


def emit_stage(n: RawNode) -> None:
    """Emit change-stage for the context's current stage."""
    ctx = n._ctx
    if ctx is None or ctx.stage is Stage.NONE:
        n._emit("change-stage", stage="none", token=n.conf_token, **_fields(n.conf))
        return
    old = ctx.old.peers if ctx.stage is not Stage.STABLE else None
    shown = ConfState(peers=ctx.target.peers, old_peers=old, learners=ctx.target.learners)
    n._emit("change-stage", stage=ctx.stage.value, token=ctx.token, **_fields(shown))


def _fields(conf: ConfState) -> dict[str, object]:
    return {
        "peers": sorted(conf.peers),
        "old_peers": None if conf.old_peers is None else sorted(conf.old_peers),
        "learners": sorted(conf.learners),
    }
