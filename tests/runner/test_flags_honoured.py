"""No flag silently dropped (issue 23): every `faultline run` flag, under every backend
and db, is either carried into the plan the backend and db then run, or refused in
one line (exit 2) before anything starts."""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.cli import CliError, build_parser
from harness.commands_run import plan_from_args
from harness.dbs.registry import SYSTEMS
from harness.plan import BACKENDS, Plan

ROOT = Path(__file__).resolve().parents[2]
HOSTS = "h1 root@10.0.0.1\nh2 root@10.0.0.2\nh3 root@10.0.0.3\n"
Check = Callable[[Plan], bool]


def _case(flags: list[str], honoured: Check, refused_on: Callable[[str, str], bool]) -> Any:
    return (flags, honoured, refused_on)


def never(_backend: str, _db: str) -> bool:
    return False


def on_sim(backend: str, _db: str) -> bool:
    return backend == "sim"


def on_etcd(_backend: str, db: str) -> bool:
    return db == "etcd"


# flag case -> (extra flags, what the plan carries when honoured, where it is refused)
# (ssh runs also get --hosts naming 3 hosts; `sim` plays ember only, so every
# flag is refused on sim x etcd, by that.)
CASES: dict[str, Any] = {
    "nodes": _case(["--nodes", "4"], lambda p: len(p.nodes) == 4,
                   lambda b, _d: b == "ssh"),  # 3 hosts named: 4 nodes is a contradiction
    "nodes-as-hosts": _case(["--nodes", "3"], lambda p: len(p.nodes) == 3, never),
    "hosts": _case(["--hosts", "HOSTS"], lambda p: p.nodes == ("h1", "h2", "h3"),
                   lambda b, _d: b != "ssh"),
    "workload": _case(["--workload", "register,change-peers"],
                      lambda p: p.workload == ("register", "change-peers"), never),
    "nemesis": _case(["--nemesis", "partition,kill"],
                     lambda p: p.nemesis == ("partition", "kill"), never),
    "nemesis-mode": _case(["--nemesis-mode", "periodic"],
                          lambda p: p.options["nemesis_mode"] == "periodic", never),
    "nemesis-phases": _case(["--nemesis-phases", "catching-up"],
                            lambda p: p.options["nemesis_phases"] == ["catching-up"], never),
    "nemesis-phases-joint": _case(["--nemesis-phases", "joint"],
                                  lambda p: p.options["nemesis_phases"] == ["joint"], on_etcd),
    "phase-mode-without-changes": _case(
        ["--workload", "register", "--nemesis-mode", "phase"], lambda p: False,
        lambda _b, _d: True),
    "failpoint": _case(["--failpoint", 'raft.skip-catchup={"probability": 0.5}'],
                       lambda p: p.options["failpoints"] == {
                           "raft.skip-catchup": {"probability": 0.5}}, on_etcd),
    "failpoint-unknown": _case(["--failpoint", "no.such"], lambda p: False,
                               lambda _b, _d: True),
    "failpoint-bad-params": _case(["--failpoint", 'raft.append.delay={"delay_ms": -1}'],
                                  lambda p: False, lambda _b, _d: True),
    "db-setting-ember": _case(["--db-setting", "election_timeout_ticks=20"],
                              lambda p: p.db_settings == {"election_timeout_ticks": 20},
                              on_etcd),
    "db-setting-etcd": _case(["--db-setting", "heartbeat-interval=50"],
                             lambda p: p.db_settings == {"heartbeat-interval": 50},
                             lambda _b, d: d == "ember"),
    "db-setting-typo": _case(["--db-setting", "election_timeout_tick=20"], lambda p: False,
                             lambda _b, _d: True),
    # A value ember-node would refuse stops the run before any node starts (its own check).
    "db-setting-bad-value": _case(["--db-setting", "compact_every=-3"], lambda p: False,
                                  lambda _b, _d: True),
    "db-setting-not-a-switch": _case(["--db-setting", "no_pre_vote=maybe"], lambda p: False,
                                     lambda _b, _d: True),
    "db-setting-zone-too-big": _case(["--db-setting", "zone_partitions=7"], lambda p: False,
                                     lambda _b, _d: True),
    "db-setting-zone-fits": _case(["--db-setting", "zone_partitions=7", "--db-setting",
                                   "partitions=8"],
                                  lambda p: p.db_settings == {"zone_partitions": 7,
                                                              "partitions": 8}, on_etcd),
    # The default mix's zone takes min(4, partitions): with 1 partition change-peers
    # had no group and the run died (IndexError) after the cluster started.
    "db-setting-zone-takes-all": _case(["--db-setting", "partitions=1"], lambda p: False,
                                       lambda _b, _d: True),
    "db-setting-one-partition-no-zone": _case(["--workload", "register,change-peers",
                                               "--db-setting", "partitions=1"],
                                              lambda p: p.db_settings == {"partitions": 1},
                                              on_etcd),
    "db-setting-owned": _case(["--db-setting", "data_dir=/tmp/x"], lambda p: False,
                              lambda _b, _d: True),
    "db-setting-binary": _case(["--db-setting", "ember_bin=/opt/ember"],
                               lambda p: p.db_settings == {"ember_bin": "/opt/ember"},
                               lambda b, d: b == "sim" or d == "etcd"),
    "meta-traffic": _case(["--meta-traffic", "delete,watch-key", "--workload",
                           "register,metastore"],
                          lambda p: p.options["meta_traffic"] == ["delete", "watch-key"],
                          on_etcd),  # etcd runs one traffic workload: register or metastore
    "meta-traffic-unknown": _case(["--workload", "register,metastore", "--meta-traffic",
                                   "watch-sideways"], lambda p: False, lambda _b, _d: True),
    "meta-traffic-etcd": _case(["--workload", "metastore", "--meta-traffic", "compare-mod"],
                               lambda p: p.options["meta_traffic"] == ["compare-mod"],
                               lambda _b, d: d == "ember"),  # ember: register is its traffic
    "meta-traffic-no-metastore": _case(["--workload", "register", "--meta-traffic", "delete"],
                                       lambda p: False,
                                       lambda _b, _d: True),
    "time-limit": _case(["--time-limit", "7"], lambda p: p.time_limit_s == 7.0, never),
    "quiet-period": _case(["--quiet-period", "2"], lambda p: p.quiet_s == 2.0, never),
    "concurrency": _case(["--concurrency", "3"], lambda p: p.concurrency == 3, never),
    "rate": _case(["--rate", "20"], lambda p: p.rate_hz == 20.0, never),
    "keys": _case(["--keys", "7"], lambda p: p.options["keys"] == 7, never),
    "name": _case(["--name", "t1"], lambda p: p.name == "t1", never),
    "seed": _case(["--seed", "9"], lambda p: p.seed == 9, never),
    "leave-running": _case(["--leave-running"], lambda p: True, on_sim),
}  # fmt: skip
# Flags no backend or db interprets (the store, the display, how many runs):
# run-level, the same everywhere; --plan and --attempts have their own tests.
RUN_LEVEL = {"--store", "--no-progress", "--test-count", "--plan", "--attempts", "--backend",
             "--db", "--help"}  # fmt: skip


def _plan(tmp_path: Path, backend: str, db: str, flags: list[str]) -> Plan:
    hosts = tmp_path / "hosts"
    hosts.write_text(HOSTS)
    flags = [str(hosts) if f == "HOSTS" else f for f in flags]
    base = ["run", "--backend", backend, "--db", db]
    if backend == "ssh" and "--hosts" not in flags:
        base += ["--hosts", str(hosts)]
    return plan_from_args(build_parser().parse_args([*base, *flags]))


def test_every_run_flag_has_a_case() -> None:
    """The walk below covers every flag `faultline run` has."""
    parser = build_parser()
    run = next(a for a in parser._subparsers._group_actions[0].choices.items()  # type: ignore[union-attr]
               if a[0] == "run")[1]  # fmt: skip
    flags = {s for a in run._actions for s in a.option_strings if s.startswith("--")}
    covered = {c[0][0] for c in CASES.values()} | RUN_LEVEL
    assert flags <= covered, sorted(flags - covered)


@pytest.mark.parametrize(
    ("case", "backend", "db"), list(itertools.product(sorted(CASES), BACKENDS, sorted(SYSTEMS)))
)
def test_a_flag_is_honoured_or_refused_in_one_line(
    tmp_path: Path, case: str, backend: str, db: str
) -> None:
    """Refused where the table says (one line naming a flag), else carried in the plan."""
    flags, honoured, refused_on = CASES[case]
    refused = refused_on(backend, db) or (backend == "sim" and not SYSTEMS[db].supports_sim)
    if refused:
        with pytest.raises(CliError) as caught:
            _plan(tmp_path, backend, db, flags)
        message = str(caught.value)
        assert "\n" not in message
        assert "--" in message or "phase" in message, message
        return
    plan = _plan(tmp_path, backend, db, flags)  # a CliError here is a wrong refusal
    assert honoured(plan), plan


def test_a_refusal_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """`faultline run --db etcd --failpoint ...` stops before anything starts."""
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", "--db", "etcd", "--failpoint",
         "raft.skip-catchup", "--store", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0, out.stderr
    assert "etcd has no failpoints" in out.stderr
    assert not any(tmp_path.iterdir())  # no run dir


@pytest.mark.parametrize(
    ("nemesis", "said"),
    [
        ("clock", ["--nemesis clock needs ember: it moves a node's clock",
                   "(etcd follows no such file)"]),
        ("mix,drop-replies", ["--nemesis drop-replies needs ember", "(etcd has no failpoints)"]),
    ],
)  # fmt: skip
def test_a_nemesis_the_db_cannot_take_is_refused_before_the_run(
    tmp_path: Path, nemesis: str, said: list[str]
) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", "--db", "etcd", "--nemesis", nemesis,
         "--store", str(tmp_path), "--no-progress"],
        cwd=ROOT, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2, out.stdout + out.stderr
    for words in said:
        assert words in out.stderr
    assert "Traceback" not in out.stderr
    assert not list(tmp_path.rglob("test.json"))  # refused before any run dir


def test_a_plan_file_moved_to_a_backend_that_cannot_play_it_is_refused(tmp_path: Path) -> None:
    """`run --plan FILE --backend sim` of an etcd plan: one line, exit 2, no run dir."""
    from harness import plan as plans

    path = tmp_path / "test.json"
    path.write_bytes(plans.dump(Plan(db="etcd", workload=("register",))))
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", "--plan", str(path), "--backend", "sim",
         "--store", str(tmp_path / "store")],
        cwd=ROOT, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.strip() == (
        "faultline run: error: --backend sim: --backend sim simulates ember only, not etcd"
    )
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("db", sorted(SYSTEMS))
def test_a_version_label_is_kept_for_the_reports(tmp_path: Path, db: str) -> None:
    """`--db-setting version=...` labels the run (the pipeline groups by it): accepted."""
    plan = _plan(tmp_path, "docker", db, ["--db-setting", "version=2.0-rc1"])
    assert plan.db_settings == {"version": "2.0-rc1"}
