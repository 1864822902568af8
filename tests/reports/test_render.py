"""report.html, the store index, `faultline report` and `faultline serve` (no browser)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import msgspec
import pytest

from harness import cli
from harness.synthetic import make_run
from reports import figures
from reports.data import ReportError, load_run_data
from reports.index import render_index, write_index
from reports.render import plotly_js, render_html, write_report
from reports.serve import make_server, url_of
from tests.checkers.helpers import HistoryBuilder, write_run
from workloads.revisions import DECLARED


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with one valid and one invalid synthetic run."""
    root = tmp_path_factory.mktemp("store")
    make_run(root, seed=1, ops=600, started=1.7e9)
    make_run(root, seed=2, ops=600, valid=False, started=1.7e9 + 60)
    return root


def _runs(root: Path) -> list[Path]:
    return sorted(p for p in (root / "synthetic").iterdir() if p.is_dir())


def _attr(page: str, element_id: str, name: str) -> str:
    match = re.search(rf'id="{element_id}"[^>]*\bdata-{name}="([^"]*)"', page)
    assert match is not None, f"#{element_id} has no data-{name}"
    return match.group(1)


def test_report_is_self_contained(store: Path) -> None:
    """The page embeds plotly once and loads nothing from the network."""
    page = write_report(_runs(store)[0]).read_text()
    assert page.count(plotly_js()[:2000]) == 1
    assert not re.search(r'<(script|link|img)[^>]+(src|href)="https?:', page)
    assert page.count("Plotly.newPlot(") == 2  # the one timeline figure, latency


def test_header_names_verdicts_seed_and_replay(store: Path) -> None:
    """One verdict row per checker, the seed and `faultline replay RUN`."""
    run = _runs(store)[1]
    results = msgspec.json.decode((run / "results.json").read_bytes())
    page = render_html(load_run_data(run))
    assert page.count('class="checker"') == len(results["checkers"])
    assert 'data-checker="linearizable" data-valid="invalid"' in page
    assert '<b id="seed">2</b>' in page
    assert f"faultline replay {run}" in page


def test_invalid_run_draws_the_failing_partition(store: Path) -> None:
    """The planted stale read is the one unplaceable op, drawn in red."""
    run = _runs(store)[1]
    results = msgspec.json.decode((run / "results.json").read_bytes())
    failure = results["checkers"]["linearizable"]["figures"]["failure"]
    page = render_html(load_run_data(run))
    assert _attr(page, "violation", "unplaceable") == "1"
    assert _attr(page, "violation", "prefix") == str(len(failure["linearized_prefix"]))
    bad_id = failure["unplaceable"][0]["op"]["id"]
    assert f'class="lin-op lin-unplaceable" data-op="{bad_id}"' in page


def test_invalid_run_draws_its_minimal_counterexample(store: Path) -> None:
    """The counterexample's few ops are drawn, the impossible read in red."""
    run = _runs(store)[1]
    results = msgspec.json.decode((run / "results.json").read_bytes())
    cex = results["checkers"]["linearizable"]["figures"]["counterexample"]
    page = render_html(load_run_data(run))
    assert _attr(page, "counterexample", "ops") == str(len(cex["ops"]))
    assert 'id="cex-svg"' in page
    assert "faultline verify" in page


def test_large_history_is_windowed_and_says_so(tmp_path: Path) -> None:
    """Past the budget the timeline draws windows and the page names what it left out."""
    run = make_run(tmp_path, seed=3, ops=figures.TIMELINE_BUDGET * 2, valid=False)
    page = render_html(load_run_data(run.path))
    drawn = int(_attr(page, "timeline", "ops-drawn"))
    assert 0 < drawn <= figures.TIMELINE_BUDGET
    assert _attr(page, "timeline", "ops-total") == str(figures.TIMELINE_BUDGET * 2)
    assert "Aggregated: the timeline draws" in page


def test_revision_anomaly_shows_ops_side_by_side(tmp_path: Path) -> None:
    """A stale revision read is shown as both operations with their revisions."""
    h = HistoryBuilder()
    h.op(0, "put", key="a", value=1, result=5)
    h.op(1, "get", key="a", result={"value": 1, "revision": 3})
    plan = {"name": "t", "seed": 1, "revisions": {"ops": DECLARED["metastore"]}}
    run = write_run(tmp_path / "t" / "20260101T000000-0", h.lines(), plan)
    assert cli.main(["check", str(run), "--checker", "revisions"]) == 1
    page = render_html(load_run_data(run))
    assert _attr(page, "anomalies", "count") == "1"
    cells = re.findall(r'<div class="rev">revision (\d+)</div>', page)
    assert cells == ["5", "3"]


def test_missing_history_is_one_clear_error(tmp_path: Path) -> None:
    """A dir without history.jsonl raises ReportError naming it."""
    with pytest.raises(ReportError, match=r"has no history\.jsonl"):
        load_run_data(tmp_path)


def test_index_lists_every_run_newest_first(store: Path) -> None:
    """One row per run with verdict, seed and a link to its report."""
    for run in _runs(store):
        write_report(run)
    page, rows = render_index(store)
    assert [r["seed"] for r in rows] == [2, 1]
    assert [r["verdict"] for r in rows] == ["invalid", "valid"]
    assert all(r["report"] and (store / r["report"]).is_file() for r in rows)
    assert page.count('<tr class="run"') == 2
    assert rows[0]["duration_s"] == pytest.approx(20, abs=3)


def test_report_command_writes_report_and_index(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`faultline report RUN --store S` writes both files and exits 0."""
    run = _runs(store)[0]
    (run / "report.html").unlink(missing_ok=True)
    assert cli.main(["report", str(run), "--store", str(store)]) == 0
    assert (run / "report.html").is_file()
    assert (store / "index.html").is_file()


def test_report_command_rejects_a_non_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A path without a history is one line on stderr and exit 2."""
    assert cli.main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "no history.jsonl" in err


def test_serve_binds_localhost_and_serves_the_store(store: Path) -> None:
    """The server listens on 127.0.0.1 and returns the index and a report."""
    write_index(store)
    server = make_server(store, 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        assert server.server_address[0] == "127.0.0.1"
        with urllib.request.urlopen(url_of(server) + "index.html", timeout=30) as resp:
            index = resp.read().decode()
        link = re.search(r'<a href="([^"]+)">report</a>', index)
        assert link is not None
        with urllib.request.urlopen(url_of(server) + link.group(1), timeout=30) as resp:
            assert b"Plotly.newPlot(" in resp.read()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)


def test_serve_command_rejects_a_missing_store(tmp_path: Path) -> None:
    """`faultline serve --store nowhere` exits 2 without serving."""
    assert cli.main(["serve", "--store", str(tmp_path / "nowhere"), "--port", "0"]) == 2


def test_audit_events_are_placed_on_the_history_clock(tmp_path: Path) -> None:
    """Unix `wall` times map to seconds since the run dir's stamp; a virtual clock uses mono_ns."""
    run = make_run(tmp_path, seed=4, ops=300, started=1_700_000_000)
    data = load_run_data(run.path)
    change = next(ev for ev in data.audit["n1"] if ev["kind"] == "change-stage")
    assert data.audit_ns(change) == pytest.approx(change["mono_ns"], abs=1_000)
    sim = write_run(
        tmp_path / "sim" / "20260101T000000-0",
        HistoryBuilder().op(0, "put", key="a", value=1).lines(),
        audit={"n1": [{"kind": "term", "group": "g", "term": 1, "mono_ns": 77, "wall": 0.5}]},
    )
    sim_data = load_run_data(sim)
    assert sim_data.audit_ns(sim_data.audit["n1"][0]) == 77


def test_serve_command_serves_until_stopped(store: Path) -> None:
    """`faultline serve --port 0` prints its URL, serves the index, and stops on SIGINT."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from harness.cli import main; sys.exit(main())",
         "serve", "--store", str(store), "--port", "0"],
        stderr=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        match = re.search(r"(http://127\.0\.0\.1:\d+/)index\.html", line)
        assert match is not None, line
        with urllib.request.urlopen(match.group(1) + "index.html", timeout=30) as resp:
            assert b'id="runs"' in resp.read()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def test_large_history_without_faults_draws_the_start(tmp_path: Path) -> None:
    """With no fault or anomaly to centre on, the timeline draws the budget from the start."""
    ops = figures.TIMELINE_BUDGET + 500
    run = make_run(tmp_path, seed=6, ops=ops, faults=False, changes=False, rebalance=False)
    data = load_run_data(run.path)
    drawn, windows = figures.select_ops(data, [])
    assert len(drawn) == figures.TIMELINE_BUDGET
    assert drawn[0].invoke_time == min(op.invoke_time for op in data.client_ops)
    assert len(windows) == 1


def test_raft_anomaly_shows_its_events_side_by_side(tmp_path: Path) -> None:
    """Two leaders in one term: the anomaly row holds both nodes' role events."""
    audit = {
        node: [{"kind": "role", "group": "g1", "role": "leader", "term": 3, "mono_ns": 5,
                "node": node}]
        for node in ("n1", "n2")
    }  # fmt: skip
    h = HistoryBuilder().op(0, "put", key="a", value=1)
    run = write_run(tmp_path / "t" / "20260101T000000-0", h.lines(), {"name": "t"}, audit)
    assert cli.main(["check", str(run), "--checker", "raft"]) == 1
    page = render_html(load_run_data(run))
    row = re.search(r'<tr class="anomaly" data-checker="raft">.*?</tr>', page, re.S)
    assert row is not None
    assert "two-leaders" in row.group(0)
    assert row.group(0).count('<td class="ev">') == 2


def test_fault_coverage_counts_applied_faults_only(tmp_path: Path) -> None:
    """The coverage table lists each applied fault's kind x phase x role cell;
    a fault that completed info (nothing applied) is not drawn as coverage."""
    make_run(tmp_path, seed=3, ops=100, started=1.7e9)
    run = _runs(tmp_path)[0]
    trigger = {"stage": "joint", "group": "part-1"}
    kill = {"kind": "kill", "target": "primary", "trigger": trigger}
    pause = {"kind": "pause", "target": "meta-leader"}
    lines = [
        {"index": 9001, "time": 10**12, "process": "nemesis", "type": "invoke", "f": "kill",
         "value": kill},
        {"index": 9002, "time": 10**12 + 1, "process": "nemesis", "type": "ok", "f": "kill",
         "value": kill},
        {"index": 9003, "time": 10**12 + 2, "process": "nemesis", "type": "invoke", "f": "pause",
         "value": pause},
        {"index": 9004, "time": 10**12 + 3, "process": "nemesis", "type": "info", "f": "pause",
         "value": {**pause, "unresolved": "nobody holds it"}},
    ]  # fmt: skip
    with (run / "history.jsonl").open("ab") as fh:
        for line in lines:
            fh.write(msgspec.json.encode(line) + b"\n")
    page = render_html(load_run_data(run))
    table = page[page.index('id="coverage"') :]
    assert "<td>kill</td><td>joint</td><td>primary</td><td>1</td>" in table
    assert "meta-leader" not in table
    assert "1 applied faults in 1 kind x phase x role cells" in page


def test_index_names_the_settings_a_plan_changed(tmp_path: Path) -> None:
    """Two runs of one test, one with a shorter election timeout and a planted
    failpoint: the index tells them apart (it showed the same test, workload
    and nemesis for both)."""
    run = make_run(tmp_path, seed=3, ops=300)
    plan = msgspec.json.decode(run.plan.read_bytes())
    plan["db_settings"] = {"election_timeout_ticks": 3, "compact_every": 50, "version": "1.0"}
    plan["options"]["failpoints"] = {"raft.skip-catchup": {}}
    run.plan.write_bytes(msgspec.json.encode(plan))
    page, rows = render_index(tmp_path)
    assert rows[0]["settings"] == (
        "compact_every=50 election_timeout_ticks=3 failpoint raft.skip-catchup"
    )
    assert '<td data-col="settings"' in page
