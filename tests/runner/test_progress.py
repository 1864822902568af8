"""The live progress display: what a run shows while it goes."""

from __future__ import annotations

import io

from rich.console import Console

from harness.progress import Progress, RunStatus


def _status() -> RunStatus:
    return RunStatus(stage="running", ok=3, fail=1, info=2, faults=["partition"],
                     stages={"part-1": "joint", "part-2": "none"}, changes={"ok": 4})  # fmt: skip


def test_the_plain_line_shows_outcomes_faults_and_changing_groups() -> None:
    """ok / fail / unknown counts, active faults, and only groups mid-change."""
    line = _status().line()
    for needle in ("[running]", "ok 3", "fail 1", "unknown 2", "partition", "part-1=joint"):
        assert needle in line
    assert "part-2" not in line


def test_the_live_panel_renders_on_a_terminal() -> None:
    """On a terminal a rich panel shows the same figures."""
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    with Progress(_status, console=console) as progress:
        progress.log("a note")
    text = out.getvalue()
    for needle in ("a note", "active faults", "partition", "part-1=joint", "ok=4"):
        assert needle in text


def test_disabled_progress_prints_nothing() -> None:
    """--no-progress: no panel, no lines."""
    out = io.StringIO()
    with Progress(_status, console=Console(file=out), enabled=False) as progress:
        progress.log("hidden")
    assert out.getvalue() == ""


def test_during_setup_the_line_says_what_setup_is_doing() -> None:
    """While the cluster comes up the line names the step, not `ops ok 0 fail 0`."""
    status = RunStatus(stage="image")
    status.doing_now("building deps layer faultline-deps:6127dfbdd0e0")
    line = status.line()
    assert "[image]" in line
    assert "building deps layer faultline-deps:6127dfbdd0e0" in line
    assert "ops ok" not in line
    out = io.StringIO()
    with Progress(lambda: status, console=Console(file=out, force_terminal=True, width=120)):
        pass
    assert "building deps layer" in out.getvalue()
    status.doing_now("")
    assert "ops ok 0" in status.line()
