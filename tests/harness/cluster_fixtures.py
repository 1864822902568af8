"""One 5-node Docker cluster shared by tests/harness and tests/nemesis.

Starting a cluster is the slow part, so the first session-scoped fixture
that asks builds the image and brings the cluster up once; it is torn down
when the session ends (the finalizer of whichever fixture started it). The
image is built from a snapshot of the source taken at session start, so
edits made while the tests run cannot change what "unchanged inputs" means.
The node process under test is a stand-in (`sleep`), as ember-node does not
exist yet: control and nemesis work on any process.

A session killed before its finalizers ran must not leak its cluster
(`faultline-pytest-<pid>-n*` and its network): SIGTERM is turned into
KeyboardInterrupt while the cluster is up, so pytest tears the session
down, and a SIGKILLed session's cluster (its owner pid now gone) is removed
by the next session before it starts its own (`cleanup_dead`).
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.backends.base import NodeHandle
from harness.backends.docker import DockerBackend, cleanup_dead
from harness.backends.engine import DockerUnavailableError, connect_docker
from harness.control import Control
from harness.db import EmberDB
from harness.images import BuildReport, build_image, snapshot_source


@dataclass
class SharedCluster:
    """The image build report, the source snapshot, and the cluster."""

    report: BuildReport
    source: Path
    backend: DockerBackend
    nodes: list[NodeHandle]
    control: Control


_shared: list[SharedCluster] = []
_temp_dirs: list[Path] = []


def require_docker() -> None:
    """Skip when no engine is reachable, except in CI, where that is a failure."""
    try:
        connect_docker(timeout_s=10).close()
    except DockerUnavailableError as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(exc))


def shared_cluster(request: pytest.FixtureRequest) -> SharedCluster:
    """The session's cluster, started on first use."""
    if _shared:
        return _shared[0]
    require_docker()
    for line in cleanup_dead():
        print(f"removed what a killed run or session left: {line}")
    request.addfinalizer(_teardown)
    _terminate_as_interrupt()
    source = Path(tempfile.mkdtemp(prefix="faultline-src-"))
    _temp_dirs.append(source)
    snapshot_source(source)
    report = build_image(source_root=source, log=print)
    for step, action, seconds in report.steps:
        print(f"image {step}: {action} in {seconds:.1f}s")
    # The data dir on a volume, as the runner's clusters have it.
    backend = DockerBackend(f"pytest-{os.getpid()}", size=5, image=report.tag,
                            volumes=(EmberDB.root,))  # fmt: skip
    nodes = backend.up()
    _shared.append(SharedCluster(report, source, backend, nodes, Control(nodes)))
    return _shared[0]


def _on_sigterm(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt("SIGTERM")  # pytest then runs the session's finalizers


def _terminate_as_interrupt() -> None:
    # Only where nobody else handles SIGTERM (the default would end the
    # process without teardown); a test that installs its own restores ours.
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)


def _teardown() -> None:
    if signal.getsignal(signal.SIGTERM) == _on_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    while _shared:
        shared = _shared.pop()
        shared.control.close()
        shared.backend.down()
    while _temp_dirs:
        shutil.rmtree(_temp_dirs.pop(), ignore_errors=True)


def cluster_fixture(request: pytest.FixtureRequest) -> Iterator[SharedCluster]:
    """Body of the `cluster` fixture in each test folder's conftest."""
    yield shared_cluster(request)
