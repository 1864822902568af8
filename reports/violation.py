"""Drawings of what a checker found: the failing partition and the anomalies.

A linearizability failure is drawn as porcupine does: the failing
partition's operations as bars per process on the history's index line,
the longest linearizable prefix in green numbered in its linearization
order, the operation that cannot be placed in red, the operations
concurrent with it in orange, and the model states reachable just before
it. A long partition is cut to a window ending at the unplaceable
operation (the page says how many were left out). Other anomalies are shown
as their events (or history operations) side by side, revisions first.
"""

from __future__ import annotations

import html
import json
from typing import Any

from reports.data import RunData

PREFIX_TAIL = 40  # prefix ops drawn before the unplaceable one
ROW_PX, LEFT_PX, WIDTH_PX = 26, 70, 1100
MAX_ANOMALIES = 50
_ESC = html.escape


def _op_rows(data: RunData, failure: dict[str, Any]) -> list[dict[str, Any]]:
    """The failing partition's ops as {id, process, call, ret, label} dicts."""
    key = failure.get("key")
    rows = []
    for op in data.client_ops:
        if op.type == "fail" or op.key != key:
            continue
        ret = op.complete_index if op.type == "ok" else None
        out = "" if op.type != "ok" or op.f == "put" else f" → {op.result!r}"
        rows.append(
            {
                "id": op.invoke_index,
                "process": op.process,
                "call": op.invoke_index,
                "ret": ret,
                "label": f"{op.f}{'' if op.value is None else f' {op.value!r}'}{out}",
            }
        )
    for u in failure.get("unplaceable") or []:
        lin_op: dict[str, Any] = u.get("op") or {}
        if not any(r["id"] == lin_op.get("id") for r in rows):  # ops not from this history
            rows.append(
                {
                    "id": lin_op.get("id"),
                    "process": lin_op.get("process"),
                    "call": lin_op.get("call"),
                    "ret": lin_op.get("ret"),
                    "label": f"{lin_op.get('f')} {lin_op.get('input')!r} → "
                    f"{lin_op.get('output')!r}",
                }
            )
    return rows


def _classify(rows: list[dict[str, Any]], failure: dict[str, Any]) -> dict[int, str]:
    """op id -> prefix / unplaceable / concurrent, for the ops worth drawing."""
    prefix = [int(i) for i in failure.get("linearized_prefix") or []]
    bad = {int(u["op"]["id"]) for u in failure.get("unplaceable") or [] if u.get("op")}
    end = max((r["ret"] or r["call"] for r in rows), default=0) + 1
    bad_rows = [r for r in rows if r["id"] in bad]
    lo_bad = min((r["call"] for r in bad_rows), default=end)
    hi_bad = max(((r["ret"] if r["ret"] is not None else end) for r in bad_rows), default=end)
    kinds = dict.fromkeys(prefix[-PREFIX_TAIL:], "prefix")
    in_prefix = set(prefix)
    for r in rows:
        if r["id"] in bad:
            kinds[r["id"]] = "unplaceable"
        elif r["id"] not in in_prefix and r["call"] <= hi_bad and (r["ret"] or end) >= lo_bad:
            kinds[r["id"]] = "concurrent"
    return kinds


def _svg(
    rows: list[dict[str, Any]],
    kinds: dict[int, str],
    order: dict[int, int],
    svg_id: str = "lin-svg",
) -> str:
    end = max((r["ret"] or r["call"] for r in rows), default=0) + 1
    # Ops of unknown outcome stay open to the end of the history; clip the
    # drawing to the stretch around the prefix tail and the unplaceable op.
    focus = [r for r in rows if kinds[r["id"]] != "concurrent"] or rows
    x0 = min(r["call"] for r in focus)
    rets = [r["ret"] for r in rows if r["ret"] is not None]
    rets += [r["call"] for r in rows if kinds[r["id"]] == "unplaceable"]
    x1 = min(max(rets, default=x0) + 2, end)
    procs = sorted({str(r["process"]) for r in rows}, key=lambda p: (len(p), p))
    # Like porcupine, place bars by the rank of their partition's own calls and
    # returns: in a big history a partition's ops are sparse in the index line.
    ticks = sorted({x0, x1} | {min(max(p, x0), x1) for r in rows for p in (r["call"], r["ret"])
                               if p is not None})  # fmt: skip
    rank = {p: n for n, p in enumerate(ticks)}
    scale = (WIDTH_PX - LEFT_PX - 10) / max(1, len(ticks) - 1)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" id="{svg_id}" width="{WIDTH_PX}" '
        f'height="{ROW_PX * len(procs) + 30}" font-family="sans-serif" font-size="11">'
    ]
    for row, proc in enumerate(procs):
        parts.append(f'<text x="4" y="{row * ROW_PX + 20}">p{_ESC(proc)}</text>')
    for r in rows:
        kind = kinds[r["id"]]
        call = rank[min(max(r["call"], x0), x1)]
        ret = rank[min(max(r["ret"], x0), x1)] if r["ret"] is not None else rank[x1]
        x, y = LEFT_PX + call * scale, procs.index(str(r["process"])) * ROW_PX + 6
        number = f"#{order[r['id']]} " if r["id"] in order else ""
        title = f"{number}op {r['id']}: {r['label']}"
        if r["ret"] is None:
            title += " (outcome unknown)"
        parts.append(
            f'<g class="lin-op lin-{kind}" data-op="{r["id"]}"><title>{_ESC(title)}</title>'
            f'<rect x="{x:.1f}" y="{y}" width="{max(3.0, (ret - call) * scale):.1f}" '
            f'height="{ROW_PX - 8}" rx="3" fill="{_COLORS[kind]}" fill-opacity="0.8"/>'
            f'<text x="{x + 3:.1f}" y="{y + 13}" fill="#fff">{_ESC((number + r["label"])[:60])}'
            "</text></g>"
        )
    parts.append("</svg>")
    return "".join(parts)


_COLORS = {
    "unplaceable": "#d62728",
    "prefix": "#2ca02c",
    "concurrent": "#ff7f0e",
    "counterexample": "#6a51a3",
}


def counterexample_html(cex: dict[str, Any]) -> tuple[str, int]:
    """The minimal counterexample (linearizability/shrink.py) drawn as bars,
    with what proves it; (html, number of ops)."""
    ops = [op for op in cex.get("ops") or [] if isinstance(op, dict)]
    stale = cex.get("stale_read") or []
    rows: list[dict[str, Any]] = [
        {
            "id": op.get("id"),
            "process": op.get("process"),
            "call": op.get("call"),
            "ret": op.get("ret") if op.get("known", True) else None,
            "label": f"{op.get('f')} {json.dumps(op.get('input'))}"
            + (f" → {json.dumps(op.get('output'))}" if op.get("output") is not None else ""),
        }
        for op in ops
    ]
    kinds: dict[int, str] = {
        r["id"]: "unplaceable" if stale[:1] == [r["id"]] else "counterexample" for r in rows
    }
    if stale:
        why = (
            f"read {stale[0]} is certainly stale: op {stale[1]} overwrote every op that could "
            "have written the value it returned, before the read was called"
        )
    else:
        why = (
            "these operations alone have no linearization, and they come from the failing key "
            "by changes that cannot make a linearizable history fail (a cut in time, reads and "
            "unobserved writes dropped)"
            + ("" if cex.get("complete", True) else "; shrinking stopped at its time limit")
        )
    head = (
        f"<p>{len(rows)} of the {cex.get('of_ops')} operations of key "
        f"<code>{_ESC(repr(cex.get('key')))}</code>: {_ESC(why)}. "
        "<code>faultline verify</code> re-checks this.</p>"
    )
    if not rows:
        return head, 0
    return head + f'<div class="scroll">{_svg(rows, kinds, {}, "cex-svg")}</div>', len(rows)


def linearizability_svg(data: RunData, failure: dict[str, Any]) -> tuple[str, dict[str, int]]:
    """The failing partition drawing (HTML with inline SVG) and its counts."""
    rows = _op_rows(data, failure)
    prefix = [int(i) for i in failure.get("linearized_prefix") or []]
    order = {op_id: n + 1 for n, op_id in enumerate(prefix)}
    kinds = _classify(rows, failure)
    drawn = [r for r in rows if r["id"] in kinds]
    counts = {
        "prefix": len(prefix),
        "unplaceable": sum(1 for k in kinds.values() if k == "unplaceable"),
        "concurrent": sum(1 for k in kinds.values() if k == "concurrent"),
        "drawn": len(drawn),
        "partition_ops": len(rows),
    }
    if not drawn:
        return "<p>The failing partition has no operations to draw.</p>", counts
    cut = counts["partition_ops"] - counts["drawn"]
    head = (
        f"<p>Key <code>{_ESC(repr(failure.get('key')))}</code>: {counts['partition_ops']} "
        f"operations, longest linearizable prefix {counts['prefix']} (last "
        f"{min(PREFIX_TAIL, counts['prefix'])} drawn), {counts['concurrent']} concurrent with "
        f"the unplaceable operation. {cut} other operations of the partition are not drawn."
        '</p><p class="legend"><span class="sw prefix"></span>linearized prefix '
        '<span class="sw unplaceable"></span>cannot be placed <span class="sw concurrent">'
        "</span>concurrent</p>"
    )
    body = f'<div class="scroll">{_svg(drawn, kinds, order)}</div>'
    return head + body + _states_html(failure), counts


def _states_html(failure: dict[str, Any]) -> str:
    items = []
    for u in failure.get("unplaceable") or []:
        op = u.get("op") or {}
        states = ", ".join(_ESC(json.dumps(s)) for s in u.get("states_before") or [])
        more = " (truncated)" if u.get("states_truncated") else ""
        items.append(
            f"<li>op {op.get('id')} ({_ESC(str(op.get('f')))} "
            f"{_ESC(json.dumps(op.get('input')))} → {_ESC(json.dumps(op.get('output')))})"
            f": model states before it: <code>{states or 'none'}</code>{more}</li>"
        )
    return f'<ul id="lin-states">{"".join(items)}</ul>'


def _cell(item: dict[str, Any]) -> str:
    rev = item.get("revision")
    head = f'<div class="rev">revision {rev}</div>' if rev is not None else ""
    body = json.dumps(item, indent=1, default=str, sort_keys=True)
    return f'<td class="ev">{head}<pre>{_ESC(body)}</pre></td>'


def anomalies_html(data: RunData) -> tuple[str, int]:
    """Each checker's anomalies with their events or ops side by side; (html, count)."""
    by_index = data.op_by_index()
    blocks, total = [], 0
    for name, result in sorted((data.results or {}).get("checkers", {}).items()):
        anomalies = result.get("anomalies") or []
        if name == "linearizable" or not anomalies:
            continue
        total += len(anomalies)
        rows = []
        for a in anomalies[:MAX_ANOMALIES]:
            items = list(a.get("events") or [])
            for i in a.get("ops") or []:
                op = by_index.get(i)
                if op is not None:
                    items.append(
                        {
                            "op": i,
                            "f": op.f,
                            "key": op.key,
                            "type": op.type,
                            "value": op.value,
                            "result": op.result,
                            "revision": op.revision,
                        }
                    )
            revs = a.get("revisions") or []
            for item, rev in zip(items, revs, strict=False):
                if item.get("revision") is None:
                    item["revision"] = rev
            cells = "".join(_cell(item) for item in items) or "<td>(no events)</td>"
            rows.append(
                f'<tr class="anomaly" data-checker="{_ESC(name)}"><th>'
                f"{_ESC(str(a.get('kind')))}<br><small>{_ESC(str(a.get('message')))}"
                f"</small></th>{cells}</tr>"
            )
        more = len(anomalies) - MAX_ANOMALIES
        tail = f"<p>{more} more not shown.</p>" if more > 0 else ""
        blocks.append(
            f"<h3>{_ESC(name)}: {len(anomalies)} anomalies</h3>"
            f'<div class="scroll"><table class="side">{"".join(rows)}</table></div>{tail}'
        )
    return "".join(blocks), total
