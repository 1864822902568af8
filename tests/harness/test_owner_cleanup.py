"""Clusters whose owner process died are found by their owner labels and removed,
and only those: a live owner's, a kept one's and another host's stay."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import docker
import pytest

from harness.backends.docker import (
    KEEP_LABEL,
    LABEL,
    OWNER_HOST,
    OWNER_PID,
    cleanup,
    cleanup_dead,
    clusters,
)
from nemesis.journal import owner
from tests.harness.cluster_fixtures import require_docker

pytestmark = [pytest.mark.docker]
ROOT = Path(__file__).resolve().parents[2]


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_only_dead_owners_clusters_are_removed() -> None:
    """Networks labelled as four clusters: only the one whose owner died goes."""
    require_docker()
    client = docker.from_env()
    me, dead = owner(), _dead_pid()
    tag = f"pytest-owners-{os.getpid()}"
    made = {
        f"{tag}-dead": {OWNER_HOST: me["host"], OWNER_PID: str(dead)},
        f"{tag}-live": {OWNER_HOST: me["host"], OWNER_PID: str(me["pid"])},
        f"{tag}-kept": {OWNER_HOST: me["host"], OWNER_PID: str(dead), KEEP_LABEL: "1"},
        f"{tag}-away": {OWNER_HOST: "another-host.example", OWNER_PID: str(dead)},
    }
    try:
        for name, labels in made.items():
            client.networks.create(f"faultline-{name}", labels={LABEL: name, **labels})
        states = {n: e["state"] for n, e in clusters().items() if n.startswith(tag)}
        assert states == {f"{tag}-dead": "dead", f"{tag}-live": "alive",
                          f"{tag}-kept": "dead", f"{tag}-away": "elsewhere"}  # fmt: skip
        removed = [line for line in cleanup_dead() if tag in line]
        assert len(removed) == 1
        assert f"cluster {tag}-dead" in removed[0]
        left = {n for n in clusters() if n.startswith(tag)}
        assert left == {f"{tag}-live", f"{tag}-kept", f"{tag}-away"}
    finally:
        for name in made:
            cleanup(name)


INNER = """
import os, time
from pathlib import Path
from tests.harness.cluster_fixtures import shared_cluster

def test_hold_the_cluster(request):
    shared = shared_cluster(request)
    Path(os.environ["FAULTLINE_READY_FILE"]).write_text(shared.backend.name)
    time.sleep(600)
"""


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_pytest_session_does_not_leak_its_cluster(tmp_path: Path, signum: int) -> None:
    """SIGTERM: the session tears its cluster down itself. SIGKILL: the cluster
    stays, owned by a dead pid, and the next session's cleanup removes it."""
    require_docker()
    (tmp_path / "test_inner.py").write_text(INNER)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    ready = tmp_path / "ready"
    # Its temp dirs (the source snapshot, the key pair) in ours: a SIGKILLed
    # session cannot remove them, and this test must not leave them in /tmp.
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FAULTLINE_READY_FILE": str(ready),
           "TMPDIR": str(tmp_path / "tmp")}  # fmt: skip
    inner = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c",
         str(tmp_path / "pytest.ini"), str(tmp_path / "test_inner.py")],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 600
        while not ready.exists() and inner.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ready.exists(), "the inner session never brought its cluster up"
        name = ready.read_text()
        assert clusters()[name]["containers"] == 5
        inner.send_signal(signum)
        inner.wait(timeout=120)
        if signum == signal.SIGKILL:
            assert clusters()[name]["state"] == "dead"
            assert any(f"cluster {name} " in line for line in cleanup_dead())
        assert name not in clusters()
    finally:
        if inner.poll() is None:
            inner.kill()
            inner.wait()
        if ready.exists():
            cleanup(ready.read_text())


def test_clean_all_dead_removes_dead_clusters_and_closes_their_journals(tmp_path: Path) -> None:
    """`faultline clean --all-dead`: a dead owner's cluster goes, the run dir its
    journal names gets `end`, and a second pass finds neither again."""
    from harness.backends.base import NodeHandle, SshTarget
    from nemesis import journal

    require_docker()
    client = docker.from_env()
    me, dead = owner(), _dead_pid()
    name = f"pytest-alldead-{os.getpid()}"
    run = tmp_path / "store" / "t" / "20260101T000000-1"
    run.mkdir(parents=True)
    j = journal.Journal(run / journal.FILE_NAME, running_dir=tmp_path / "store" / ".running")
    node = NodeHandle(name="n1", ip="10.0.0.1", ssh=SshTarget(host="127.0.0.1", port=1))
    j.start("docker", name, [node])
    j.fault("partition", {"n1": ["iptables -F FAULTLINE"]})
    j.close(ended=False)
    text = (run / journal.FILE_NAME).read_text()
    (run / journal.FILE_NAME).write_text(text.replace(f'"pid":{me["pid"]}', f'"pid":{dead}', 1))
    client.networks.create(f"faultline-{name}", labels={LABEL: name, OWNER_HOST: me["host"],
                                                        OWNER_PID: str(dead)})  # fmt: skip
    try:
        args = [sys.executable, "-m", "harness.cli", "clean", "--all-dead",
                "--store", str(tmp_path / "store")]  # fmt: skip
        first = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert first.returncode == 0, first.stderr
        assert f"cluster {name} (owner pid {dead} on {me['host']}, gone)" in first.stdout
        assert f"{run}: owner pid {dead}" in first.stdout
        assert name not in clusters()
        assert journal.has_ended(journal.read(run / journal.FILE_NAME))
        assert list((tmp_path / "store" / ".running").iterdir()) == []
        second = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert second.returncode == 0, second.stderr
        assert name not in second.stdout
        assert str(run) not in second.stdout
    finally:
        cleanup(name)


def test_a_docker_run_starts_by_removing_dead_owners_clusters(tmp_path: Path) -> None:
    """What `faultline run` calls first: a dead owner's cluster is removed and said so."""
    from harness.clean import leftovers

    require_docker()
    me, dead = owner(), _dead_pid()
    name = f"pytest-leftover-{os.getpid()}"
    docker.from_env().networks.create(
        f"faultline-{name}", labels={LABEL: name, OWNER_HOST: me["host"], OWNER_PID: str(dead)}
    )
    try:
        said: list[str] = []
        leftovers(tmp_path / "store", "docker", said.append)
        owned = f"owner pid {dead} on {me['host']}, gone"
        expected = f"leftover of a killed run: cluster {name} ({owned}): removed 1 containers"
        assert any(line.startswith(expected) for line in said), said
        assert name not in clusters()
    finally:
        cleanup(name)
