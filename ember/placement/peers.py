"""HTTP calls between nodes for the control plane (placement driver, primaries, leaders)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from ember.runtime import NodeRuntime

STATUS_TIMEOUT_S = 1.5
SURVEY_TIMEOUT_S = 1.0


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
        """The group's leader: see `leader_status`."""
        leader, _ = await self.leader_status(group)
        return leader

    async def leader_status(self, group: str) -> tuple[str | None, dict[str, Any] | None]:
        """The group's leader and the group's status as that leader reports it.

        The local replica's idea of the leader is only a hint: a replica removed
        from the group (or stopped) hears from no leader again and keeps naming
        the one it last knew, which may have been removed too. So the hint is
        believed only when that node says it leads; else every node is asked
        and the one leading in the highest term wins. (node, None) when no node
        claims to lead but some name a leader (the highest-term name).
        """
        me = self.runtime.id
        local = self.runtime.groups.get(group)
        hint = None
        if local is not None and me in _members(local.status()):
            hint = local.raw.leader
        if hint is not None:
            st = await self._group_status(hint, group, STATUS_TIMEOUT_S)
            if _leads(st):
                return hint, st
        return await self._survey(group)

    async def _group_status(self, node: str, group: str, timeout_s: float) -> dict[str, Any] | None:
        if node == self.runtime.id:
            local = self.runtime.groups.get(group)
            return local.status() if local is not None else None
        status, doc = await self.call(node, "GET", "/admin/status", timeout_s=timeout_s)
        if status != 200 or not isinstance(doc, dict):
            return None
        st = doc.get("groups", {}).get(group)
        return st if isinstance(st, dict) else None

    async def _survey(self, group: str) -> tuple[str | None, dict[str, Any] | None]:
        nodes = list(self.runtime.cfg.peers)
        views = await asyncio.gather(
            *(self._group_status(n, group, SURVEY_TIMEOUT_S) for n in nodes)
        )
        # Two nodes may both claim to lead (a deposed leader not told yet): the
        # higher term is the real one.
        leading = [(int(st["term"]), n, st) for n, st in zip(nodes, views, strict=True)
                   if _leads(st) and st is not None]  # fmt: skip
        if leading:
            _, node, st = max(leading, key=lambda t: t[0])
            return node, st
        named = [(int(st.get("term", 0)), str(st["leader"])) for st in views
                 if st is not None and st.get("leader")]  # fmt: skip
        return (max(named)[1], None) if named else (None, None)


def _leads(st: dict[str, Any] | None) -> bool:
    return st is not None and st.get("role") == "leader"


def _members(st: dict[str, Any]) -> set[str]:
    conf = st.get("conf", {})
    return {*conf.get("peers", []), *(conf.get("old_peers") or []), *conf.get("learners", [])}
