"""nightly.html: the analysis tables as one self-contained page.

The tables are small (one row per group), so this works on pandas frames.
plotly.js is inlined once, in the first plot, so the page opens offline;
every table is escaped by pandas.
"""

from __future__ import annotations

import html
import time
from pathlib import Path
from typing import Any

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
h1 { margin-bottom: 0; } .meta { color: #666; margin-top: .3em; }
table { border-collapse: collapse; margin: .5em 0 1.5em; font-size: 90%; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: right; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
.none { color: #888; font-style: italic; }
"""


def _label(df: Any) -> Any:
    """A cell's name: db and backend, then workload / nemesis (pipeline/analyze.py CELL)."""
    return (df["db"].astype(str) + " " + df["backend"].astype(str) + ": "
            + df["workload"].astype(str) + " / " + df["nemesis"].astype(str))  # fmt: skip


def _figures(tables: dict[str, Any]) -> list[tuple[str, Any]]:
    """(title, plotly figure) for each plot; a plot with no data is left out."""
    import plotly.express as px

    figs: list[tuple[str, Any]] = []
    rates = tables["failure_rates"]
    if len(rates):
        figs.append(("Failure rate by db backend: workload / nemesis, and version", px.bar(
            rates.assign(group=_label(rates)), x="group", y="failure_rate", color="version",
            barmode="group", hover_data=["runs", "invalid", "unknown", "crashed"],
            range_y=[0, 1],
        )))  # fmt: skip
    cov = tables["coverage"]
    if len(cov):
        grid = cov.pivot_table(index="fault", columns="phase", values="faults", fill_value=0)
        figs.append(("Coverage: faults per fault kind x protocol phase (0 = never exercised)",
                     px.imshow(grid, text_auto=True, color_continuous_scale="Blues",
                               aspect="auto")))  # fmt: skip
    lat = tables["latency"]
    if len(lat):
        figs.append(("Client latency p99 (ms) by phase", px.bar(
            lat.assign(group=_label(lat) + " @" + lat["version"].astype(str)), x="group",
            y="p99_ms", color="phase", barmode="group", hover_data=["ops", "p50_ms", "p90_ms"],
        )))  # fmt: skip
    unav = tables["unavailability"]
    if len(unav):
        figs.append(("Unavailability per membership change (ms)", px.bar(
            unav.assign(group=_label(unav) + " @" + unav["version"].astype(str)), x="group",
            y=["mean_unavailable_ms", "max_unavailable_ms"], barmode="group",
        )))  # fmt: skip
    trend = tables["trends"]
    if len(trend):
        trend = trend.sort_values("date").assign(group=_label(trend))
        figs.append(("Failure rate over nights", px.line(
            trend, x="date", y="failure_rate", color="group", markers=True,
            hover_data=["runs", "p99_ms"],
        )))  # fmt: skip
    return figs


def _table(title: str, df: Any) -> str:
    body = (
        df.to_html(index=False, escape=True, float_format=lambda v: f"{v:.3f}", na_rep="")
        if len(df)
        else '<p class="none">none</p>'
    )
    return f"<h2>{html.escape(title)}</h2>\n{body}"


def render(tables: dict[str, Any], *, elapsed_s: float = 0.0) -> str:
    """The page's HTML (see the module doc)."""
    parts = []
    for i, (title, fig) in enumerate(_figures(tables)):
        fig.update_layout(margin={"t": 30}, height=420)
        # Fixed div ids: the same tables make the same page (plotly draws random ones).
        plot = fig.to_html(full_html=False, include_plotlyjs=(i == 0), div_id=f"plot-{i}")
        parts.append(f"<h2>{html.escape(title)}</h2>\n{plot}")
    never = tables["coverage"]
    never = never[~never["exercised"]] if len(never) else never
    parts += [
        _table("Flaky seeds (same plan and build, different verdicts)", tables["flaky_seeds"]),
        _table(
            "Verdicts that flipped between builds (version@git revision)", tables["verdict_flips"]
        ),
        _table(
            "Fault x phase combinations never exercised",
            never[["fault", "phase"]] if len(never) else never,
        ),
        _table("Anomaly kinds", tables["anomaly_kinds"]),
        _table("Runs and verdicts", tables["failure_rates"]),
        _table("Latency by phase (ms)", tables["latency"]),
        _table("Membership changes", tables["unavailability"]),
    ]
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    runs = int(tables["failure_rates"]["runs"].sum()) if len(tables["failure_rates"]) else 0
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>faultline nightly</title><style>{_STYLE}</style></head><body>\n"
        f'<h1>faultline nightly</h1><p class="meta">{runs} runs; generated {stamp} '
        f"in {elapsed_s:.1f} s</p>\n" + "\n".join(parts) + "\n</body></html>\n"
    )


def write_html(tables: dict[str, Any], path: Path, *, elapsed_s: float = 0.0) -> Path:
    """Writes nightly.html atomically (a reader never sees half a page)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".html.tmp")
    tmp.write_text(render(tables, elapsed_s=elapsed_s), encoding="utf-8")
    tmp.replace(path)
    return path
