"""`report.html`: one self-contained page per run.

The page embeds plotly's JS once (no network needed: it opens from disk)
and the figures' JSON; the linearizability drawing and the anomaly tables
are plain HTML and inline SVG. Sections, top to bottom: one sentence
saying what happened (reports.summary), seed and replay command, plan and
the system under test with its version, verdicts (each checker's, with
its error); the one timeline figure (reports.timeline: faults, operations,
Raft, node and rebalance lanes on one time axis); latency and throughput
with the same bands, its x range linked to the timeline's; the
linearizability failure; other anomalies. Elements carry ids and
`data-*` counts so tests (and scripts) can read the page.
"""

from __future__ import annotations

import html
import json
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from reports import figures, timeline, violation
from reports.data import RunData, anomaly_times, load_run_data, validity_label
from reports.summary import summary_html

_ESC = html.escape
_plotly_js: str | None = None


def plotly_js() -> str:
    """plotly.js, read once per process (it is ~4.5 MB)."""
    global _plotly_js
    if _plotly_js is None:
        from plotly.offline import get_plotlyjs

        _plotly_js = get_plotlyjs()
    return _plotly_js


def ember_version(plan: dict[str, Any]) -> str:
    """The plan's recorded ember version, else the installed faultline's."""
    options = plan.get("options")
    if isinstance(options, dict) and options.get("ember_version"):
        rev = options.get("git_rev")
        return f"{options['ember_version']} ({rev})" if rev else str(options["ember_version"])
    settings = plan.get("db_settings")  # older runs and synthetic ones
    if isinstance(settings, dict) and settings.get("version"):
        return str(settings["version"])
    try:
        return f"{metadata.version('faultline')} (installed; not recorded by the run)"
    except metadata.PackageNotFoundError:
        return "unknown"


def system_version(plan: dict[str, Any]) -> str:
    """ "<db> <version>": the system under test, as its registry entry labels it."""
    from harness.dbs.registry import SYSTEMS

    name = str(plan.get("db") or "ember")  # runs from before `db` existed were ember's
    system = SYSTEMS.get(name)
    return system.version(plan) if system is not None else f"{name} (not a known system)"


def _json(value: Any) -> str:
    # "</" would end the <script> element early.
    return json.dumps(value, separators=(",", ":"), default=str).replace("</", "<\\/")


def _plot(div_id: str, fig: dict[str, Any], **data_attrs: Any) -> str:
    attrs = "".join(f' data-{k.replace("_", "-")}="{_ESC(str(v))}"' for k, v in data_attrs.items())
    return (
        f'<div id="{div_id}" class="plot"{attrs}></div><script>Plotly.newPlot('
        f'"{div_id}",{_json(fig["data"])},{_json(fig["layout"])},'
        '{"responsive":true,"displaylogo":false});</script>'
    )


def _plan_summary(plan: dict[str, Any]) -> str:
    def joined(value: Any) -> str:
        return ",".join(map(str, value)) if isinstance(value, list | tuple) else str(value)

    fields = [("backend", "backend"), ("nodes", "nodes"), ("workload", "workload"),
              ("nemesis", "nemesis"), ("concurrency", "concurrency"),
              ("time_limit_s", "time limit s"), ("rate_hz", "rate Hz")]  # fmt: skip
    return " · ".join(f"{label} {joined(plan[k])}" for k, label in fields if k in plan)


def header_html(data: RunData) -> str:
    """Verdicts, seed, replay command, plan parameters and the system's version."""
    results = data.results or {}
    overall = validity_label(results.get("valid")) if results else "unchecked"
    rows = []
    for name, r in sorted(results.get("checkers", {}).items()):
        v = validity_label(r.get("valid"))
        note = r.get("error") or f"{len(r.get('anomalies') or [])} anomalies"
        rows.append(
            f'<tr class="checker" data-checker="{_ESC(name)}" data-valid="{v}">'
            f'<td>{_ESC(name)}</td><td class="v {v}">{v}</td><td>{_ESC(note)}</td></tr>'
        )
    reasons = "".join(f"<li>{_ESC(r)}</li>" for r in results.get("reasons") or [])
    plan = data.plan
    params = "".join(
        f"<tr><th>{_ESC(k)}</th><td><code>{_ESC(json.dumps(v, default=str))}</code></td></tr>"
        for k, v in plan.items()
    )
    return f"""
<header><h1>{_ESC(str(plan.get("name") or data.run.test_name))}
<span id="verdict" class="v {overall}" data-valid="{overall}">{overall}</span></h1>
{summary_html(data)}
<p>seed <b id="seed">{_ESC(str(plan.get("seed", results.get("seed", "?"))))}</b> ·
started {_ESC(data.run.started)} · {len(data.client_ops)} client operations ·
<span id="system">{_ESC(system_version(plan))}</span></p>
<p id="plan-summary">{_ESC(_plan_summary(plan))}</p>
<p>replay: <code id="replay">faultline replay {_ESC(str(data.run.path))}</code></p></header>
<section><h2>Verdicts</h2><table id="verdicts">{"".join(rows)}</table>
{f"<ul>{reasons}</ul>" if reasons else ""}
<details><summary>Plan parameters</summary><table id="plan">{params}</table></details></section>"""


def _listed(items: list[str], limit: int = 12) -> str:
    more = len(items) - limit
    return ", ".join(items[:limit]) + (f" and {more} more" if more > 0 else "")


def _timeline_section(data: RunData) -> str:
    """The one figure (reports.timeline): faults, operations, Raft, nodes and
    rebalance on one time axis, with a note on what it left out."""
    placed = anomaly_times(data)
    anchors = [t for t, _ in placed[:1]]
    for w in data.faults:
        anchors += [w["start"], w["end"]]
    ops, windows = figures.select_ops(data, anchors)
    fig, drawn = timeline.one_figure(data, ops, placed[0] if placed else None)
    total = len(data.client_ops)
    if len(ops) < total:
        note = (
            f"Aggregated: the timeline draws {len(ops)} of {total} operations, in windows "
            f"around the first anomaly and each fault's start and end ({_listed(windows)})."
            " Latency and throughput below cover every operation."
        )
    elif total == 0:
        note = "No client operations: the history holds only fault and membership operations."
    else:
        note = f"All {total} operations drawn."
    if not data.audit:
        note += " No audit events: no Raft, node or rebalance lanes."
    if data.unapplied:
        ticks = [f"{u['f']} at {u['time'] / 1e9:.2f} s ({u['reason']})" for u in data.unapplied]
        note += f" Faults not applied (dotted, marked ✕, never shaded): {_listed(ticks)}."
    counts = {"ok": 0, "fail": 0, "info": 0}
    for op in ops:
        counts[op.type] += 1
    return (
        f'<section><h2>Timeline</h2><p class="note" id="timeline-note">{_ESC(note)} '
        "Shaded across every lane: faults (red), membership changes (blue); dotted: faults "
        "not applied. One time axis: drag to zoom (every lane follows, and so does the latency "
        "plot), double-click to reset; hover for details.</p>"
        + _plot(
            "timeline",
            fig,
            ops_drawn=len(ops),
            ops_total=total,
            ok=counts["ok"],
            fail=counts["fail"],
            info=counts["info"],
            bands=len(data.faults) + len(data.changes),
            unapplied=len(data.unapplied),
            groups=drawn["groups"],
            writes=drawn["writes"],
        )
        + "</section>"
    )


def _latency_section(data: RunData) -> str:
    fig, bucket_s = figures.latency_throughput(data)
    return (
        f'<section><h2>Latency and throughput</h2><p class="note">Aggregated into {bucket_s:g}'
        " s buckets: stacked completions per second by outcome, p50 and p99 latency of ok"
        " operations.</p>" + _plot("latency", fig, bucket_s=bucket_s) + "</section>"
    )


# The latency plot follows the timeline's x range and back; the summary's
# anomaly link zooms the timeline to the anomaly's moment.
_LINK_JS = """<script>(function(){
const main=document.getElementById('timeline'),lat=document.getElementById('latency');
function follow(src,dst){src.on('plotly_relayout',function(){
 if(!dst||dst.dataset.syncing)return;const a=src.layout.xaxis;
 const r=a.autorange?{'xaxis.autorange':true}:{'xaxis.range':a.range.slice()};
 src.dataset.syncing='1';Plotly.relayout(dst,r).then(function(){delete src.dataset.syncing;});});}
if(main&&lat){follow(main,lat);follow(lat,main);}
const link=document.getElementById('anomaly-link');
if(link&&main)link.addEventListener('click',function(){const t=parseFloat(link.dataset.t);
 const r=main.layout.xaxis.range||[0,t*2],w=Math.max(1,(r[1]-r[0])/10);
 Plotly.relayout(main,{'xaxis.range':[t-w,t+w]});});
})();</script>"""


def _violation_sections(data: RunData) -> str:
    out = []
    lin = data.checker("linearizable")
    failure = (lin or {}).get("figures", {}).get("failure") if lin else None
    if lin is not None and lin.get("valid") is False and isinstance(failure, dict):
        body, c = violation.linearizability_svg(data, failure)
        out.append(
            f'<section id="violation" data-prefix="{c["prefix"]}" data-unplaceable='
            f'"{c["unplaceable"]}" data-concurrent="{c["concurrent"]}"><h2>'
            f"Linearizability violation</h2>{body}</section>"
        )
    cex = (lin or {}).get("figures", {}).get("counterexample") if lin else None
    if lin is not None and lin.get("valid") is False and isinstance(cex, dict):
        body, n = violation.counterexample_html(cex)
        out.append(
            f'<section id="counterexample" data-ops="{n}"><h2>Minimal counterexample</h2>'
            f"{body}</section>"
        )
    body, total = violation.anomalies_html(data)
    if total:
        out.append(
            f'<section id="anomalies" data-count="{total}"><h2>Anomalies</h2>{body}</section>'
        )
    return "".join(out)


_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
h1 .v{font-size:.6em;vertical-align:middle;padding:.2em .6em;border-radius:.4em}
.v.valid{background:#c7e9c0}.v.invalid{background:#fcbba1}.v.unknown,.v.unchecked{background:#ffe08a}
table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:.2em .5em;text-align:left;
vertical-align:top}.note{color:#555;font-size:.9em}.scroll{overflow-x:auto}
pre{margin:0;font-size:11px;max-width:420px;white-space:pre-wrap}.rev{font-weight:bold}
.sw{display:inline-block;width:1em;height:.8em;margin:0 .3em}.sw.prefix{background:#2ca02c}
.sw.unplaceable{background:#d62728}.sw.concurrent{background:#ff7f0e}
"""


def _coverage_section(data: RunData) -> str:
    """The applied faults as coverage cells (kind x phase x role; harness.coverage),
    and what a swarm or shrink left switched on: what this run tested."""
    from harness.coverage import cells_of_history

    try:
        cells = cells_of_history(data.run.history)
    except OSError:
        return ""
    counts: dict[tuple[str, str, str], int] = {}
    for cell in cells:
        counts[cell] = counts.get(cell, 0) + 1
    rows = "".join(f"<tr><td>{_ESC(k)}</td><td>{_ESC(p)}</td><td>{_ESC(r)}</td><td>{n}</td></tr>"
                   for (k, p, r), n in sorted(counts.items()))  # fmt: skip
    opts = data.plan.get("options") or {}
    chosen = [f"{label}: {', '.join(map(str, opts[key]))}" for key, label in (
        ("nemesis_kinds", "fault kinds"), ("nemesis_phases", "phases"),
        ("nemesis_targets", "roles"), ("nemesis_keep", "faults kept (shrunk)"),
    ) if isinstance(opts.get(key), list)]  # fmt: skip
    note = "; ".join(chosen) or "the plan's full nemesis"
    body = (f'<table id="coverage"><tr><th>kind</th><th>phase</th><th>role</th><th>applied</th>'
            f"</tr>{rows}</table>" if rows else "<p>No fault was applied.</p>")  # fmt: skip
    summary = f"{len(cells)} applied faults in {len(counts)} kind x phase x role cells"
    return (f'<section><h2>Fault coverage</h2><p class="note">{summary} ({_ESC(note)}).</p>'
            f"{body}</section>")  # fmt: skip


def render_html(data: RunData) -> str:
    """The whole page as a string."""
    title = f"{data.plan.get('name') or data.run.test_name} seed {data.plan.get('seed', '?')}"
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{_ESC(title)}'
        f"</title><style>{_CSS}</style><script>{plotly_js()}</script></head><body>"
        + header_html(data)
        + _timeline_section(data)
        + _latency_section(data)
        + _LINK_JS
        + _violation_sections(data)
        + _coverage_section(data)
        + f'<footer class="note">generated {time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}'
        "</footer></body></html>"
    )


def write_report(run_path: Path) -> Path:
    """Renders RUN/report.html (atomically) and returns its path."""
    data = load_run_data(run_path)
    out = data.run.report
    tmp = out.with_suffix(".html.tmp")
    tmp.write_text(render_html(data), encoding="utf-8")
    tmp.replace(out)
    return out
