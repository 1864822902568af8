"""HTTP calls between nodes for the control plane (placement driver, primaries, leaders)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from ember.runtime import NodeRuntime


class Peers:
    """Posts JSON to other nodes by id; an unreachable node answers status 0."""

    def __init__(self, runtime: NodeRuntime) -> None:
        self.runtime = runtime
        self._session: aiohttp.ClientSession | None = None

    def url(self, node: str) -> str:
        """A node's HTTP base URL."""
        return self.runtime.cfg.peers[node].http_url

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    async def close(self) -> None:
        """Close the shared session."""
        if self._session is not None:
            await self._session.close()

    async def call(
        self, node: str, method: str, path: str, body: Any = None, timeout_s: float = 3.0
    ) -> tuple[int, Any]:
        """(HTTP status, decoded JSON); (0, reason) if the node could not be reached."""
        target = node if node.startswith("http") else self.url(node)
        timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=min(1.0, timeout_s))
        try:
            async with self._http().request(
                method, target + path, json=body, timeout=timeout
            ) as resp:
                return resp.status, await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as err:
            return 0, repr(err)

    async def alive(self, nodes: list[str]) -> set[str]:
        """The nodes among `nodes` that answer /health now (this node always counts)."""
        me = self.runtime.id

        async def probe(node: str) -> bool:
            if node == me:
                return True
            status, _ = await self.call(node, "GET", "/health", timeout_s=1.0)
            return status == 200

        answers = await asyncio.gather(*(probe(n) for n in nodes))
        return {n for n, ok in zip(nodes, answers, strict=True) if ok}

    async def group_leader(self, group: str) -> str | None:
        """The group's leader as this node knows it, else as another node reports it."""
        local = self.runtime.groups.get(group)
        if local is not None and local.raw.leader is not None:
            return local.raw.leader
        for node in self.runtime.cfg.peers:
            status, doc = await self.call(node, "GET", "/admin/status", timeout_s=1.0)
            if status == 200 and isinstance(doc, dict):
                leader = doc.get("groups", {}).get(group, {}).get("leader")
                if leader:
                    return str(leader)
        return None
