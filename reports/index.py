"""`store/index.html`: every run in a store, filterable and sortable.

One row per run dir (`harness.store.iter_runs`): verdict, test name,
workload, nemesis, the settings a plan changed (`--db-setting`,
`--failpoint`: runs of one test under other timings must not look alike),
seed, duration (the history's last event time, read from the file's tail
so a huge history costs nothing), start date, and a link to its report. A
text box filters rows, a select filters by verdict, and clicking a column
header sorts by it; the page is small vanilla JS with no network access.
"""

from __future__ import annotations

import html
import json
import time
from pathlib import Path
from typing import Any

import msgspec

from harness.store import RunDir, iter_runs
from harness.version import VERSION_LABELS
from reports.data import NS_PER_S, run_start_wall, validity_label

_ESC = html.escape
_COLUMNS = ("verdict", "test", "workload", "nemesis", "settings", "seed", "duration_s",
            "started", "ops")  # fmt: skip


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = msgspec.json.decode(path.read_bytes())
    except (OSError, msgspec.DecodeError):
        return {}
    return value if isinstance(value, dict) else {}


def history_duration_s(path: Path) -> float | None:
    """The `time` of a history's last event, in seconds (reads only the tail)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - 8192))
            tail = fh.read().splitlines()
    except OSError:
        return None
    for line in reversed(tail):
        try:
            event = msgspec.json.decode(line)
        except msgspec.DecodeError:
            continue  # a line cut by the seek, or a torn tail
        if isinstance(event, dict) and isinstance(event.get("time"), int):
            return round(int(event["time"]) / NS_PER_S, 3)
    return None


def run_row(run: RunDir, root: Path) -> dict[str, Any]:
    """One run's row of the index."""
    plan, results = _read_json(run.plan), _read_json(run.results)

    def joined(value: Any) -> str:
        return ",".join(map(str, value)) if isinstance(value, list) else str(value or "")

    def mapping(value: Any) -> dict[str, Any]:
        return value if isinstance(value, dict) else {}

    settings = mapping(plan.get("db_settings"))
    failpoints = mapping(mapping(plan.get("options")).get("failpoints"))
    # Version labels older plans kept in db_settings are no setting of the db.
    changed = [f"{k}={v}" for k, v in sorted(settings.items()) if k not in VERSION_LABELS]
    changed += [f"failpoint {name}" for name in sorted(failpoints)]
    verdict = validity_label(results.get("valid")) if results else "unchecked"
    wall = run_start_wall(run)
    started = run.started if wall is None else _iso(wall)
    report = run.report.relative_to(root).as_posix() if run.report.exists() else None
    return {
        "verdict": verdict,
        "test": str(plan.get("name") or run.test_name),
        "workload": joined(plan.get("workload")),
        "nemesis": joined(plan.get("nemesis")),
        "settings": " ".join(changed),
        "seed": plan.get("seed", results.get("seed")),
        "duration_s": history_duration_s(run.history),
        "started": started,
        "ops": results.get("ops"),
        "report": report,
        "path": run.path.relative_to(root).as_posix(),
    }


def _iso(wall: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(wall))


def _row_html(row: dict[str, Any]) -> str:
    cells = []
    for col in _COLUMNS:
        value = row[col]
        shown = "" if value is None else str(value)
        cls = f' class="v {shown}"' if col == "verdict" else ""
        cells.append(f'<td data-col="{col}" data-sort="{_ESC(shown)}"{cls}>{_ESC(shown)}</td>')
    link = f'<a href="{_ESC(row["report"])}">report</a>' if row["report"] else "<i>no report</i>"
    return (
        f'<tr class="run" data-verdict="{row["verdict"]}">{"".join(cells)}'
        f'<td title="{_ESC(row["path"])}">{link}</td></tr>'
    )


_SCRIPT = """
const rows = () => Array.from(document.querySelectorAll("#runs tbody tr"));
function applyFilter() {
  const text = document.getElementById("filter").value.toLowerCase();
  const verdict = document.getElementById("verdict-filter").value;
  let shown = 0;
  for (const tr of rows()) {
    const ok = (!verdict || tr.dataset.verdict === verdict) &&
      (!text || tr.textContent.toLowerCase().includes(text));
    tr.style.display = ok ? "" : "none";
    if (ok) shown++;
  }
  document.getElementById("shown").textContent = shown;
}
let sortState = {col: null, dir: 1};
function sortBy(col) {
  sortState.dir = sortState.col === col ? -sortState.dir : 1;
  sortState.col = col;
  const body = document.querySelector("#runs tbody");
  const key = tr => tr.querySelector(`td[data-col="${col}"]`).dataset.sort;
  const sorted = rows().sort((a, b) => {
    const x = key(a), y = key(b), nx = parseFloat(x), ny = parseFloat(y);
    const c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
    return c * sortState.dir;
  });
  for (const tr of sorted) body.appendChild(tr);
  for (const th of document.querySelectorAll("#runs th[data-col]"))
    th.dataset.sorted = th.dataset.col === col ? (sortState.dir > 0 ? "asc" : "desc") : "";
}
document.getElementById("filter").addEventListener("input", applyFilter);
document.getElementById("verdict-filter").addEventListener("change", applyFilter);
for (const th of document.querySelectorAll("#runs th[data-col]"))
  th.addEventListener("click", () => sortBy(th.dataset.col));
"""

_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em}table{border-collapse:collapse}
td,th{border:1px solid #ddd;padding:.2em .6em}th[data-col]{cursor:pointer;background:#f4f4f4}
th[data-sorted=asc]::after{content:" ▲"}th[data-sorted=desc]::after{content:" ▼"}
.v.valid{background:#c7e9c0}.v.invalid{background:#fcbba1}.v.unknown,.v.unchecked{background:#ffe08a}
"""


def render_index(root: Path) -> tuple[str, list[dict[str, Any]]]:
    """The index page and its rows, newest run first."""
    rows = sorted((run_row(run, root) for run in iter_runs(root)),
                  key=lambda r: (r["started"], r["path"]), reverse=True)  # fmt: skip
    counts = {v: sum(1 for r in rows if r["verdict"] == v) for v in ("valid", "invalid", "unknown")}
    head = "".join(f'<th data-col="{c}">{c.replace("_", " ")}</th>' for c in _COLUMNS)
    options = "".join(f'<option value="{v}">{v} ({n})</option>' for v, n in counts.items())
    rows_json = json.dumps(rows).replace("</", "<\\/")  # "</" would end the script
    page = f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>faultline runs</title><style>{_CSS}</style></head><body>
<h1>faultline runs</h1>
<p><input id="filter" placeholder="filter (any column)" size="30">
<select id="verdict-filter"><option value="">all verdicts</option>{options}</select>
showing <span id="shown">{len(rows)}</span> of <span id="total">{len(rows)}</span> runs</p>
<table id="runs"><thead><tr>{head}<th>report</th></tr></thead>
<tbody>{"".join(_row_html(r) for r in rows)}</tbody></table>
<script id="rows-json" type="application/json">{rows_json}</script>
<script>{_SCRIPT}</script></body></html>"""
    return page, rows


def write_index(root: Path) -> Path:
    """Writes root/index.html (atomically) and returns its path."""
    if not root.is_dir():
        raise FileNotFoundError(f"no store at {root}")
    page, _ = render_index(root)
    out = root / "index.html"
    tmp = root / ".index.html.tmp"
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(out)
    return out
