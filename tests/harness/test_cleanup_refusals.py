"""A network Docker will not remove is named as left behind, never counted as
removed (harness.backends.docker.cleanup), with a fake engine: no Docker needed.

Teardown after a run warns and lets the verdict stand; `cleanup_dead` (the
sweep before each run) reports it and goes on to the next cluster.
"""

from __future__ import annotations

from typing import Any

import docker.errors
import pytest

from harness.backends import docker as docker_backend
from harness.backends.docker import LABEL, ClusterError, DockerBackend, cleanup


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
