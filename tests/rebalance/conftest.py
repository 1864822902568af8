"""One 5-node cluster (metastore on n1-n3, zone `default` created) per test module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.node.cluster import ProcCluster
from tests.rebalance.flow import FLAGS, NAMES, PARTITIONS, alter, wait_converged


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcCluster]:
    """Five nodes, groups booted on n1-n3, the zone created with 3 replicas and converged."""
    root: Path = tmp_path_factory.mktemp("rebalance")
    c = ProcCluster(root, NAMES, bootstrap=NAMES[:3], extra=FLAGS)
    try:
        c.start_all()
        c.wait_for(lambda: _zone_created(c), "the zone to be created")
        wait_converged(c)
        yield c
    finally:
        c.close()


def _zone_created(c: ProcCluster) -> bool:
    try:
        alter(c, replicas=3, partitions=PARTITIONS)
    except (AssertionError, OSError):
        return False
    return True
