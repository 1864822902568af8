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


class _ApplyThenVanish:
    """A node that answers its first request, then applies the next one and
    vanishes: it drops the connection and stops listening, so a re-send of
    that request can only be refused."""

    def __init__(self) -> None:
        self.applied: list[bytes] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.decode().split("\r\n"):
                    if line.lower().startswith("content-length:"):
                        length = int(line.split(":", 1)[1])
                request = head + await reader.readexactly(length)
                if not self.applied and b"warm" in head.split(b"\r\n", 1)[0]:
                    body = b'{"value": null}'
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
                    writer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
                    await writer.drain()
                    continue
                self.applied.append(request)
                assert self.server is not None
                self.server.close()  # no more connections: a re-send is refused
                writer.transport.abort()
                return
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


def test_a_drop_after_the_request_was_applied_is_unknown_never_fail() -> None:
    """A node applies a put and drops the reused connection: unknown, and no re-send."""

    async def run() -> tuple[Outcome, Outcome, int]:
        node = _ApplyThenVanish()
        base = await node.start()
        async with EmberClient([base]) as c:
            warm = await c.get("warm")  # leaves a keep-alive connection to reuse
            out = await c.put("k", 1)
        return warm, out, len(node.applied)

    warm, out, applied = asyncio.run(run())
    assert warm.type == "ok"
    assert applied == 1  # the node did act on the put
    assert out.type == "unknown", out


def test_plain_aiohttp_resends_and_reports_a_connect_error_for_an_applied_put() -> None:
    """The hazard the client guards against: aiohttp's own re-send hides the drop."""
    import aiohttp

    async def run() -> tuple[BaseException | None, int]:
        node = _ApplyThenVanish()
        base = await node.start()
        async with aiohttp.ClientSession() as s:
            async with s.get(base + "/kv/warm") as r:
                await r.read()
            try:
                async with s.put(base + "/kv/k", data=b'{"value": 1}') as r:
                    await r.read()
            except aiohttp.ClientError as err:
                return err, len(node.applied)
        return None, len(node.applied)

    err, applied = asyncio.run(run())
    assert applied == 1
    # A connect error is what the client would have read as `fail`.
    assert isinstance(err, aiohttp.ClientConnectorError), repr(err)
