"""`python -m ember.sim`: output order, summary, exit codes, events, bad flags."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from hypothesis import given

from ember.sim.__main__ import build_parser, config_from_args, main
from ember.sim.runner import SimConfig
from tests.sim.strategies import sim_configs

QUICK = ["--nodes", "3", "--sim-seconds", "1", "--heal-seconds", "10", "--quiet"]


def test_valid_run_prints_seed_first_then_summary_and_exits_0(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A clean run: seed on the first line, each invariant's verdict, exit 0."""
    code = main(["--seed", "11", "--faults", "none", *QUICK])
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "seed 11"
    for word in ("ops proposed", "changes submitted", "faults injected", "one-leader-per-term"):
        assert word in out
    assert "valid (seed 11)" in out
    assert code == 0


def test_violation_prints_replay_command_and_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    """A planted bug: INVALID, the replay command, exit 1."""
    code = main(["--seed", "5", "--bug", "skip-joint", *QUICK, "--sim-seconds", "3"])
    out = capsys.readouterr().out
    assert code == 1
    assert "INVALID (safety)" in out
    assert "replay: python -m ember.sim --seed 5 --nodes 3" in out
    assert "--bug skip-joint" in out


def test_events_dir_gets_one_events_file_per_node_in_the_envelope(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--events-dir writes <node>/events.jsonl with the docs/events.md envelope."""
    main(["--seed", "3", "--events-dir", str(tmp_path), *QUICK])
    capsys.readouterr()
    files = sorted(tmp_path.glob("*/events.jsonl"))
    assert [f.parent.name for f in files] == [f"n{i}" for i in range(1, 7)]
    events = [json.loads(line) for line in files[0].read_text().splitlines()]
    assert events
    for event in events:
        assert {"kind", "node", "mono_ns", "wall"} <= event.keys()
        assert event["node"] == "n1"
        # Node-wide events (`started`, as the node daemon writes) carry no group.
        assert ("group" in event) == (event["kind"] != "started")
    assert any(
        e["kind"] == "role" for f in files for e in map(json.loads, f.read_text().splitlines())
    )


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--nodes", "0"], "--nodes must be at least 1"),
        (["--bug", "nope"], "invalid choice"),
        (["--faults", "bogus"], "unknown fault kind"),
        (["--seed", "x"], "invalid int value"),
        (["--sim-seconds", "-1"], "must be positive"),
        (["--schedule", "1:crash:x:leader"], "bad fault"),
        (["--schedule", "1:melt:5:leader"], "unknown fault kind"),
    ],
)
def test_bad_flags_give_one_clear_message_and_exit_2(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bad input: one line on stderr naming the problem, exit 2, no traceback."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors exit from inside main
        code = exc.code  # type: ignore[assignment]
    err = capsys.readouterr().err
    assert code == 2
    assert needle in err
    assert "Traceback" not in err


def test_audit_checkers_read_simulator_events_and_find_a_clean_run_valid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--events-dir RUN/nodes is the store layout: the audit checkers parse it, clean run valid."""
    from checkers.audit import load_audit
    from checkers.compose import REGISTRY, check

    assert (
        main(["--seed", "2", "--faults", "none", "--events-dir", str(tmp_path / "nodes"), *QUICK])
        == 0
    )
    capsys.readouterr()
    audit = load_audit(tmp_path)
    assert audit is not None
    assert any(e["kind"] == "applied" and "digest" in e for e in audit["n1"])
    chosen = {name: REGISTRY[name]() for name in ("raft", "convergence")}
    result = check({}, [], audit=audit, checkers=chosen)
    assert result.checkers["raft"].valid is True
    assert result.checkers["convergence"].valid is True


def test_a_crashing_run_exits_2_with_the_replay_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An exception inside the run is an error (exit 2), reported with its replay, no traceback."""
    from ember.sim.simulation import Simulation

    def explode(self: Simulation) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(Simulation, "run", explode)
    assert main(["--seed", "8", *QUICK]) == 2
    err = capsys.readouterr().err
    assert "the run crashed: RuntimeError: boom" in err
    assert "replay: python -m ember.sim --seed 8" in err
    assert "Traceback" not in err


@given(sim_configs(nodes=(1, 3, 5)))
def test_replay_command_parses_back_to_the_same_configuration(config: SimConfig) -> None:
    """Every field survives the printed replay command, so a replay is exact."""
    argv = shlex.split(config.replay_command())
    assert argv[:3] == ["python", "-m", "ember.sim"]
    args = build_parser().parse_args(argv[3:])
    assert config_from_args(args, args.seed) == config
