"""A network Docker will not remove is named as left behind, never counted as
removed (harness.backends.docker.cleanup), with a fake engine: no Docker needed.

Teardown after a run warns and lets the verdict stand; `cleanup_dead` (the
sweep before each run) reports it and goes on to the next cluster; `clean`
of a killed run fails in one line and keeps its journal open, and the sweep
before a run passes over that run rather than refusing to start.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from harness.backends import docker as docker_backend
from harness.backends.base import NodeHandle, SshTarget
from harness.backends.docker import LABEL, ClusterError, DockerBackend, cleanup
from harness.clean import leftovers
from harness.cli import main
from nemesis import journal


class _Network:
    def __init__(self, name: str, refuse: int) -> None:
        self.name, self.attrs, self.refuse, self.tries = name, {"Labels": {}}, refuse, 0

    def remove(self) -> None:
        self.tries += 1
        if self.tries <= self.refuse:
            raise docker.errors.APIError(
                "409", explanation="error while removing network: has active endpoints"
            )


class _List:
    def __init__(self, items: list[Any]) -> None:
        self.items = items

    def list(self, **_: Any) -> list[Any]:
        return self.items


class _Client:
    def __init__(self, networks: list[_Network]) -> None:
        self.containers, self.volumes, self.networks = _List([]), _List([]), _List(networks)


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(docker_backend.time, "sleep", lambda _s: None)

    def use(*networks: _Network) -> None:
        monkeypatch.setattr(docker_backend, "connect_docker", lambda: _Client(list(networks)))

    return use


def test_a_network_freed_after_a_few_refusals_is_removed(engine: Any) -> None:
    net = _Network("faultline-a", refuse=3)
    engine(net)
    assert cleanup("a") == ["network faultline-a"]
    assert net.tries == 4


def test_a_network_that_stays_refused_is_named_not_counted(engine: Any) -> None:
    stuck, fine = _Network("faultline-b", refuse=10**6), _Network("faultline-b2", refuse=0)
    engine(stuck, fine)
    with pytest.raises(ClusterError) as err:
        cleanup("b")
    message = str(err.value)
    assert "could not remove network faultline-b (Docker refused 20 times" in message
    assert "has active endpoints" in message
    assert message.endswith("; removed network faultline-b2")
    assert stuck.tries == docker_backend.NETWORK_TRIES


def test_teardown_warns_and_returns(engine: Any, capsys: pytest.CaptureFixture[str]) -> None:
    engine(_Network("faultline-c", refuse=10**6))
    DockerBackend("c").down()
    err = capsys.readouterr().err
    assert "warning: could not remove network faultline-c" in err
    assert "faultline clean --cluster c" in err


def test_the_sweep_before_a_run_reports_it_and_goes_on(
    engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    nets = {"d1": _Network("faultline-d1", refuse=10**6), "d2": _Network("faultline-d2", 0)}
    dead = {"state": "dead", "owner": "host:1", "labels": {LABEL: "x"}}
    monkeypatch.setattr(docker_backend, "clusters", lambda: dict.fromkeys(nets, dead))
    monkeypatch.setattr(docker_backend, "cleanup", lambda name: cleanup_one(name))

    def cleanup_one(name: str) -> list[str]:
        engine(nets[name])
        return cleanup(name)

    lines = docker_backend.cleanup_dead()
    assert lines[0].startswith("cluster d1 (owner host:1, gone): could not remove network")
    assert lines[1] == "cluster d2 (owner host:1, gone): removed 1 containers, volumes and networks"


def _docker_run_left_by_a_killed_owner(tmp_path: Path) -> Path:
    """A run dir as a SIGKILLed Docker run of cluster `e` left it (one fault unhealed)."""
    run = tmp_path / "store" / "t" / "20260101T000000-1"
    run.mkdir(parents=True)
    j = journal.Journal(run / journal.FILE_NAME, running_dir=tmp_path / "store" / ".running")
    j.start(
        "docker",
        "e",
        [NodeHandle(name="n1", ip="10.0.0.2", ssh=SshTarget(host="127.0.0.1", port=1))],
    )
    j.fault("partition", {"n1": ["iptables -F FAULTLINE"]})
    text = (run / journal.FILE_NAME).read_text()
    (run / journal.FILE_NAME).write_text(
        text.replace(f'"pid":{journal.owner()["pid"]}', f'"pid":{_dead_pid()}', 1)
    )
    j.close(ended=False)
    return run


def test_clean_of_the_run_fails_in_one_line_and_a_new_run_still_starts(
    engine: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    engine(_Network("faultline-e", refuse=10**6))
    run = _docker_run_left_by_a_killed_owner(tmp_path)
    assert main(["clean", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "could not remove network faultline-e" in err[0]
    assert not journal.has_ended(journal.read(run / journal.FILE_NAME))  # for the next try
    said: list[str] = []
    leftovers(tmp_path / "store", "ssh", said.append)  # the sweep before a run passes over it


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid
