"""A watch client going away is the normal end of a watch: no error in the node's log.

The full-mix runs logged "unexpected error in GET /meta/watch" with a
traceback each time a watcher disconnected (the next progress line hit the
closed transport).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.node.cluster import ProcCluster, meta_cluster

NAMES = ["n1", "n2", "n3"]
FLAGS = ["--tick-ms", "20", "--election-timeout-ticks", "25", "--meta-nodes", "auto",
         "--partitions", "1"]  # fmt: skip
PROGRESS_S = 1.0  # the service's idle progress line interval
WATCHES = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcCluster]:
    """Three nodes, all hosting the metastore."""
    root: Path = tmp_path_factory.mktemp("meta-watch")
    with meta_cluster(root, NAMES, FLAGS, NAMES) as c:
        yield c


async def _watch_then_leave(url: str) -> list[dict[str, object]]:
    """Open a watch, read its first line, and close the connection."""
    params = {"prefix": "w.", "from": "1"}
    async with (
        aiohttp.ClientSession() as session,
        session.get(url + "/meta/watch", params=params) as resp,
    ):
        assert resp.status == 200
        line = await resp.content.readline()
    return [json.loads(line)]


def test_a_watch_client_leaving_logs_no_error(cluster: ProcCluster) -> None:
    node = "n1"
    for _ in range(WATCHES):
        first = asyncio.run(_watch_then_leave(cluster.url(node)))
        assert "progress" in first[0] or "key" in first[0], first
    # Time for the streams to try their next progress lines on the closed
    # connections (they write one every PROGRESS_S when idle) and for a write
    # that wakes every watcher.
    code, _ = cluster.call(node, "POST", "/meta/put", {"key": "w.a", "value": 1})
    assert code in (200, 421)
    time.sleep(3 * PROGRESS_S)
    assert cluster.health(node)
    log = (cluster.root / f"{node}.log").read_text()
    assert "unexpected error" not in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]


def test_a_watch_client_gone_before_the_headers_ends_the_watch_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The client left between asking and the answer's headers (a watcher
    killed right after its request, in the simulator): `prepare` meets a
    closing transport, and the watch ends as on a later disconnect."""
    import logging
    from types import SimpleNamespace
    from unittest import mock

    from aiohttp.client_exceptions import ClientConnectionResetError
    from aiohttp.test_utils import make_mocked_request

    from ember.metastore.service import MetaService

    writer = mock.Mock()
    writer.write_headers = mock.AsyncMock()
    closed = ClientConnectionResetError("Cannot write to closing transport")
    writer.send_headers.side_effect = writer.write.side_effect = closed
    state = SimpleNamespace(watch_events=lambda start, key=None, prefix=None: [])
    machine = SimpleNamespace(state=state, listeners=[])
    service = MetaService(runtime=None, machine=machine)  # type: ignore[arg-type]
    streamed = mock.AsyncMock()
    service._stream = streamed  # type: ignore[method-assign]
    request = make_mocked_request("GET", "/meta/watch?prefix=w.&from=1", writer=writer)

    async def watch() -> None:
        with caplog.at_level(logging.DEBUG, logger="ember.metastore.service"):
            await service.watch(request)

    asyncio.run(watch())
    assert writer.send_headers.called  # the headers were tried, and met the closed transport
    assert not streamed.called
    assert "disconnected" in caplog.text
