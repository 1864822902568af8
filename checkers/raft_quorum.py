"""R11 check quorum, from the nemesis's partitions and the nodes' roles.

Theory of operation: a partition op in the history (the nemesis's `ok`
carries its `grudge`: for each node, the nodes whose packets it drops) cuts
some leaders off from a quorum of their voters. A leader hears from a voter
only over a link open both ways (its appends out, the answers back); with
itself, those voters must be a majority of its peers, and of its old peers
while joint. A leader that lacks one checks its quorum every election
timeout T and steps down at the second check at the latest: by the
partition's start + 2T, plus one T of slack for ticks a busy round delays.

For each partition window (from its `ok` to the next partition or heal op)
that outlasts that deadline and overlaps no other fault (a paused or killed
leader does not tick; a slow link blurs what it heard), every node that led
a group across the whole of [start, deadline], by its own events placed on
the history's clock (checkers.audit.history_clock), kept one configuration
through it, and could not hear from a quorum of it, is flagged
`leader-kept-without-quorum`. Without timeline.json (a run of an older
harness) or nodes that did not report their timing on `started`, nothing
can be placed, and the figure `quorum-windows` is -1.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from checkers.api import CheckContext
from checkers.audit import history_clock
from checkers.history import Operation
from checkers.raft_conf import Conf, conf_of, describe, has_majority
from checkers.stats import fault_windows

NS_PER_MS = 1_000_000
# A process's start, orderly stop, or exit at a crash failpoint (ember's
# `crash` event, which no history op records) ends each of its leaderships.
_PROCESS_ENDS = frozenset({"started", "stopping", "crash"})
_ENDS_LEADERSHIP = frozenset({"role", "step-down", *_PROCESS_ENDS})


def election_timeout_ns(audit: dict[str, list[dict[str, Any]]]) -> int | None:
    """T in ns, the longest any node reported on `started`; None if none did."""
    found = [
        float(ev["tick_ms"]) * int(ev["election_timeout_ticks"]) * NS_PER_MS
        for evs in audit.values() for ev in evs
        if ev.get("kind") == "started" and isinstance(ev.get("tick_ms"), int | float)
        and isinstance(ev.get("election_timeout_ticks"), int)
    ]  # fmt: skip
    return int(max(found)) if found else None


def partition_windows(ops: list[Operation], end: int) -> list[tuple[int, int, dict[str, set[str]]]]:
    """(start, end, grudge) of every partition in force, from the nemesis's ops."""
    nemesis = sorted(
        (op for op in ops if op.process == "nemesis" and op.complete_time is not None),
        key=lambda op: op.invoke_time,
    )
    out: list[tuple[int, int, dict[str, set[str]]]] = []
    for i, op in enumerate(nemesis):
        result = op.result if isinstance(op.result, dict) else {}
        grudge = result.get("grudge")
        if op.f != "partition" or op.type != "ok" or not isinstance(grudge, dict):
            continue
        stop = next((o.invoke_time for o in nemesis[i + 1 :]
                     if o.f == "partition" or o.f.startswith("heal")), end)  # fmt: skip
        assert op.complete_time is not None
        cut = {str(n): {str(p) for p in peers} for n, peers in grudge.items()}
        out.append((op.complete_time, stop, cut))
    return out


def hears_quorum(leader: str, conf: Conf, grudge: dict[str, set[str]]) -> bool:
    """Whether `leader` can hear from a quorum of `conf` over links open both ways."""
    heard = {leader} | {
        v for v in set(conf[0]) | set(conf[1] or ())
        if v not in grudge.get(leader, set()) and leader not in grudge.get(v, set())
    }  # fmt: skip
    peers, old = conf
    return has_majority(peers, heard) and (old is None or has_majority(old, heard))


@dataclasses.dataclass(slots=True)
class _Leadership:
    node: str
    group: str
    term: int
    start: int
    end: int | None = None  # None: still leader when its log ends
    # (time, configuration in force from then on), from its start.
    confs: list[tuple[int, Conf | None]] = dataclasses.field(default_factory=list)
    event: dict[str, Any] = dataclasses.field(default_factory=dict)

    def conf_through(self, start: int, deadline: int) -> Conf | None:
        """The one configuration in force over [start, deadline]; None if it
        changed then or is unknown."""
        if any(start < t <= deadline for t, _ in self.confs):
            return None
        before = [c for t, c in self.confs if t <= start]
        return before[-1] if before else None


def leaderships(audit: dict[str, list[dict[str, Any]]], at: Any) -> list[_Leadership]:
    """Every (node, group) leadership with its times on the history's clock."""
    out: list[_Leadership] = []
    for node in sorted(audit):
        conf: dict[str, Conf] = {}
        open_: dict[str, _Leadership] = {}
        for ev in audit[node]:
            kind, group, t = ev.get("kind"), ev.get("group"), at(ev)
            if kind in _PROCESS_ENDS and group is None:
                for gone in open_.values():
                    gone.end = t
                open_.clear()
                continue
            if not isinstance(group, str):
                continue
            lead: _Leadership | None = open_.get(group)
            if kind == "config-applied":
                conf[group] = conf_of(ev)
                if lead is not None:
                    lead.confs.append((t, conf[group]))
            ends = kind in _ENDS_LEADERSHIP or (kind == "leader" and ev.get("leader") != node)
            if lead is not None and ends:
                lead.end = t
                del open_[group]
            if kind == "role" and ev.get("role") == "leader":
                open_[group] = _Leadership(node, group, int(ev.get("term") or 0), t,
                                           confs=[(t, conf.get(group))], event=ev)  # fmt: skip
                out.append(open_[group])
    return out


def check_quorum_loss(ctx: CheckContext, flag: Any) -> dict[str, int]:
    """Flags leaders that outlived a partition cutting them off (module doc);
    returns figures. `flag(kind, key, message, *events)` records an anomaly."""
    assert ctx.audit is not None
    at = history_clock(ctx.setting("history_zero_wall"), ctx.audit)
    timeout = election_timeout_ns(ctx.audit)
    if at is None or timeout is None:
        return {"quorum-windows": -1}  # no timeline or timing: nothing can be placed
    end = ctx.events[-1].time if ctx.events else 0
    others = [w for w in fault_windows(ctx.operations, end) if w["f"] != "partition"]
    leads = leaderships(ctx.audit, at)
    windows = checked = 0
    for start, stop, grudge in partition_windows(ctx.operations, end):
        deadline = start + 3 * timeout
        if stop <= deadline or any(w["start"] <= deadline and start <= w["end"] for w in others):
            continue
        windows += 1
        for lead in leads:
            if lead.start > start or (lead.end is not None and lead.end <= deadline):
                continue
            conf = lead.conf_through(start, deadline)
            if conf is None:
                continue
            checked += 1
            if not hears_quorum(lead.node, conf, grudge):
                flag(
                    "leader-kept-without-quorum",
                    (lead.node, lead.group, lead.term),
                    f"{lead.node} still led {lead.group} (term {lead.term}) "
                    f"{(deadline - start) / 1e9:.2f}s into a partition that cut it off from a "
                    f"quorum of {describe(conf)}",
                    lead.event,
                )
    return {"quorum-windows": windows, "quorum-leaders": checked}
