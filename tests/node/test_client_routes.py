"""The client's routing table: after an error it learns from /admin/assignments
which nodes host a partition and sends the next request there, not to another
stopped replica; the failed request's outcome is left as the node classified it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from ember.client import EmberClient, Outcome
from tests.node.cluster import free_ports


async def _serve(node: str, hosting: bool, hits: list[str]) -> tuple[web.AppRunner, str]:
    async def kv(request: web.Request) -> web.Response:
        hits.append(node)
        if hosting:
            return web.json_response({"value": 7})
        # A stopped replica that knows no leader: certainly not applied.
        return web.json_response({"error": "no-leader", "outcome": "fail"}, status=503)

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"ok": True, "node": node})

    async def assignments(request: web.Request) -> web.Response:
        rows = [{"zone": "default", "partition": 0, "kind": "stable", "value": ["n3"]}]
        return web.json_response({"revision": 9, "assignments": rows})

    async def status(request: web.Request) -> web.Response:
        return web.json_response({"node": node, "groups": {}})

    app = web.Application()
    app.add_routes([web.get("/kv/{key}", kv), web.get("/health", health),
                    web.get("/admin/assignments", assignments),
                    web.get("/admin/status", status)])  # fmt: skip
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_ports(1)[0]
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"


async def _cluster(
    calls: Callable[[list[str], list[str]], Awaitable[Any]],
) -> Any:
    hits: list[str] = []
    servers = [await _serve(n, n == "n3", hits) for n in ("n1", "n2", "n3")]
    try:
        return await calls([url for _, url in servers], hits)
    finally:
        for runner, _ in servers:
            await runner.cleanup()


def test_after_an_error_the_next_request_goes_to_an_assigned_node() -> None:
    async def calls(urls: list[str], hits: list[str]) -> tuple[Outcome, Outcome, list[str]]:
        async with EmberClient(urls, partitions=1) as c:
            first = await c.get("k")  # n1: its replica is stopped
            second = await c.get("k")
            return first, second, list(hits)

    first, second, hits = asyncio.run(_cluster(calls))
    assert (first.type, first.status) == ("fail", 503)
    assert (second.type, second.value) == ("ok", 7)
    assert hits == ["n1", "n3"]  # never n2, the next node in the list


def test_routes_are_learned_on_demand_only() -> None:
    async def calls(urls: list[str], hits: list[str]) -> dict[str, Any]:
        async with EmberClient(urls, partitions=1) as c:
            before = c.route(0)
            assert await c.refresh_routes()
            return {"before": before, "after": c.route(0), "n3": urls[2]}

    got = asyncio.run(_cluster(calls))
    assert got["before"] == {"leader": None, "hosts": []}
    assert got["after"] == {"leader": None, "hosts": [got["n3"]]}
