"""Fixtures: real ember-node clusters on loopback, always torn down."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.node.cluster import ProcCluster

# Fast ticks so elections and catch-up timeouts take about a second. A 500 ms
# election timeout, not 200: a loaded 2-core CI machine stalls a process for
# 200 ms now and then, and each stall cost a leader its quorum mid-test.
FAST = ["--tick-ms", "20", "--election-timeout-ticks", "25"]

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
