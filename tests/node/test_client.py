"""The client classifies outcomes: ok, fail (certainly not applied), unknown."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from aiohttp import web

from ember.client import EmberClient, Outcome
from tests.node.cluster import free_ports


async def _with_server(routes: list[web.RouteDef], calls: Any) -> Any:
    app = web.Application()
    app.add_routes(routes)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_ports(1)[0]
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        return await calls(f"http://127.0.0.1:{port}")
    finally:
        await runner.cleanup()


def test_refused_connection_is_fail() -> None:
    """Nothing listening: the request never left, so the outcome is fail."""
    port = free_ports(1)[0]

    async def run() -> Outcome:
        async with EmberClient([f"http://127.0.0.1:{port}"]) as c:
            return await c.put("k", 1)

    assert asyncio.run(run()).type == "fail"


def test_silence_after_sending_is_unknown() -> None:
    """A node that accepts the request and never answers leaves the outcome unknown."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)  # accepts connections (kernel backlog), never answers
    try:

        async def run() -> Outcome:
            url = f"http://127.0.0.1:{sock.getsockname()[1]}"
            async with EmberClient([url], timeout_s=0.5) as c:
                return await c.put("k", 1)

        assert asyncio.run(run()).type == "unknown"
    finally:
        sock.close()


def test_server_errors_follow_the_node_outcome_and_421_redirects() -> None:
    """504 unknown, 503 fail and a 421 followed to the leader it names."""

    async def calls(base: str) -> list[Outcome]:
        async with EmberClient([base]) as c:
            return [await c.get("timeout"), await c.get("refused"), await c.get("moved")]

    async def kv(request: web.Request) -> web.Response:
        key = request.match_info["key"]
        if key == "timeout":
            return web.json_response({"error": "timeout", "outcome": "unknown"}, status=504)
        if key == "refused":
            return web.json_response({"error": "no-leader", "outcome": "fail"}, status=503)
        if request.headers.get("X-Hop"):
            return web.json_response({"value": 42})
        leader = str(request.url.with_path("/leader/kv/moved").with_query(None))
        return web.json_response(
            {"error": "not-leader", "outcome": "fail", "leader_url": leader.rsplit("/kv", 1)[0]},
            status=421,
        )

    async def at_leader(request: web.Request) -> web.Response:
        return web.json_response({"value": 42})

    routes = [web.get("/kv/{key}", kv), web.get("/leader/kv/{key}", at_leader)]
    timeout, refused, moved = asyncio.run(_with_server(routes, calls))
    assert timeout.type == "unknown"
    assert refused.type == "fail"
    assert moved.type == "ok"
    assert moved.value == 42
    assert moved.url is not None
    assert moved.url.endswith("/leader")
