"""Raft and rebalance lanes from nodes' audit events (docs/events.md).

Per Raft group two lanes over time: who leads (from `role` events: a node
leads from its `role: leader` until it steps down, takes another role, or
another node leads) with the term, and the configuration stage the leader's
change-peers context is in (`change-stage`: stable, catching-up, joint;
`none` counts as stable). The rebalance lane has one row per zone
partition with a marker for each assignment write (deduplicated by
revision, since several nodes may report one) and for each rebalance or
cancel request a node reported.
"""

from __future__ import annotations

import html
from typing import Any

from reports.data import NS_PER_S, RunData
from reports.figures import Figure, _layout

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


def _bars(lane: str, segments: list[Segment], color_of: Any) -> dict[str, Any]:
    return {
        "type": "bar",
        "orientation": "h",
        "y": [lane] * len(segments),
        "base": [s / NS_PER_S for s, _, _, _ in segments],
        "x": [max(e - s, 1) / NS_PER_S for s, e, _, _ in segments],
        "text": [label for _, _, label, _ in segments],
        "textposition": "inside",
        "hovertext": [html.escape(h) for _, _, _, h in segments],
        "hoverinfo": "text",
        "marker": {"color": [color_of(label) for _, _, label, _ in segments]},
        "showlegend": False,
        "name": lane,
    }


def raft_lanes(data: RunData) -> tuple[Figure | None, int, int]:
    """The leader and stage lanes of each group; (figure, groups drawn, groups)."""
    groups = _group_events(data)
    if not groups:
        return None, 0, 0
    names = sorted(groups)[:MAX_GROUPS]
    nodes = sorted(data.audit)
    color = {n: NODE_COLORS[i % len(NODE_COLORS)] for i, n in enumerate(nodes)}
    traces = []
    for group in names:
        leaders = leader_segments(groups[group], data.end_ns)
        stages = stage_segments(groups[group], data.end_ns)
        traces.append(
            _bars(f"{group} leader", leaders, lambda lb: color.get(lb.split()[0], "#999"))
        )
        traces.append(_bars(f"{group} config", stages, lambda lb: STAGE_COLORS.get(lb, "#ccc")))
    lanes = [f"{g} {lane}" for g in reversed(names) for lane in ("config", "leader")]
    layout = _layout(
        data,
        "Raft groups: leader, term and configuration stage",
        max(220, 34 * len(lanes) + 110),
        barmode="overlay",
        yaxis={"categoryorder": "array", "categoryarray": lanes},
    )
    return {"data": traces, "layout": layout}, len(names), len(groups)


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


def rebalance_lane(data: RunData) -> tuple[Figure | None, int]:
    """Assignment writes and rebalance requests per partition; (figure, writes drawn)."""
    writes = rebalance_writes(data)
    requests = [
        (data.audit_ns(ev), ev)
        for node in sorted(data.audit)
        for ev in data.audit[node]
        if ev.get("kind") in ("rebalance-request", "cancel-request")
    ]
    if not writes and not requests:
        return None, 0
    traces = []
    xs, ys, text, hover = [], [], [], []
    for t, ev in writes:
        keys = ev.get("keys") or {}
        xs.append(t / NS_PER_S)
        ys.append(f"zone {ev.get('zone')} p{ev.get('partition')}")
        text.append(f"r{ev.get('revision')} " + ",".join(_short(k) for k in keys))
        parts = [
            f"{_short(k)}: {v.get('old') if isinstance(v, dict) else ''} → "
            f"{v.get('new') if isinstance(v, dict) else v}"
            for k, v in keys.items()
        ]
        hover.append(
            html.escape(f"revision {ev.get('revision')} by {ev.get('node')}: ")
            + "<br>".join(html.escape(p) for p in parts)
        )
    traces.append(
        {
            "type": "scatter",
            "mode": "markers+text",
            "x": xs,
            "y": ys,
            "text": text,
            "textposition": "top center",
            "hovertext": hover,
            "hoverinfo": "text",
            "marker": {"size": 10, "symbol": "diamond"},
            "name": "assignment writes",
        }
    )
    if requests:
        traces.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "requests",
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
                "hoverinfo": "text",
                "marker": {"size": 8, "symbol": "circle-open"},
            }
        )
    layout = _layout(data, "Rebalance: assignment keys by revision", 320)
    return {"data": traces, "layout": layout}, len(writes)
