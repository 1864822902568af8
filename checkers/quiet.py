"""Liveness after the heal: stability (L2) and availability (L3).

Theory of operation: the convergence checker has already found the quiet
period long enough (the last fault or membership change ended at least
`quiet_s` before the history does) and each group's final voters. Then:

- L2 stability: in the last half of the quiet period (Q before the first
  client op invoked after the last fault or change, the final reads: the
  runner sleeps Q only once the cluster has recovered, every group led and
  every rebalance done, which on Docker can take tens of seconds after the
  heal; elections in that recovery are not L2's; Docker full-mix runs were
  called unstable for them), [that end - Q/2, history end], never before
  last end + Q/2, and never before RECOVERY_TIMEOUTS election timeouts after
  the last fault (the longest timeout the nodes' `started` events report;
  a randomized timeout is up to 2T, and a split vote takes another round, so
  an election the last fault caused may legitimately end ~4T later: a short
  quiet period must not call that recovery instability; a quiet period with
  no time left after it is not judged, figure -1), no voter of a group's
  final configuration changes role,
  term or the leader it follows, or steps down. One exception, since it
  is no change of the group's leader or term: a voter that only now learns
  the leader elected before the window (its `term`, `leader` naming that
  leader, or `role` follower, all in that leader's term) is a late
  follower, counted in the figure `stability-late-followers`, not flagged.
  On Docker that is a link healing late: after a partition TCP's
  retransmission backoff can hold the leader's frames for seconds, and
  may then hand over frames of an older leader first: a voter that learns
  an older term's leader on its way to the last elected one (which it
  follows within the window) is a late follower too, and so is a voter
  whose election timer fired before the leader's heartbeat was read (a
  `leader` null in the leader's term, then that leader again, with no new
  term: pre-vote and the leader's lease keep the group as it was; a Docker
  node stalled half a second did this). A follower of an
  older term that never reaches the last elected leader, any new term and
  any step-down stay flagged. Audit events are placed on
  the history's clock by checkers.audit.history_clock; without the run's
  timeline.json that cannot be done and the figure `stability-groups` is
  -1. A group whose membership still changed in the quiet period, the Q
  the runner slept (a rebalance the last alter-zone started, finishing
  after the heal: its configuration entries, and the elections a joining
  replica's higher term causes), is not quiet yet: L1 judges where it
  ends, L2 leaves it out; one whose changes ended in the recovery before
  the quiet period is judged.
  Replicas outside the final configuration are not the group's: a
  removed replica that never learnt of its removal may campaign alone for
  ever (its RequestVotes go to voters that ignore them under their lease).
- L3 availability: every client operation invoked in the quiet period
  (after the last fault and membership change and after the main phase's
  `heal-all`: the final reads) completes, `ok` or `fail`, within
  `availability_bound_s` (default 5 s); an `info` (no answer: a timeout, a
  lost connection) or a slower completion is `unavailable-after-heal`. A
  `fail` is an answer: the cluster refused it (a node that is no longer a
  replica of the key's group, say, knows no leader to send it to), while a
  group without a leader is L1's `leader-count`.
"""

from __future__ import annotations

from typing import Any

from checkers.api import Anomaly, CheckContext
from checkers.audit import history_clock
from checkers.history import Operation
from checkers.stats import MEMBERSHIP_FS

NS_PER_S = 1_000_000_000
DEFAULT_AVAILABILITY_BOUND_S = 5.0
RECOVERY_TIMEOUTS = 4  # election timeouts an election caused by the last fault may take
DEFAULT_ELECTION_TIMEOUT_NS = 10 * 50e6  # ember's defaults: 10 ticks of 50 ms
_UNSTABLE = frozenset({"role", "term", "leader", "step-down"})
_CHANGES = frozenset({"config-appended", "config-committed", "change-stage"})


def check_stability(
    ctx: CheckContext,
    voters: dict[str, set[str]],
    last_end: int,
    main_end: int,
    quiet_s: float,
    out: list[Anomaly],
) -> tuple[int, int]:
    """L2 (module doc), `main_end` being `main_phase_end`; how many groups it
    judged (-1 when events cannot be placed) and how many late followers it
    let pass."""
    assert ctx.audit is not None
    at = history_clock(ctx.setting("history_zero_wall"), ctx.audit)
    if at is None:
        return -1, 0
    quiet_ns = quiet_s * NS_PER_S
    end = ctx.events[-1].time if ctx.events else 0
    quiet_end = _quiet_end(ctx, main_end, end)
    start = int(max(last_end + max(quiet_ns / 2, _recovery_ns(ctx.audit)),
                    quiet_end - quiet_ns / 2))  # fmt: skip
    if start >= end:
        return -1, 0
    # Changes the recovery finished before the quiet period leave a group judged.
    since = max(last_end, quiet_end - quiet_ns)
    changing = {str(ev.get("group")) for evs in ctx.audit.values() for ev in evs
                if ev.get("kind") in _CHANGES and since <= at(ev) <= end}  # fmt: skip
    voters = {g: v for g, v in voters.items() if g not in changing}
    elected = _last_elected(ctx.audit, at, start)
    # (node, group) that follow the last elected leader within the window:
    # what such a node learnt of older terms on the way was stale frames.
    caught_up = {(node, str(ev.get("group"))) for node in ctx.audit for ev in ctx.audit[node]
                 if start <= at(ev) <= end
                 and _follows(node, ev, elected.get(str(ev.get("group"))))}  # fmt: skip
    late = 0
    for node in sorted(ctx.audit):
        seen: set[str] = set()
        for ev in ctx.audit[node]:
            group = ev.get("group")
            if ev.get("kind") not in _UNSTABLE or node not in voters.get(str(group), set()):
                continue
            t = at(ev)
            last = elected.get(str(group))
            if start <= t <= end and (_follows(node, ev, last) or (
                    (node, str(group)) in caught_up
                    and (_stale(ev, last) or _lost_sight(ev, last)))):  # fmt: skip
                late += 1
                continue
            if start <= t <= end and group not in seen:
                seen.add(str(group))  # one per node and group says it
                out.append(Anomaly(
                    kind="leader-changed-in-quiet",
                    message=f"{node} emitted {ev.get('kind')} in {group} (term "
                    f"{ev.get('term')}) {(t - last_end) / NS_PER_S:.2f}s after the last fault "
                    f"or change and {(end - t) / NS_PER_S:.2f}s before the history's end, in "
                    f"the last half of the {quiet_ns / NS_PER_S:g}s quiet period",
                    events=[ev], time=t,
                ))  # fmt: skip
    return len(voters), late


def main_phase_end(ctx: CheckContext, last_end: int) -> int:
    """When the workload stopped: the main phase's `heal-all` completing, or the
    last fault or change's end where later (a run without a nemesis has no
    heal-all). The client ops invoked after it are the final reads and what
    closes the watch chain. A fault the schedule healed before the time
    limit leaves the workload running on after `last_end`: those ops meet a
    cluster still recovering (a restarted node not yet listening refused
    a watch 0.02 s after its start, sim seed 1017), not the quiet period."""
    heals = [op.complete_time for op in ctx.operations
             if op.f == "heal-all" and op.complete_time is not None]  # fmt: skip
    return max([last_end, *heals])


def _quiet_end(ctx: CheckContext, main_end: int, end: int) -> int:
    """When the quiet period ended: the first client op invoked after the main
    phase (the final reads), else the history's end. The runner waits for the
    cluster to recover (every group led, every rebalance done) before it
    sleeps the quiet period, so Q may start long after last_end."""
    return min((op.invoke_time for op in _client_ops_from(ctx, main_end)), default=end)


def _client_ops_from(ctx: CheckContext, t: int) -> list[Operation]:
    """The client operations (the nemesis's aside) invoked at or after `t`."""
    return [op for op in ctx.operations if isinstance(op.process, int) and op.invoke_time >= t]


def _last_elected(
    audit: dict[str, list[dict[str, Any]]], at: Any, before: int
) -> dict[str, tuple[int, str]]:
    """Per group, the (term, node) of the last leader elected before `before`."""
    out: dict[str, tuple[int, str]] = {}
    for node in sorted(audit):
        for ev in audit[node]:
            term = ev.get("term")
            if (ev.get("kind") == "role" and ev.get("role") == "leader"
                    and isinstance(term, int) and at(ev) < before):  # fmt: skip
                group = str(ev.get("group"))
                if term > out.get(group, (-1, ""))[0]:
                    out[group] = (term, node)
    return out


def _stale(ev: dict[str, Any], elected: tuple[int, str] | None) -> bool:
    """Whether `ev` has a node learn a leader or term older than the last elected."""
    term = ev.get("term")
    if elected is None or not isinstance(term, int) or term >= elected[0]:
        return False
    kind = ev.get("kind")
    return (kind == "term" or (kind == "leader" and ev.get("leader") is not None)
            or (kind == "role" and ev.get("role") == "follower"))  # fmt: skip


def _lost_sight(ev: dict[str, Any], elected: tuple[int, str] | None) -> bool:
    """Whether `ev` has a node lose sight of the leader elected before the window,
    in that leader's term (`leader` null: its election timer fired first)."""
    return (elected is not None and ev.get("kind") == "leader" and ev.get("leader") is None
            and ev.get("term") == elected[0])  # fmt: skip


def _follows(node: str, ev: dict[str, Any], elected: tuple[int, str] | None) -> bool:
    """Whether `ev` only has `node` learn the leader elected before the window."""
    if elected is None or node == elected[1] or ev.get("term") != elected[0]:
        return False
    kind = ev.get("kind")
    return (kind == "term" or (kind == "leader" and ev.get("leader") == elected[1])
            or (kind == "role" and ev.get("role") == "follower"))  # fmt: skip


def _recovery_ns(audit: dict[str, list[dict[str, Any]]]) -> float:
    """RECOVERY_TIMEOUTS of the longest election timeout the nodes started with."""
    timeouts = [float(ev["tick_ms"]) * float(ev["election_timeout_ticks"]) * 1e6
                for evs in audit.values() for ev in evs
                if ev.get("kind") == "started" and "tick_ms" in ev
                and "election_timeout_ticks" in ev]  # fmt: skip
    return RECOVERY_TIMEOUTS * max(timeouts, default=DEFAULT_ELECTION_TIMEOUT_NS)


def check_availability(ctx: CheckContext, healed: int, out: list[Anomaly]) -> dict[str, Any]:
    """L3 (module doc) on the ops invoked from `healed` (`main_phase_end`) on;
    returns figures."""
    bound_ns = float(ctx.setting("availability_bound_s", DEFAULT_AVAILABILITY_BOUND_S)) * NS_PER_S
    after = [op for op in _client_ops_from(ctx, healed) if op.f not in MEMBERSHIP_FS]
    late = 0
    for op in after:
        took = None if op.complete_time is None else op.complete_time - op.invoke_time
        if op.type != "info" and took is not None and took <= bound_ns:
            continue
        late += 1
        why = "no answer" if op.type == "info" else f"an answer after {(took or 0) / 1e9:.2f}s"
        out.append(Anomaly(
            kind="unavailable-after-heal",
            message=f"{op.f} {op.key or ''} invoked {(op.invoke_time - healed) / NS_PER_S:.2f}s "
            f"into the quiet period got {why} (bound {bound_ns / NS_PER_S:g}s)".replace("  ", " "),
            ops=[op.invoke_index], time=op.invoke_time,
        ))  # fmt: skip
    return {"ops-after-heal": len(after), "unavailable-after-heal": late}
