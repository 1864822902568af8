"""`faultline run --db etcd`: the plan its flags describe, and bad combinations."""

from __future__ import annotations

import pytest

from harness.cli import build_parser, main
from harness.commands_run import plan_from_args
from harness.plan import Plan


def _plan(*flags: str) -> Plan:
    return plan_from_args(build_parser().parse_args(["run", "--db", "etcd", *flags]))


def test_an_etcd_plan_names_its_db_and_waits_for_etcds_phases() -> None:
    """The plan records db etcd and, by default, the phases etcd has (no joint)."""
    plan = _plan("--workload", "metastore,change-peers", "--seed", "3")
    assert plan.db == "etcd"
    assert plan.name == "etcd-metastore-change-peers"
    assert plan.options["nemesis_phases"] == ["catching-up", "stable"]


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (
            ["--db", "etcd", "--workload", "register,metastore"],
            "exactly one of register or metastore",
        ),
        (["--db", "etcd", "--workload", "bogus"], "--workload: unknown 'bogus'"),
        (["--workload", "metastore"], "exactly one of register"),
        (["--db", "etcd", "--backend", "sim"], "simulates ember only"),
    ],
)
def test_workloads_a_db_does_not_have_are_one_line_errors(
    flags: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """One traffic workload per run (ember's metastore is control-plane traffic); no traceback."""
    assert main(["run", *flags]) == 2
    err = capsys.readouterr().err
    assert needle in err
    assert "Traceback" not in err
