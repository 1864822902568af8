"""The report's one figure: every lane of a run on one time axis.

Theory of operation. A reader looks for where a fault landed: in which
operations, which Raft term or configuration stage, which rebalance step.
So the fault lane, the client operations, the Raft lanes, the nodes'
process starts and stops and the rebalance lane are rows of ONE plotly
figure: each row has a y axis of its own (stacked by `domain`), all share
the x axis `x`, so a zoom or pan of any row moves every row, and the
fault and change bands (layout shapes at paper height) shade every row.
Audit events are placed by `RunData.audit_ns`, the history clock that
checkers.audit gives every reader.

Labels never overprint: bars (faults, leaders, stages) carry their label
inside and the layout's `uniformtext` hides any that does not fit at the
minimum size, which plotly re-decides on every zoom; markers (writes,
requests, process starts, unapplied faults, the first anomaly) carry hover
text only; row headings sit in the gaps between rows.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

from checkers.history import Operation
from reports.data import NS_PER_S, RunData
from reports.figures import Figure, bands, op_traces
from reports.lanes import bars, node_traces, raft_traces, rebalance_traces

GAP_PX = 30  # between rows: room for the next row's heading
LANE_PX = 24  # one category row (a bar's label is 10 px)
LABEL_PX = 10  # bar labels are this size or hidden (uniformtext)
MARGIN = {"t": 40, "b": 50, "l": 150, "r": 20}
FAULT_COLOR, CHANGE_COLOR = "#e8837f", "#7fa8d1"
ANOMALY_COLOR = "#8b0000"
ROW_ANOMALY = "first anomaly"


@dataclass
class Row:
    """One stacked row: its heading, traces, categories (None: a numeric axis)."""

    heading: str
    traces: list[dict[str, Any]]
    categories: list[str] | None
    px: int
    axis: dict[str, Any] = field(default_factory=dict)


def _span(start: int, end: int) -> str:
    return f"{start / NS_PER_S:.3f}-{end / NS_PER_S:.3f} s ({(end - start) / NS_PER_S:.3f} s)"


def pack_lanes(windows: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """Windows per kind (`f`) in rows where none overlaps another: overlapping
    ones (concurrent changes of different groups) go to a second row `f 2`,
    and so on, so a bar never hides another's label."""
    lanes: dict[str, list[dict[str, Any]]] = {}
    for w in sorted(windows, key=lambda w: w["start"]):
        n = 1
        while True:
            lane = w["f"] if n == 1 else f"{w['f']} {n}"
            taken = lanes.setdefault(lane, [])
            if not taken or taken[-1]["end"] <= w["start"]:
                taken.append(w)
                break
            n += 1
    return sorted(lanes.items(), key=lambda item: (item[1][0]["f"], item[0]))


def event_row(data: RunData, first_anomaly: tuple[int, str] | None) -> Row | None:
    """Fault windows and membership changes as labelled bars, faults not applied
    and the first anomaly as hover-only markers; None when there is none."""
    traces: list[dict[str, Any]] = []
    rows: list[str] = []
    for windows, color in ((data.faults, FAULT_COLOR), (data.changes, CHANGE_COLOR)):
        for lane, packed in pack_lanes(windows):
            segments = [(w["start"], w["end"], w["f"], f"{w['f']} {_span(w['start'], w['end'])}")
                        for w in packed]  # fmt: skip
            traces.append(bars(lane, segments, lambda _, c=color: c, "y"))
            rows.append(lane)
    if data.unapplied:
        lanes = [u["f"] for u in data.unapplied]
        rows += [lane for lane in dict.fromkeys(lanes) if lane not in rows]
        traces.append({
            "type": "scatter", "mode": "markers", "name": "not applied", "showlegend": False,
            "x": [u["time"] / NS_PER_S for u in data.unapplied], "y": lanes, "yaxis": "y",
            "marker": {"symbol": "x-thin-open", "size": 10, "color": "#7f7f7f"},
            "hovertext": [html.escape(f"{u['f']} at {u['time'] / NS_PER_S:.3f} s not applied: "
                                      f"{u['reason']}") for u in data.unapplied],
            "hoverinfo": "text",
        })  # fmt: skip
    if first_anomaly is not None:
        t, label = first_anomaly
        rows.append(ROW_ANOMALY)
        traces.append({
            "type": "scatter", "mode": "markers", "name": "first anomaly", "showlegend": False,
            "x": [t / NS_PER_S], "y": [ROW_ANOMALY], "yaxis": "y",
            "marker": {"symbol": "star", "size": 12, "color": ANOMALY_COLOR},
            "hovertext": [html.escape(f"{label} at {t / NS_PER_S:.3f} s")], "hoverinfo": "text",
        })  # fmt: skip
    if not rows:
        return None
    return Row("Faults, membership changes and the first anomaly", traces, rows,
               LANE_PX * len(rows))  # fmt: skip


def one_figure(
    data: RunData, ops: list[Operation], first_anomaly: tuple[int, str] | None
) -> tuple[Figure, dict[str, int]]:
    """The figure and what it drew (ops, raft groups, writes, rows)."""
    rows: list[Row] = []
    events = event_row(data, first_anomaly)
    if events is not None:
        rows.append(events)
    procs = {int(op.process) for op in ops}
    rows.append(Row("Operations per process (ok green, fail red, info orange)",
                    op_traces(data, ops, "y"), None, max(100, min(600, 12 * len(procs) + 40)),
                    {"title": {"text": "process"}}))  # fmt: skip
    raft, lanes, groups = raft_traces(data, "y")
    if raft:
        shown = len(lanes) // 2
        more = f" (the first {shown} of {groups} groups)" if shown < groups else ""
        rows.append(Row(f"Raft groups: leader and term, configuration stage{more}", raft, lanes,
                        LANE_PX * len(lanes)))  # fmt: skip
    nodes, node_rows = node_traces(data, "y")
    if nodes:
        rows.append(Row("Node processes: started ▸, stopping ■", nodes, node_rows,
                        LANE_PX * len(node_rows)))  # fmt: skip
    rebalance, rebalance_rows, writes = rebalance_traces(data, "y")
    if rebalance:
        rows.append(Row("Rebalance: assignment writes ◆ and requests ○ (hover for keys)",
                        rebalance, rebalance_rows, LANE_PX * len(rebalance_rows)))  # fmt: skip
    layout = _stack(rows)
    layout["shapes"] = bands(data)
    if first_anomaly is not None:
        x = first_anomaly[0] / NS_PER_S
        layout["shapes"].append({
            "type": "line", "xref": "x", "yref": "paper", "x0": x, "x1": x, "y0": 0, "y1": 1,
            "line": {"width": 1.5, "dash": "dash", "color": ANOMALY_COLOR}, "name": "anomaly",
        })  # fmt: skip
    traces = [t for row in rows for t in row.traces]
    drawn = {"ops": len(ops), "groups": len(lanes) // 2, "writes": writes, "rows": len(rows)}
    return {"data": traces, "layout": layout}, drawn


def _stack(rows: list[Row]) -> dict[str, Any]:
    """Layout with one y axis per row, top to bottom, all on the x axis `x`."""
    total = sum(r.px for r in rows) + GAP_PX * len(rows)
    layout: dict[str, Any] = {
        "height": total + MARGIN["t"] + MARGIN["b"],
        "margin": MARGIN,
        "hovermode": "closest",
        "barmode": "overlay",
        "uniformtext": {"mode": "hide", "minsize": LABEL_PX},
        "font": {"size": 11},
        "showlegend": False,  # the headings name the colours; a legend would crowd the modebar
        "annotations": [],
    }
    top = 0
    for n, row in enumerate(rows, start=1):
        name = "y" if n == 1 else f"y{n}"
        for trace in row.traces:
            trace["yaxis"] = name
        head = 1 - top / total
        top += GAP_PX + row.px
        domain = [1 - top / total, head - GAP_PX / total]
        axis: dict[str, Any] = {"domain": domain, "anchor": "x", "fixedrange": True,
                                "automargin": True, **row.axis}  # fmt: skip
        if row.categories is not None:
            # plotly lists categories bottom up; the row reads top down.
            axis |= {"type": "category", "categoryorder": "array",
                     "categoryarray": list(reversed(row.categories))}  # fmt: skip
        layout["yaxis" if n == 1 else f"yaxis{n}"] = axis
        layout["annotations"].append({
            "text": html.escape(row.heading), "xref": "paper", "yref": "paper", "x": 0,
            "y": head - GAP_PX / total, "xanchor": "left", "yanchor": "bottom",
            "showarrow": False, "font": {"size": 12, "color": "#333"},
        })  # fmt: skip
    layout["xaxis"] = {
        "title": {"text": "time since the workload started (s)"},
        "anchor": "y" if len(rows) == 1 else f"y{len(rows)}",
        "showspikes": True, "spikemode": "across", "spikethickness": 1,
    }  # fmt: skip
    return layout
