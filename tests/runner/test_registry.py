"""The per-system registry: the runner and `faultline run` consult one entry per db."""

from __future__ import annotations

import dataclasses
from typing import Any

import msgspec
import pytest

from harness import runner
from harness.cli import CliError, build_parser
from harness.commands_run import plan_from_args
from harness.dbs import System
from harness.dbs.registry import SYSTEMS
from harness.images_etcd import ETCD_VERSION
from harness.plan import Plan
from nemesis.generator import PHASES
from reports.render import system_version
from workloads.generator import Generator, Once, Op, Stagger, TimeLimit
from workloads.register import key_names


def _toy() -> System[Any]:
    """A third system: ember's callables under a new name, with its own CLI facts."""
    return dataclasses.replace(
        SYSTEMS["ember"], name="toy", workloads=("kv", "change-peers"), traffic=("kv",),
        supports_sim=False, default_phases=("stable",),
    )  # fmt: skip


def _plan(*flags: str) -> Plan:
    return plan_from_args(build_parser().parse_args(["run", *flags]))


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_every_entry_is_named_by_its_key_and_its_traffic_is_one_of_its_workloads(
    name: str,
) -> None:
    """Keys, names, traffic workloads and default phases agree with each other."""
    system = SYSTEMS[name]
    assert system.name == name
    assert system.traffic
    assert set(system.traffic) <= set(system.workloads)
    assert set(system.default_phases or ()) <= set(PHASES)


def test_a_third_system_is_accepted_by_run_from_its_registry_entry_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A new entry brings its --db name, workloads, traffic, phases and sim refusal."""
    monkeypatch.setitem(SYSTEMS, "toy", _toy())
    plan = _plan("--db", "toy", "--workload", "kv,change-peers", "--seed", "5")
    assert (plan.db, plan.name) == ("toy", "toy-kv-change-peers")
    assert plan.workload == ("kv", "change-peers")
    assert plan.options["nemesis_phases"] == ["stable"]
    with pytest.raises(CliError, match="unknown 'register'"):
        _plan("--db", "toy", "--workload", "register")
    with pytest.raises(CliError, match="exactly one of kv"):
        _plan("--db", "toy", "--workload", "change-peers")
    with pytest.raises(CliError, match="simulates ember only; run toy on docker or ssh"):
        _plan("--db", "toy", "--workload", "kv", "--backend", "sim")


def test_ember_keeps_the_generators_default_phases() -> None:
    """ember plans leave nemesis_phases unset (nemesis.generator.DEFAULT_PHASES applies)."""
    assert "nemesis_phases" not in _plan("--seed", "1").options


def test_the_runner_takes_the_change_generator_and_the_final_say_from_the_system() -> None:
    """The admin slot holds the system's change generator; its `generators` hook decides last."""
    seen: list[list[str]] = []
    change, watch = Once(Op(f="toy-change")), Once(Op(f="toy-watch"))

    def hook(_plan: Plan, _db: Any, gens: dict[str, Generator]) -> dict[str, Generator]:
        seen.append(list(gens))
        return {**gens, "watch": watch}

    toy = dataclasses.replace(_toy(), change_generator=lambda _p, _db: change, generators=hook)
    plan = _plan("--seed", "9", "--nemesis", "none", "--time-limit", "4")
    gens = runner._generators(plan, toy, None, admin=True, nemesis=False)
    assert seen == [["client", "admin"]]
    assert list(gens) == ["client", "admin", "watch"]
    admin = gens["admin"]
    assert isinstance(admin, TimeLimit)
    assert isinstance(admin.gen, Stagger)
    assert admin.gen.gen is change
    assert gens["watch"] is watch


def test_final_reads_read_every_key_of_the_plans_workload() -> None:
    """ember and etcd register runs read every register key; etcd metastore its own keys;
    ember's default mix reads both."""
    mix = SYSTEMS["ember"].final_reads(_plan("--seed", "2", "--keys", "7"))
    plan = _plan("--seed", "2", "--keys", "7", "--workload", "register,change-peers")
    reads = SYSTEMS["ember"].final_reads(plan)
    assert set(reads) < set(mix)
    assert all(isinstance(op, Op) and op.f == "get" for op in reads)
    assert [op.key for op in reads] == list(key_names(7))
    etcd = msgspec.structs.replace(plan, db="etcd")
    assert SYSTEMS["etcd"].final_reads(etcd) == reads
    meta = msgspec.structs.replace(etcd, workload=("metastore",))
    assert SYSTEMS["etcd"].final_reads(meta) != reads


def test_a_plan_naming_an_unknown_db_is_one_run_error() -> None:
    """A replayed plan whose db this tree lacks fails with one line, not a KeyError."""
    plan = msgspec.structs.replace(_plan("--seed", "4"), db="mysql")
    with pytest.raises(runner.RunError, match="unknown db 'mysql'; expected one of ember, etcd"):
        runner._system(plan)


def test_the_report_header_names_the_system_under_test() -> None:
    """etcd runs say etcd and its packaged version; ember runs say ember."""
    assert system_version({"db": "etcd"}) == f"etcd {ETCD_VERSION} (Debian package)"
    ember = system_version({"db": "ember", "options": {"ember_version": "0.3", "git_rev": "abc"}})
    assert ember == "ember 0.3 (abc)"
    assert system_version({"options": {"ember_version": "0.3"}}) == "ember 0.3"
    assert system_version({"db": "mysql"}) == "mysql (not a known system)"
