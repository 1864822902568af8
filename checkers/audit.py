"""Reading nodes' audit logs (docs/events.md) from a run directory.

Audit events stay plain dicts: their fields vary by kind and new kinds
appear as ember grows, so checkers read the fields they need and ignore the
rest. A node's list keeps file order, which is the order the node emitted
them.

One rewrite happens here, so that every reader (the checkers, the report,
the lake) orders events of different nodes by when they happened, not by
what a node's clock said: where the run's timeline.json says the nodes
share the harness's monotonic clock (the simulator; Docker, one kernel),
`place_events` sets each event's `wall` from that clock (the process's
`mono_origin_ns` plus the event's `mono_ns`, against the history's zero)
and keeps the node's own reading as `node_wall`. A clock fault moves a
node's wall clock, never the monotonic one, so two nodes' events stay in
real-time order under skew. SSH hosts have clocks of their own: there the
harness measures each node's offset (harness.clock_offsets, Jepsen-style
midpoint of a round trip) at the start and after each restart, and the
event's wall, less its node's offset and less the offset a clock fault
added to ember's clock alone (`clock_offset_s`), is the instant. Runs without these
fields (older runs) keep the nodes' walls; the report says so.

Each process names its kernel's boot id on its first event; every event of
the process gets it on load (`boot_id`). A process whose boot id is not the
harness's (timeline.json's `harness_boot_id`) does not share the harness's
monotonic clock, so its events are not placed by it, whatever the run says.

`run_clock` is the one mapping of an event to history time (ns since the
history's zero) for every reader; nothing else converts clocks.
"""

from __future__ import annotations

import calendar
import os
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, TypeGuard

import msgspec

from checkers.history import HistoryError

_DECODER = msgspec.json.Decoder(dict[str, Any])
NS_PER_S = 1_000_000_000
UNIX_2001 = 1e9  # a `wall` above this is Unix time (or the simulator's virtual Unix clock)
TIMELINE_FILE = "timeline.json"
MAX_SLEW = 500e-6  # the most an NTP-disciplined clock slews (the kernel's limit), s per s


def read_events(
    path: str | os.PathLike[str], node: str | None = None, kinds: Collection[str] | None = None
) -> list[dict[str, Any]]:
    """Reads one events.jsonl; fills in `node` where a line lacks it. With `kinds`,
    keeps only events of those kinds, with what placing them on the harness's
    clock needs (each process's first event, with `mono_origin_ns`, and the
    file's first event, which `history_clock` reads).

    Raises HistoryError naming the line of a malformed event (not JSON, not an
    object, or without a string `kind`), kept or not.
    """
    source = os.fspath(path)
    with open(source, "rb") as fh:
        data = fh.read()
    wanted = None if kinds is None else _wanted_lines(data, kinds)
    if wanted is not None:
        out = _EVENTS.decode(b"[" + b",".join(wanted) + b"]")  # one call: each line is sound
    else:
        out = _decode_lines(source, data)
        if kinds is not None:
            out = [ev for i, ev in enumerate(out)
                   if _wanted(i, ev["kind"], "mono_origin_ns" in ev, kinds)]  # fmt: skip
    if node is not None:
        for ev in out:
            ev.setdefault("node", node)
    return out


class _Head(msgspec.Struct, gc=False):
    """The two fields that choose a line; decoding skips the rest unbuilt. A
    line without a string `kind` fails the decoding (`_decode_lines` names it)."""

    kind: str
    mono_origin_ns: Any = msgspec.UNSET


_HEADS = msgspec.json.Decoder(list[_Head])
_EVENTS = msgspec.json.Decoder(list[dict[str, Any]])


def _wanted_lines(data: bytes, kinds: Collection[str]) -> list[bytes] | None:
    """The lines `read_events` keeps for `kinds`, from one decoding of the whole
    file into `_Head`s (most of a run's events are of kinds a reader of a few
    does not need, and building their dicts was most of the cost); None if any
    line is malformed or holds more than one event, for `_decode_lines` to name."""
    body = data.rstrip(b"\n")
    if not body:
        return []
    try:
        heads = _HEADS.decode(b"[" + body.replace(b"\n", b",") + b"]")
    except msgspec.DecodeError:
        return None
    lines = body.split(b"\n")
    if len(heads) != len(lines):
        return None
    # `_wanted` inlined: this runs for every event of every node of every run.
    unset = msgspec.UNSET
    wanted = [line for line, head in zip(lines, heads, strict=True)
              if head.kind in kinds or head.mono_origin_ns is not unset]  # fmt: skip
    first = heads[0]
    if not (first.kind in kinds or first.mono_origin_ns is not unset):
        wanted.insert(0, lines[0])  # the file's first event, which `history_clock` reads
    return wanted


def _wanted(i: int, kind: str, starts_process: bool, kinds: Collection[str]) -> bool:
    """Whether `read_events` keeps the i-th event (counting from 0) for `kinds`."""
    return kind in kinds or i == 0 or starts_process


def _decode_lines(source: str, data: bytes) -> list[dict[str, Any]]:
    """Every non-blank line decoded on its own; the first malformed one is named."""
    out: list[dict[str, Any]] = []
    for lineno, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            ev = _DECODER.decode(line)
        except msgspec.DecodeError as exc:
            raise HistoryError(f"{source}: line {lineno}: {exc}") from None
        if not isinstance(ev.get("kind"), str):
            raise HistoryError(f"{source}: line {lineno}: event has no string 'kind'")
        out.append(ev)
    return out


def load_audit(
    run_dir: str | os.PathLike[str], kinds: Collection[str] | None = None
) -> dict[str, list[dict[str, Any]]] | None:
    """Loads nodes/<node>/events.jsonl for every node, placed on the harness's
    clock where the run allows it (`place_events`); None if there are none.
    `kinds`: keep only those (`read_events`), for a reader that needs a few."""
    nodes = Path(run_dir) / "nodes"
    if not nodes.is_dir():
        return None
    audit: dict[str, list[dict[str, Any]]] = {}
    for node_dir in sorted(nodes.iterdir()):
        path = node_dir / "events.jsonl"
        if path.is_file():
            audit[node_dir.name] = read_events(path, node_dir.name, kinds)
    if audit:
        place_events(audit, _timeline_doc(run_dir))
    return audit or None


def place_events(audit: dict[str, list[dict[str, Any]]], timeline: dict[str, Any]) -> int:
    """Sets each event's `wall` to the instant on the harness's clock (module doc),
    keeping the node's reading as `node_wall`; returns how many events moved.

    Shared monotonic clock (sim, Docker): a process's first event carries
    `mono_origin_ns`; the events after it, up to the next process's first,
    are that process's. A run whose timeline does not say the clock is
    shared still places this way each process whose `boot_id` is the
    harness's (a Docker run where one node's boot id could not be read at
    the start). The rest (SSH hosts) by the node's measured clock offset
    (`clock_offsets`, harness.clock_offsets), the reading nearest the event.
    Events of a process whose origin is unknown, or of a node never
    measured, keep their wall.
    """
    tag_boot_ids(audit)
    zero_wall, zero_mono = timeline.get("history_zero_wall"), timeline.get("history_zero_mono_ns")
    boot = timeline.get("harness_boot_id")
    harness_boot = boot if isinstance(boot, str) and boot else None
    placed = 0
    if is_number(zero_wall) and is_number(zero_mono):
        # A run that shares the clock places every process by it (but one from
        # another kernel); any other run, each process that names our kernel.
        shared = bool(timeline.get("shared_monotonic"))
        if shared or harness_boot:
            placed = _place_by_monotonic(audit, zero_wall, zero_mono, harness_boot,
                                         need_boot=not shared)  # fmt: skip
    readings = timeline.get("clock_offsets")
    if isinstance(readings, list):
        placed += _place_by_offsets(audit, readings)
    return placed


def tag_boot_ids(audit: dict[str, list[dict[str, Any]]]) -> None:
    """Gives every event its process's `boot_id` (written on the process's first
    event, the one with `mono_origin_ns`; absent in older runs)."""
    for events in audit.values():
        boot: Any = None
        for ev in events:
            if "mono_origin_ns" in ev:
                boot = ev.get("boot_id")
            if boot is not None:
                ev.setdefault("boot_id", boot)


def _place_by_monotonic(
    audit: dict[str, list[dict[str, Any]]], zero_wall: float, zero_mono: float,
    harness_boot: str | None, *, need_boot: bool,
) -> int:  # fmt: skip
    placed = 0
    for events in audit.values():
        origin: int | float | None = None
        for ev in events:
            if "mono_origin_ns" in ev:
                origin = ev["mono_origin_ns"] if is_number(ev["mono_origin_ns"]) else None
                boot = ev.get("boot_id")
                ours = harness_boot is not None and boot == harness_boot
                other = harness_boot is not None and isinstance(boot, str) and boot and not ours
                if other or (need_boot and not ours):
                    origin = None  # not known to be our monotonic clock: not ours to place by
            mono = ev.get("mono_ns")
            if origin is None or not is_number(mono):
                continue
            ev["node_wall"] = ev.get("wall")
            ev["wall"] = zero_wall + (origin + mono - zero_mono) / NS_PER_S
            placed += 1
    return placed


def _place_by_offsets(audit: dict[str, list[dict[str, Any]]], readings: list[Any]) -> int:
    """wall - offset, by the node's reading with the smallest error bound for the
    event: half its round trip plus what the clock may have slewed since
    (MAX_SLEW, over the time between the reading and the event)."""
    by_node: dict[str, list[tuple[float, float, float]]] = {}  # node -> (node clock, offset, rtt)
    for r in readings:
        if not isinstance(r, dict):
            continue
        at, offset, rtt = r.get("harness_wall"), r.get("offset_s"), r.get("rtt_s", 0.0)
        if is_number(at) and is_number(offset) and is_number(rtt):
            by_node.setdefault(str(r.get("node")), []).append((at + offset, offset, rtt))
    placed = 0
    for node, events in audit.items():
        mine = by_node.get(node)
        if not mine:
            continue
        for ev in events:
            wall = ev.get("wall")
            if not is_number(wall) or "node_wall" in ev:
                continue  # placed by the monotonic clock already
            # The readings measured the host's clock; a clock fault moved ember's alone.
            fault = ev.get("clock_offset_s")
            host = wall - fault if is_number(fault) else wall
            _, offset, _ = min(mine, key=lambda m: m[2] / 2 + MAX_SLEW * abs(m[0] - host))
            ev["node_wall"] = wall
            ev["wall"] = host - offset
            placed += 1
    return placed


def is_number(value: Any) -> TypeGuard[int | float]:
    """An int or float, not a bool (events' numeric fields)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _timeline_doc(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        doc = msgspec.json.decode((Path(run_dir) / TIMELINE_FILE).read_bytes())
    except (OSError, msgspec.DecodeError):
        return {}
    return doc if isinstance(doc, dict) else {}


def by_group(audit: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """All nodes' events per Raft group, each node's order kept, nodes in name order."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for node in sorted(audit):
        for ev in audit[node]:
            group = ev.get("group")
            if isinstance(group, str):
                groups.setdefault(group, []).append(ev)
    return groups


def load_timeline(run_dir: str | os.PathLike[str]) -> float | None:
    """The Unix time of the history's zero from the run's timeline.json (the
    harness writes it as the workload starts); None without a readable one."""
    zero = _timeline_doc(run_dir).get("history_zero_wall")
    return float(zero) if isinstance(zero, int | float) and not isinstance(zero, bool) else None


def history_zero(run_dir: str | os.PathLike[str]) -> float | None:
    """The Unix time of the history's zero: timeline.json's anchor, else (runs
    from before timeline.json) the run dir's name stamp `YYYYmmddTHHMMSS-seed`,
    which was taken before setup and so is early by however long setup took;
    None if neither is readable."""
    zero = load_timeline(run_dir)
    if zero is not None:
        return zero
    try:
        stamp = time.strptime(Path(run_dir).name.split("-", 1)[0], "%Y%m%dT%H%M%S")
    except ValueError:
        return None
    return float(calendar.timegm(stamp))


def run_clock(
    run_dir: str | os.PathLike[str], audit: dict[str, list[dict[str, Any]]]
) -> Callable[[dict[str, Any]], int]:
    """THE mapping of a run's audit event to history time (ns since the history's
    zero) that the checkers' callers, the report and the lake use: the event's
    `wall` (placed by `load_audit`) against `history_zero`; where walls are not
    Unix time, the event's `mono_ns` (the simulator's runs before timeline.json)."""
    by_wall = history_clock(history_zero(run_dir), audit)
    return by_wall if by_wall is not None else (lambda ev: int(ev.get("mono_ns") or 0))


def history_clock(
    zero_wall: float | None, audit: dict[str, list[dict[str, Any]]]
) -> Callable[[dict[str, Any]], int] | None:
    """The one function placing an audit event on the history's clock (ns since
    the history's zero), from its `wall`; None where it cannot: no anchor, or
    nodes' walls that are not Unix time."""
    walls = [ev["wall"] for evs in audit.values() for ev in evs[:1] if "wall" in ev]
    unix = bool(walls) and all(isinstance(w, int | float) and w > UNIX_2001 for w in walls)
    if zero_wall is None or not unix:
        return None
    origin = zero_wall

    def by_wall(ev: dict[str, Any]) -> int:
        wall = ev.get("wall")
        if not isinstance(wall, int | float):
            return int(ev.get("mono_ns") or 0)
        return max(0, int((wall - origin) * NS_PER_S))

    return by_wall
