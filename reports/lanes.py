"""Raft, node and rebalance lanes from nodes' audit events (docs/events.md).

Each function returns traces for one row of the report's one figure
(reports.timeline), on the y axis it is given and the shared x axis.

Per Raft group two lanes over time: who leads (from `role` events: a node
leads from its `role: leader` until it steps down, takes another role, or
another node leads) with the term, and the configuration stage the leader's
change-peers context is in (`change-stage`: stable, catching-up, joint;
`none` counts as stable). The rebalance lane has one row per zone
partition with a marker for each assignment write (deduplicated by
revision, since several nodes may report one) and for each rebalance or
cancel request a node reported. The node lane marks each process start
(`started`) and stop (`stopping`) per node, so a kill and restart shows
against the fault band that caused it.
"""

from __future__ import annotations

import html
from typing import Any

from reports.data import NS_PER_S, RunData

MAX_GROUPS = 24
STAGE_COLORS = {"stable": "#9ecae1", "catching-up": "#fdae6b", "joint": "#e6550d"}
NODE_COLORS = [
    "#1f77b4",
    "#2ca02c",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#d62728",
    "#ff7f0e",
]
Segment = tuple[int, int, str, str]  # start, end, label, hover


def _group_events(data: RunData) -> dict[str, list[tuple[int, dict[str, Any]]]]:
    groups: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for node in sorted(data.audit):
        for ev in data.audit[node]:
            if isinstance(ev.get("group"), str):
                groups.setdefault(ev["group"], []).append((data.audit_ns(ev), ev))
    for evs in groups.values():
        evs.sort(key=lambda pair: pair[0])
    return groups


def leader_segments(events: list[tuple[int, dict[str, Any]]], end: int) -> list[Segment]:
    """Who led the group when, with the term."""
    out: list[Segment] = []
    current: tuple[str, int, int] | None = None  # node, term, since
    for t, ev in events:
        kind, node = ev.get("kind"), ev.get("node")
        if kind == "role" and ev.get("role") == "leader":
            if current is not None:
                out.append(_lead(current, t))
            current = (str(node), int(ev.get("term") or 0), t)
        elif (
            current is not None
            and node == current[0]
            and (kind == "step-down" or (kind == "role" and ev.get("role") != "leader"))
        ):
            out.append(_lead(current, t))
            current = None
    if current is not None:
        out.append(_lead(current, end))
    return out


def _lead(current: tuple[str, int, int], until: int) -> Segment:
    node, term, since = current
    return since, until, f"{node} t{term}", f"{node} leads, term {term}"


def stage_segments(events: list[tuple[int, dict[str, Any]]], end: int) -> list[Segment]:
    """The change-peers stage over time; stable before the first change."""
    out: list[Segment] = []
    stage, since, hover = "stable", 0, "stable"
    for t, ev in events:
        kind = ev.get("kind")
        if kind == "config-applied" and stage == "stable" and ev.get("stage") == "stable":
            hover = f"stable {ev.get('peers')}"
        if kind != "change-stage":
            continue
        new = "stable" if ev.get("stage") in ("none", "stable") else str(ev.get("stage"))
        if new == stage:
            continue
        out.append((since, t, stage, hover))
        stage, since = new, t
        hover = f"{new}: {ev.get('old_peers')} → {ev.get('peers')} (token {ev.get('token')})"
        if new == "stable":
            hover = f"stable {ev.get('peers')}"
    out.append((since, end, stage, hover))
    return out


def bars(lane: str, segments: list[Segment], color_of: Any, yaxis: str) -> dict[str, Any]:
    """One lane of horizontal bars. A bar's label is drawn only where it fits
    inside the bar (the layout's `uniformtext` hides the rest; every bar keeps
    its hover text), so labels of short bars never overprint their neighbours."""
    return {
        "type": "bar",
        "orientation": "h",
        "yaxis": yaxis,
        "y": [lane] * len(segments),
        "base": [s / NS_PER_S for s, _, _, _ in segments],
        "x": [max(e - s, 1) / NS_PER_S for s, e, _, _ in segments],
        "text": [label for _, _, label, _ in segments],
        "textposition": "inside",
        "insidetextanchor": "start",
        "hovertext": [html.escape(h) for _, _, _, h in segments],
        "hoverinfo": "text",
        "marker": {"color": [color_of(label) for _, _, label, _ in segments]},
        "showlegend": False,
        "name": lane,
    }


def raft_traces(data: RunData, yaxis: str) -> tuple[list[dict[str, Any]], list[str], int]:
    """The leader and stage lanes of each group on `yaxis`: (traces, lane
    names top to bottom, groups in the run); the first MAX_GROUPS are drawn."""
    groups = _group_events(data)
    names = sorted(groups)[:MAX_GROUPS]
    nodes = sorted(data.audit)
    color = {n: NODE_COLORS[i % len(NODE_COLORS)] for i, n in enumerate(nodes)}
    traces = []
    for group in names:
        leaders = leader_segments(groups[group], data.end_ns)
        stages = stage_segments(groups[group], data.end_ns)
        traces.append(
            bars(f"{group} leader", leaders, lambda lb: color.get(lb.split()[0], "#999"), yaxis)
        )
        traces.append(
            bars(f"{group} config", stages, lambda lb: STAGE_COLORS.get(lb, "#ccc"), yaxis)
        )
    lanes = [f"{g} {lane}" for g in names for lane in ("leader", "config")]
    return traces, lanes, len(groups)


LIFECYCLE = {"started": "triangle-right", "stopping": "square"}


def node_traces(data: RunData, yaxis: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Each node's process starts and stops (`started`, `stopping`) as markers
    on its own row, hover text only: a kill and restart shows where it landed."""
    traces, rows = [], []
    for kind, symbol in LIFECYCLE.items():
        xs, ys, hover = [], [], []
        for node in sorted(data.audit):
            for ev in data.audit[node]:
                if ev.get("kind") != kind:
                    continue
                t = data.audit_ns(ev)
                xs.append(t / NS_PER_S)
                ys.append(f"node {node}")
                hover.append(html.escape(f"{node} {kind} at {t / NS_PER_S:.3f} s"))
        if xs:
            traces.append({
                "type": "scatter", "mode": "markers", "yaxis": yaxis, "x": xs, "y": ys,
                "hovertext": hover, "hoverinfo": "text", "name": f"node {kind}",
                "marker": {"size": 9, "symbol": symbol, "color": "#444"}, "showlegend": False,
            })  # fmt: skip
    if traces:
        rows = [f"node {n}" for n in sorted(data.audit)]
    return traces, rows


def _short(key: str) -> str:
    return key.rsplit(".", 1)[-1]


def rebalance_writes(data: RunData) -> list[tuple[int, dict[str, Any]]]:
    """Assignment writes, one per (zone, partition, revision), in time order."""
    seen: dict[tuple[Any, Any, Any], tuple[int, dict[str, Any]]] = {}
    for node in sorted(data.audit):
        for ev in data.audit[node]:
            if ev.get("kind") == "assignments-written":
                key = (ev.get("zone"), ev.get("partition"), ev.get("revision"))
                seen.setdefault(key, (data.audit_ns(ev), ev))
    return sorted(seen.values(), key=lambda pair: pair[0])


def rebalance_traces(data: RunData, yaxis: str) -> tuple[list[dict[str, Any]], list[str], int]:
    """Assignment writes and rebalance requests per partition on `yaxis`, hover
    text only (a zone with many writes would overprint any label): (traces,
    rows top to bottom, writes drawn)."""
    writes = rebalance_writes(data)
    requests = [
        (data.audit_ns(ev), ev)
        for node in sorted(data.audit)
        for ev in data.audit[node]
        if ev.get("kind") in ("rebalance-request", "cancel-request")
    ]
    traces: list[dict[str, Any]] = []
    xs, ys, hover = [], [], []
    for t, ev in writes:
        keys = ev.get("keys") or {}
        xs.append(t / NS_PER_S)
        ys.append(f"zone {ev.get('zone')} p{ev.get('partition')}")
        parts = [
            f"{_short(k)}: {v.get('old') if isinstance(v, dict) else ''} → "
            f"{v.get('new') if isinstance(v, dict) else v}"
            for k, v in keys.items()
        ]
        hover.append(
            html.escape(f"revision {ev.get('revision')} by {ev.get('node')} at "
                        f"{t / NS_PER_S:.3f} s: ")
            + "<br>".join(html.escape(p) for p in parts)
        )  # fmt: skip
    if writes:
        traces.append({
            "type": "scatter", "mode": "markers", "yaxis": yaxis, "x": xs, "y": ys,
            "hovertext": hover, "hoverinfo": "text", "name": "assignment writes",
            "marker": {"size": 10, "symbol": "diamond"}, "showlegend": False,
        })  # fmt: skip
    if requests:
        traces.append({
            "type": "scatter", "mode": "markers", "yaxis": yaxis, "name": "requests",
            "x": [t / NS_PER_S for t, _ in requests],
            "y": [f"requests p{ev.get('partition')}" for _, ev in requests],
            "hovertext": [
                html.escape(
                    f"{ev['kind']} {ev.get('direction') or ev.get('outcome')} "
                    f"on {ev.get('node')}: request r{ev.get('request_revision')}"
                    f", last seen r{ev.get('last_seen_revision')}"
                )
                for _, ev in requests
            ],
            "hoverinfo": "text", "showlegend": False,
            "marker": {"size": 8, "symbol": "circle-open"},
        })  # fmt: skip
    rows = list(dict.fromkeys(sorted(ys) + sorted(
        f"requests p{ev.get('partition')}" for _, ev in requests)))  # fmt: skip
    return traces, rows, len(writes)
