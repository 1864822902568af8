"""Fixtures for harness tests: the shared Docker cluster."""

from collections.abc import Iterator

import pytest

from tests.harness.cluster_fixtures import SharedCluster, cluster_fixture


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Iterator[SharedCluster]:
    """The session's 5-node cluster (image built first)."""
    yield from cluster_fixture(request)
