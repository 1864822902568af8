"""The guard that keeps wall-clock tests out of make test's parallel half."""

from __future__ import annotations

import types
from typing import Any

import pytest

from tests.conftest import wall_clock_reason
from tests.node.cluster import ProcCluster


class _Item:
    """As much of a pytest item as the guard reads."""

    def __init__(self, markers: tuple[str, ...] = (), module: Any = None) -> None:
        self.markers, self.module = markers, module

    def get_closest_marker(self, name: str) -> Any:
        return getattr(pytest.mark, name) if name in self.markers else None


def _module(**names: Any) -> types.ModuleType:
    module = types.ModuleType("tests.fake")
    vars(module).update(names)
    return module


def test_a_docker_or_spark_cluster_test_is_wall_clock() -> None:
    assert wall_clock_reason(_Item(("docker",))) == "it is marked docker"
    assert wall_clock_reason(_Item(("slow", "spark_cluster"))) == "it is marked spark_cluster"


def test_a_test_whose_module_runs_real_nodes_is_wall_clock() -> None:
    reason = wall_clock_reason(_Item(module=_module(ProcCluster=ProcCluster, os=__import__("os"))))
    assert reason == "its module uses tests.node.cluster.ProcCluster"


def test_a_simulated_test_passes() -> None:
    assert wall_clock_reason(_Item(("slow",), _module(pytest=pytest, Item=_Item))) is None
    assert wall_clock_reason(_Item()) is None
