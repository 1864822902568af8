"""The report's plotly figures, as plain dicts (data + layout).

Figures are built as JSON-able dicts rather than plotly.graph_objects: the
objects validate every point, which costs seconds on large histories, and
the page only needs the JSON that Plotly.newPlot takes.

Size budget. A 100k-operation history would be ~20 MB of points and a slow
page, so the operation timeline draws at most `TIMELINE_BUDGET` operations:
all of them when the history is small, else windows around the first
anomaly and around each fault's start and end (`select_ops`). Latency and
throughput always cover the whole run, aggregated into at most
`MAX_BUCKETS` time buckets. The page says what was left out.
"""

from __future__ import annotations

import bisect
from typing import Any

from checkers.history import Operation
from reports.data import NS_PER_S, RunData

TIMELINE_BUDGET = 3000
MAX_BUCKETS = 400
COLORS = {"ok": "#2ca02c", "fail": "#d62728", "info": "#ff7f0e"}
BAND_COLORS = {"fault": "rgba(214,39,40,0.12)", "change": "rgba(31,119,180,0.12)"}
UNAPPLIED_COLOR = "#7f7f7f"  # a fault not applied: a grey dotted tick marked ✕
Figure = dict[str, Any]


def _s(ns: int | float) -> float:
    return round(ns / NS_PER_S, 6)


def bands(data: RunData) -> list[dict[str, Any]]:
    """Layout shapes shading the applied fault and change windows across every
    lane (paper height), and ticking (a dotted line) each fault not applied.
    They carry no text: the fault lane (reports.timeline) names each one."""
    shapes = []
    for kind, windows in (("fault", data.faults), ("change", data.changes)):
        for w in windows:
            shapes.append(
                {
                    "type": "rect",
                    "xref": "x",
                    "yref": "paper",
                    "x0": _s(w["start"]),
                    "x1": _s(w["end"]),
                    "y0": 0,
                    "y1": 1,
                    "line": {"width": 0},
                    "fillcolor": BAND_COLORS[kind],
                    "layer": "below",
                    "name": f"{kind} {w['f']}",
                }
            )
    shapes.extend(_unapplied_tick(u) for u in data.unapplied)
    return shapes


def _unapplied_tick(u: dict[str, Any]) -> dict[str, Any]:
    """A fault that was not applied: a dotted vertical line at its moment, no area."""
    x = _s(u["time"])
    return {
        "type": "line",
        "xref": "x",
        "yref": "paper",
        "x0": x,
        "x1": x,
        "y0": 0,
        "y1": 1,
        "line": {"width": 1, "dash": "dot", "color": UNAPPLIED_COLOR},
        "layer": "below",
    }


def _layout(data: RunData, title: str, height: int, **extra: Any) -> dict[str, Any]:
    return {
        "title": {"text": title},
        "height": height,
        "shapes": bands(data),
        "xaxis": {"title": {"text": "time since the workload started (s)"}},
        "margin": {"t": 50, "l": 110, "r": 20},
        "hovermode": "closest",
        **extra,
    }


def select_ops(data: RunData, anchors: list[int]) -> tuple[list[Operation], list[str]]:
    """The client ops the timeline draws, and the windows it drew (see module doc).

    Anchors come first-anomaly first; past `TIMELINE_BUDGET // 20` of them
    the rest are dropped so each window keeps at least 20 ops. With no
    anchor the window is the start of the run.
    """
    ops = sorted(data.client_ops, key=lambda op: op.invoke_time)
    if len(ops) <= TIMELINE_BUDGET:
        return ops, []
    anchors = anchors[: TIMELINE_BUDGET // 20] or [ops[0].invoke_time]
    per = TIMELINE_BUDGET // len(anchors)
    times = [op.invoke_time for op in ops]
    ranges = []
    for t in anchors:
        lo = max(0, min(bisect.bisect_left(times, t) - per // 2, len(ops) - per))
        ranges.append((lo, lo + per))
    merged: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    windows = [f"{_s(times[lo]):.3f}-{_s(times[hi - 1]):.3f} s" for lo, hi in merged]
    return [op for lo, hi in merged for op in ops[lo:hi]], windows


def _describe_op(op: Operation) -> str:
    latency = (
        "" if op.complete_time is None else f"{(op.complete_time - op.invoke_time) / 1e6:.3f} ms"
    )
    result = "" if op.type != "ok" or op.f == "put" else f" → {op.result!r}"
    error = f" ({op.error})" if op.error else ""
    return (
        f"op {op.invoke_index} p{op.process} {op.f} {op.key or ''} {op.value!r}{result}"
        f"<br>{op.type}{error} {latency} on {op.node or '?'}"
    )


def op_traces(data: RunData, ops: list[Operation], yaxis: str) -> list[dict[str, Any]]:
    """Operations per process on `yaxis`: a bar from invoke to completion,
    coloured by outcome, with a hover point at the completion."""
    traces: list[dict[str, Any]] = []
    for kind in ("ok", "fail", "info"):
        xs: list[float | None] = []
        ys: list[int | None] = []
        hx, hy, text = [], [], []
        for op in ops:
            if op.type != kind:
                continue
            done = op.complete_time if op.complete_time is not None else data.end_ns
            xs += [_s(op.invoke_time), _s(done), None]
            ys += [int(op.process), int(op.process), None]
            hx.append(_s(done))
            hy.append(int(op.process))
            text.append(_describe_op(op))
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "x": xs,
                "y": ys,
                "yaxis": yaxis,
                "name": kind,
                "line": {"color": COLORS[kind], "width": 4},
                "hoverinfo": "skip",
                "legendgroup": kind,
            }
        )
        traces.append(
            {
                "type": "scatter",
                "mode": "markers",
                "x": hx,
                "y": hy,
                "yaxis": yaxis,
                "text": text,
                "hoverinfo": "text",
                "marker": {"color": COLORS[kind], "size": 4},
                "showlegend": False,
                "legendgroup": kind,
                "name": kind,
            }
        )
    return traces


def _quantile(sorted_ms: list[float], q: float) -> float:
    return sorted_ms[min(len(sorted_ms) - 1, int(q * len(sorted_ms)))]


def latency_throughput(data: RunData) -> tuple[Figure, float]:
    """Latency quantiles and completions per second in time buckets; returns the bucket (s)."""
    end = max(data.end_ns, 1)
    bucket = max(NS_PER_S // 10, -(-end // MAX_BUCKETS))
    n = end // bucket + 1
    lat: list[list[float]] = [[] for _ in range(n)]
    counts = {k: [0] * n for k in COLORS}
    for op in data.client_ops:
        if op.complete_time is None:
            continue
        b = op.complete_time // bucket
        counts[op.type][b] += 1
        if op.type == "ok":
            lat[b].append((op.complete_time - op.invoke_time) / 1e6)
    xs = [_s(i * bucket + bucket // 2) for i in range(n)]
    per_s = NS_PER_S / bucket
    traces: list[dict[str, Any]] = [
        {
            "type": "bar",
            "x": xs,
            "y": [round(c * per_s, 3) for c in counts[k]],
            "name": f"{k}/s",
            "marker": {"color": COLORS[k]},
            "yaxis": "y2",
            "opacity": 0.5,
        }
        for k in COLORS
    ]
    for q, dash in ((0.5, "solid"), (0.99, "dot")):
        ys = [round(_quantile(sorted(v), q), 3) if v else None for v in lat]
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "x": xs,
                "y": ys,
                "name": f"p{int(q * 100)} ms",
                "line": {"color": "#1f1f1f", "dash": dash},
                "connectgaps": False,
            }
        )
    layout = _layout(
        data,
        f"Latency and throughput ({bucket / NS_PER_S:g} s buckets)",
        460,
        barmode="stack",
        yaxis={"title": {"text": "latency (ms)"}, "type": "log", "domain": [0.45, 1]},
        yaxis2={"title": {"text": "completions/s"}, "domain": [0, 0.38], "anchor": "x"},
        xaxis={"title": {"text": "time since the workload started (s)"}, "anchor": "y2"},
        legend={"orientation": "h"},
    )
    return {"data": traces, "layout": layout}, bucket / NS_PER_S
