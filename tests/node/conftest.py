"""Fixtures: real ember-node clusters on loopback, always torn down."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.node.cluster import ProcCluster

# Fast ticks so elections and catch-up timeouts take a fraction of a second.
FAST = ["--tick-ms", "20", "--election-timeout-ticks", "10"]

MakeCluster = Callable[..., ProcCluster]


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[MakeCluster]:
    """Build clusters in tmp_path; every process is killed at teardown."""
    made: list[ProcCluster] = []

    def make(
        names: list[str], *, bootstrap: list[str] | None = None, extra: list[str] | None = None
    ) -> ProcCluster:
        cluster = ProcCluster(
            tmp_path / f"c{len(made)}", names, bootstrap=bootstrap, extra=[*FAST, *(extra or [])]
        )
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.close()
