"""A lean HTTP/1.1 client for the node benchmark: the KV calls and nothing else.

The benchmark's clients run on the same 2 cores as the three nodes, so every
millisecond of CPU they spend is one the nodes cannot: with `EmberClient`
(aiohttp) the client took about a fifth of the CPU of an acknowledged put,
which then measured the client as much as the node. This one keeps one
keep-alive connection per node and client, writes each request with one
`write`, and parses only the status line, Content-Length and the JSON body.

It classifies outcomes as `EmberClient` does, for what the benchmark counts:
2xx ok; 421 follows `leader_url` (remembered per partition); another error
is `fail` or `unknown` by its `outcome`; a timeout or a dropped connection
after sending is `unknown`, a refused connect `fail`.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote, urlsplit

import msgspec

from ember.kv import partition_of

_SERVER_MARGIN_S = 0.25


class LeanClient:
    """KV puts and gets over raw keep-alive connections (async context manager)."""

    def __init__(self, urls: list[str], *, timeout_s: float, partitions: int) -> None:
        self.urls = [u.rstrip("/") for u in urls]
        self.timeout_s = timeout_s
        self.partitions = partitions
        self._query = f"?timeout_s={max(0.05, timeout_s - _SERVER_MARGIN_S):.3f}"
        self._leaders: dict[int, str] = {}
        self._conns: dict[str, tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}
        self._next = 0

    async def __aenter__(self) -> LeanClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        for _, writer in self._conns.values():
            writer.close()
        self._conns.clear()

    async def put(self, key: str, value: Any) -> str:
        """Write; the outcome type ("ok", "fail" or "unknown")."""
        return await self._kv("PUT", key, msgspec.json.encode({"value": value}))

    async def get(self, key: str) -> str:
        """Linearizable read; the outcome type."""
        return await self._kv("GET", key, b"")

    async def _kv(self, method: str, key: str, body: bytes) -> str:
        part = partition_of(key, self.partitions)
        base = self._leaders.get(part) or self.urls[self._next % len(self.urls)]
        path = f"/kv/{quote(key, safe='')}{self._query}"
        for _ in range(4):
            status, doc = await self._once(method, base, path, body)
            if status == 421 and isinstance(doc, dict) and isinstance(doc.get("leader_url"), str):
                base = self._leaders[part] = doc["leader_url"].rstrip("/")
                continue
            break
        if 200 <= status < 300:
            return "ok"
        if status < 0 or status >= 500:
            self._leaders.pop(part, None)  # that node is down or leaderless: try another
            self._next += 1
        if status == -1:
            return "fail"  # never connected: nothing was sent
        if isinstance(doc, dict) and doc.get("outcome") == "fail":
            return "fail"
        return "unknown" if status < 0 or status >= 500 else "fail"

    async def _once(self, method: str, base: str, path: str, body: bytes) -> tuple[int, Any]:
        """(HTTP status, decoded body); status -1 if the connect failed, -2 if
        the request may have been sent but no answer came."""
        conn = self._conns.get(base)
        if conn is None:
            where = urlsplit(base)
            try:
                async with asyncio.timeout(1.0):
                    conn = await asyncio.open_connection(where.hostname, where.port)
            except (OSError, TimeoutError):
                return -1, None
            self._conns[base] = conn
        reader, writer = conn
        head = f"{method} {path} HTTP/1.1\r\nHost: bench\r\nContent-Length: {len(body)}\r\n"
        try:
            async with asyncio.timeout(self.timeout_s):
                writer.write(f"{head}Content-Type: application/json\r\n\r\n".encode() + body)
                status_and_headers = await reader.readuntil(b"\r\n\r\n")
                lines = status_and_headers.split(b"\r\n")
                status = int(lines[0].split(b" ", 2)[1])
                length = 0
                for line in lines[1:]:
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                raw = await reader.readexactly(length)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError, IndexError):
            self._conns.pop(base, None)
            writer.close()
            return -2, None
        try:
            return status, msgspec.json.decode(raw) if raw else None
        except msgspec.DecodeError:
            return status, None
