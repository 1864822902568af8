"""A killed `faultline run` leaves nothing that `faultline clean` cannot remove or heal.

SIGKILL at seeded instants spread over setup, workload, phase-triggered
faults, heal and check (`tests.runner.kill_driver`); after each, `faultline
clean` (by run dir, or by cluster name when the run died before it had one)
leaves no container, network, faultline iptables rule, stopped process or
failpoint; a second clean has nothing to do; the run dir's history checks.
SIGINT and SIGTERM need no clean: the run heals and removes by itself. The
SSH path runs against containers used as plain SSH hosts, which stay up, so
what is healed on them is seen on them.

CI runs FAULTLINE_KILL_INSTANTS instants (default 6, every phase at least
once); `bench/kill_table.py` runs the full 20 and prints the table.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from nemesis import journal
from tests.harness.cluster_fixtures import require_docker
from tests.harness.ssh_hosts import containers_as_ssh_hosts
from tests.runner.kill_driver import (
    PHASES,
    Instant,
    Kill,
    faultline,
    instants,
    kill_once,
    left_on_docker,
    left_on_hosts,
)

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(2400)]
SEED = 18
CI_INSTANTS = int(os.environ.get("FAULTLINE_KILL_INSTANTS", "6"))


def clean_after(kill: Kill) -> list[str]:
    """`faultline clean` for a killed run, twice; returns the first report's lines."""
    seed = 100 + kill.instant.number  # kill_driver's seed per instant
    target = [str(kill.run_dir)] if kill.run_dir else ["--cluster", f"run{seed}-{kill.pid}"]
    first = faultline("clean", *target)
    assert first.returncode == 0, first.stderr
    second = faultline("clean", *target)
    assert second.returncode == 0, second.stderr
    assert "nothing to do" in second.stdout, second.stdout
    return first.stdout.splitlines()


def assert_history_checks(kill: Kill) -> str:
    """The killed run's history is read and judged (a verdict, no error)."""
    if kill.run_dir is None or not (kill.run_dir / "history.jsonl").exists():
        return "no history (killed before the workload)"
    out = faultline("check", str(kill.run_dir))
    assert "error" not in out.stderr.lower(), out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    lines = [ln.split() for ln in out.stdout.splitlines()]
    verdict = {w[0]: w[1] for w in lines if len(w) >= 2 and w[0] == "linearizable"}
    assert verdict.get("linearizable") == "valid", out.stdout
    return out.stdout.strip().splitlines()[-1]


def _kill_landing(instant: Instant, tmp_path: Path) -> Kill:
    store = tmp_path / f"i{instant.number}" / "store"
    store.mkdir(parents=True)
    kill = kill_once(instant, store, [])
    if kill.exit_code == 0 and instant.phase == "check":
        # The checkers and the report take ~150 ms on a quiet machine: a run
        # can finish inside the seeded offset. Once more, at the first poll.
        again = Instant(instant.number + 50, "check", 0.0)
        store = tmp_path / f"i{again.number}" / "store"
        store.mkdir(parents=True)
        kill = kill_once(again, store, [])
    return kill


def test_sigkill_at_seeded_instants_then_clean_leaves_nothing(tmp_path: Path) -> None:
    """Each instant: something was left before clean (unless the run was done
    with its cluster), nothing after, and the run dir checks."""
    require_docker()
    chosen = instants(SEED, CI_INSTANTS)
    assert {i.phase for i in chosen} == set(PHASES) or len(PHASES) > CI_INSTANTS
    for instant in chosen:
        kill = _kill_landing(instant, tmp_path)
        assert kill.exit_code == -signal.SIGKILL, (instant, kill.notes)
        kill.before = left_on_docker(kill.pid)
        # Else the instant proves nothing: setup is killed once the network exists.
        if instant.phase in ("setup", "workload", "phase-fault"):
            assert kill.before.networks > 0, kill
        if instant.phase in ("workload", "phase-fault"):
            assert kill.before.containers > 0, kill
        clean_after(kill)
        kill.after = left_on_docker(kill.pid)
        assert kill.after.total() == 0, (instant, kill.after.describe())
        if kill.run_dir is not None:
            assert journal.has_ended(journal.read(kill.run_dir / journal.FILE_NAME))
        assert_history_checks(kill)


def test_sigint_needs_no_clean(tmp_path: Path) -> None:
    """Ctrl-C mid-workload: the run heals, removes its cluster and ends its journal."""
    require_docker()
    store = tmp_path / "store"
    store.mkdir()
    kill = kill_once(Instant(90, "phase-fault", 0.1, signal.SIGINT), store, [])
    assert kill.exit_code == 130, kill.notes
    assert left_on_docker(kill.pid).total() == 0
    assert kill.run_dir is not None
    assert journal.has_ended(journal.read(kill.run_dir / journal.FILE_NAME))


@pytest.fixture
def ssh_hosts(tmp_path: Path) -> Iterator[tuple[Path, list[Any]]]:
    """Five containers of our own, listed in a hosts file as plain SSH hosts."""
    require_docker()
    name = f"pytest-hosts-{os.getpid()}"
    with containers_as_ssh_hosts(name, 5, tmp_path / "hosts") as nodes:
        client = docker.from_env()
        yield tmp_path / "hosts", [client.containers.get(f"faultline-{name}-{n.name}")
                                   for n in nodes]  # fmt: skip


FAILPOINT = ["--failpoint", 'raft.append.delay={"delay_ms": 1}']


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_ssh_hosts_are_healed_by_clean_or_by_the_run(
    ssh_hosts: tuple[Path, list[Any]], tmp_path: Path, signum: int
) -> None:
    """--backend ssh on containers as hosts, signalled right after a phase-triggered
    fault: SIGKILL leaves faults (failpoints at least) that `faultline clean RUN_DIR`
    heals on the hosts; SIGTERM heals them itself."""
    hosts, containers = ssh_hosts
    store = tmp_path / "store"
    store.mkdir()
    extra = ["--backend", "ssh", "--hosts", str(hosts), *FAILPOINT]
    kill = kill_once(Instant(91, "phase-fault", 0.05, signum), store, extra)
    assert kill.run_dir is not None, kill.notes
    if signum == signal.SIGKILL:
        kill.before = left_on_hosts(containers)
        assert kill.before.failpoints > 0, kill.before.describe()
        said = clean_after(kill)
        assert any("healed" in line for line in said), said
    else:
        assert kill.exit_code == 130, kill.notes
    left = left_on_hosts(containers)
    assert left.total() == 0, left.describe()
    assert journal.has_ended(journal.read(kill.run_dir / journal.FILE_NAME))
    assert_history_checks(kill)
