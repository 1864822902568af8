"""Rebalance rules that tie the assignment keys to Raft groups over time (M2, M7).

Theory of operation: each partition's assignment writes are replayed in
revision order, each placed in time at its earliest report (every metastore
node reports a write as it applies it; a restarted node replays old ones much
later, so only the first report says when it happened). Against that:

- M2 stable moves forward: each stable switch to peers S stands for the
  newest configuration entry stable(S) the partition's group committed
  before the switch was reported; successive switches stand for increasing
  log indexes (a switch to an older configuration than the one before it is
  a stale write).
- M7 membership containment: every voter of a configuration the group
  committed (old peers too, while joint) was assigned to the partition at
  some point of the run (in stable, pending, planned or a cancel's sides,
  before or after any reported write);
  and a replica stopped because it is not assigned (`replica-stopped`,
  reason `not in the stable assignment`) was unassigned in at least one
  assignment state in force during the STOP_SLACK_S before the stop. The
  node decides from a fresh read, so the state it read was in force within
  that window; a wider test would blame a lagging view, a narrower one
  would miss nothing more. A stop re-applied at start-up from the node's
  hint file (reason `stopped before the restart`) is a documented hint, not
  a decision, and is left out.
"""

from __future__ import annotations

from typing import Any

from checkers.api import Anomaly

Audit = dict[str, list[dict[str, Any]]]
STOP_SLACK_S = 5.0
_REPLICA_HINT = "stopped before the restart"


def _peers(value: Any) -> tuple[str, ...] | None:
    if isinstance(value, dict):
        value = value.get("peers")
    if not value or not isinstance(value, list | tuple):
        return None
    return tuple(sorted(str(p) for p in value))


def _wanted(state: dict[str, Any]) -> set[str]:
    """Every node the keys name: stable, pending, planned and a cancel's sides."""
    out: set[str] = set()
    for key in ("stable", "pending", "planned"):
        out |= set(_peers(state.get(key)) or ())
    cancel = state.get("cancel")
    if isinstance(cancel, dict):
        out |= set(_peers(cancel.get("old")) or ()) | set(_peers(cancel.get("new")) or ())
    return out


def ever_assigned(audit: Audit) -> dict[Any, set[str]]:
    """Per (zone, partition): every node any assignment key named, before (`old`)
    or after (`new`) any reported write."""
    out: dict[Any, set[str]] = {}
    for evs in audit.values():
        for ev in evs:
            if ev.get("kind") != "assignments-written" or not isinstance(ev.get("keys"), dict):
                continue
            named = out.setdefault((ev.get("zone"), ev.get("partition")), set())
            for k, change in ev["keys"].items():
                sides = (
                    [change.get("old"), change.get("new")] if isinstance(change, dict) else [change]
                )
                for side in sides:
                    named |= _wanted({str(k).rsplit(".", 1)[-1]: side})
    return out


def _wall(ev: dict[str, Any]) -> float | None:
    wall = ev.get("wall")
    return float(wall) if isinstance(wall, int | float) and not isinstance(wall, bool) else None


def timed_states(audit: Audit) -> dict[Any, list[tuple[float | None, int, dict[str, Any]]]]:
    """Per (zone, partition): (earliest report wall, revision, keys after it) in
    revision order."""
    writes: dict[Any, dict[int, tuple[float | None, dict[str, Any]]]] = {}
    for node in sorted(audit):
        for ev in audit[node]:
            rev, keys = ev.get("revision"), ev.get("keys")
            if ev.get("kind") != "assignments-written" or not isinstance(rev, int):
                continue
            if not isinstance(keys, dict):
                continue
            part = (ev.get("zone"), ev.get("partition"))
            wall, prev = _wall(ev), writes.setdefault(part, {}).get(rev)
            if prev is not None and prev[0] is not None and (wall is None or prev[0] <= wall):
                wall = prev[0]
            writes[part][rev] = (wall, keys)
    out: dict[Any, list[tuple[float | None, int, dict[str, Any]]]] = {}
    for part, by_rev in writes.items():
        state: dict[str, Any] = {}
        for rev in sorted(by_rev):
            wall, keys = by_rev[rev]
            for k, change in keys.items():
                state[str(k).rsplit(".", 1)[-1]] = (
                    change.get("new") if isinstance(change, dict) else change
                )
            out.setdefault(part, []).append((wall, rev, dict(state)))
    return out


def stable_commits(audit: Audit) -> dict[str, list[tuple[int, tuple[str, ...], float | None]]]:
    """Per group: (index, peers, earliest wall) of each stable configuration committed."""
    first: dict[tuple[str, int], tuple[tuple[str, ...], float | None]] = {}
    for node in sorted(audit):
        for ev in audit[node]:
            group, index = ev.get("group"), ev.get("index")
            if ev.get("kind") != "config-committed" or ev.get("stage") != "stable":
                continue
            if not isinstance(group, str) or not isinstance(index, int):
                continue
            wall, prev = _wall(ev), first.get((group, index))
            if prev is not None and prev[1] is not None and (wall is None or prev[1] <= wall):
                wall = prev[1]
            first[(group, index)] = (_peers(ev.get("peers")) or (), wall)
    out: dict[str, list[tuple[int, tuple[str, ...], float | None]]] = {}
    for (group, index), (peers, wall) in sorted(first.items()):
        out.setdefault(group, []).append((index, peers, wall))
    return out


def _flag(out: list[Anomaly], kind: str, message: str, *events: dict[str, Any]) -> None:
    revisions = [ev["revision"] for ev in events if isinstance(ev.get("revision"), int)]
    out.append(Anomaly(kind=kind, message=message, events=list(events), revisions=revisions))


def check_stable_order(audit: Audit, out: list[Anomaly]) -> int:
    """M2 (module doc); returns how many switches it placed."""
    commits, placed = stable_commits(audit), 0
    for (zone, part), states in sorted(timed_states(audit).items(), key=repr):
        mine = commits.get(f"part-{part}", [])
        last: tuple[int, int] | None = None  # (index, revision)
        stable: tuple[str, ...] | None = None
        for wall, rev, state in states:
            now = _peers(state.get("stable"))
            if now is None or now == stable:
                stable = now or stable
                continue
            stable = now
            before = [i for i, peers, at in mine
                      if peers == now and (wall is None or at is None or at <= wall)]  # fmt: skip
            if not before:
                continue  # not committed first: M1's stable-before-commit
            placed += 1
            if last is not None and max(before) < last[0]:
                _flag(out, "stable-went-back",
                      f"zone {zone} partition {part}: stable {list(now)} at revision {rev} is "
                      f"the configuration committed at index {max(before)}, before the one at "
                      f"{last[0]} that stable held at revision {last[1]}",
                      {"revision": rev})  # fmt: skip
            last = (max(before), rev)
    return placed


def check_containment(audit: Audit, out: list[Anomaly]) -> int:
    """M7 (module doc); returns how many facts it judged."""
    states, judged, named = timed_states(audit), 0, ever_assigned(audit)
    by_group = {f"part-{part}": (zone, part, s) for (zone, part), s in states.items()}
    for node in sorted(audit):
        for ev in audit[node]:
            known = by_group.get(str(ev.get("group")))
            if known is None:
                continue
            zone, part, timeline = known
            if ev.get("kind") == "config-committed":
                judged += 1
                ever = named.get((zone, part), set())
                voters = set(_peers(ev.get("peers")) or ()) | set(_peers(ev.get("old_peers")) or ())
                if voters - ever:
                    _flag(out, "voters-outside-assignments",
                          f"{ev.get('group')} committed voters {sorted(voters)} at "
                          f"{ev.get('index')}; {sorted(voters - ever)} never assigned to zone "
                          f"{zone} partition {part}", ev)  # fmt: skip
            elif ev.get("kind") == "replica-stopped" and ev.get("reason") != _REPLICA_HINT:
                wall = _wall(ev)
                if wall is None:
                    continue
                judged += 1
                around = _in_force(timeline, wall - STOP_SLACK_S, wall)
                if around and all(node in _wanted(s) for s in around):
                    what = f"every assignment in force in the {STOP_SLACK_S:g}s before named it"
                    group = ev.get("group")
                    _flag(out, "replica-stopped-while-wanted",
                          f"{node} stopped its replica of {group} while {what}", ev)  # fmt: skip
    return judged


def _in_force(
    timeline: list[tuple[float | None, int, dict[str, Any]]], lo: float, hi: float
) -> list[dict[str, Any]]:
    """The states in force at some instant of [lo, hi] (writes without a wall are skipped)."""
    placed = [(w, s) for w, _, s in timeline if w is not None]
    out = [s for w, s in placed if lo < w <= hi]
    before = [s for w, s in placed if w <= lo]
    return ([before[-1]] if before else []) + out
