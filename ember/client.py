"""A Python client for ember nodes that classifies every outcome.

    async with EmberClient(["http://127.0.0.1:8001", ...]) as c:
        out = await c.put("k", 1)      # Outcome(type="ok" | "fail" | "unknown", ...)

Every call returns an `Outcome` instead of raising:

- `ok`: the node answered success; `value` holds the result.
- `fail`: the operation certainly did not take effect: the connection was
  refused or timed out before the request was sent, or the node answered an
  error whose `outcome` is `fail` (bad input, not the leader and no leader
  known, refused before proposing).
- `unknown`: it may have taken effect: a timeout or a dropped connection
  after the request was sent, or a node error whose `outcome` is `unknown`.

A 421 (not the leader) is followed to the leader's address, at most
`max_redirects` times, and the leader of each partition is remembered (keys
are hashed to partitions exactly as the node does).

Routing: with the zone on (`--meta-nodes`), a partition's replicas move and
the ones left out are stopped (docs/rebalance.md, step 5), so the client
keeps a per-partition table: the leader, and the nodes its assignments name
(stable and pending), learned from GET /admin/assignments and the answering
node's /admin/status (node ids mapped to URLs through each URL's /health).
It is refreshed, before the next request, after a 421 or an error, at most
every `_REFRESH_S`; a partition with no leader known goes to one of its
assigned nodes, else to any node. Refreshing never changes an outcome. The node is told a
deadline (`timeout_s`) shorter than the client's, so it usually answers 504
itself rather than leaving the client to guess.

aiohttp re-sends a GET / PUT / DELETE once, inside one `request()` call,
when the connection drops while it is being sent or answered (RFC 9112's
"retrying requests"). If that second send cannot connect, aiohttp reports a
connect error, which reads as `fail`, although the first send may have been
applied. The session's middleware (`_no_hidden_resend`) stops that: a drop
after the connection was made surfaces as `RequestLost` (unknown) at once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote

import aiohttp
import msgspec
from aiohttp import ClientHandlerType, ClientRequest, ClientResponse

from ember.kv import DEFAULT_PARTITIONS, partition_of

OutcomeType = Literal["ok", "fail", "unknown"]
# The node's deadline is this much shorter than the client's.
_SERVER_MARGIN_S = 0.25
_REFRESH_S = 0.5  # at most one routing refresh per this long
_ROUTE_TIMEOUT_S = 2.0
_ZONE = "default"


class RequestLost(aiohttp.ClientConnectionError):
    """The connection dropped after the request may have been sent."""


async def _no_hidden_resend(req: ClientRequest, handler: ClientHandlerType) -> ClientResponse:
    """Client middleware: turn a drop after connecting into `RequestLost`.

    aiohttp re-sends an idempotent request once after `ClientOSError` or
    `ServerDisconnectedError`; any other `ClientError` ends the call, so
    raising one here means the request is sent at most once. Connect errors
    pass unchanged: nothing was sent, so they remain `fail`.
    """
    try:
        return await handler(req)
    except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError):
        raise
    except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError) as err:
        raise RequestLost(f"{type(err).__name__}: {err}") from err


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of one request."""

    type: OutcomeType
    value: Any = None
    error: str | None = None
    status: int | None = None  # HTTP status, when the node answered
    url: str | None = None  # the node that answered (or was tried last)

    @property
    def ok(self) -> bool:
        """Whether the request succeeded."""
        return self.type == "ok"


class EmberClient:
    """Async client over a list of node URLs; use as an async context manager."""

    def __init__(
        self,
        urls: list[str],
        *,
        timeout_s: float = 5.0,
        connect_timeout_s: float = 1.0,
        partitions: int = DEFAULT_PARTITIONS,
        max_redirects: int = 3,
    ) -> None:
        if not urls:
            raise ValueError("EmberClient needs at least one node URL")
        self.urls = [u.rstrip("/") for u in urls]
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.partitions = partitions
        self.max_redirects = max_redirects
        self._leaders: dict[int, str] = {}
        self._hosts: dict[int, list[str]] = {}  # partition -> URLs its assignments name
        self._node_urls: dict[str, str] = {}  # node id -> URL
        self._stale = False
        self._urls_learned = False
        self._refreshed_at = float("-inf")
        self._next = 0
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> EmberClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the HTTP session."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=256),
                middlewares=(_no_hidden_resend,),
                timeout=aiohttp.ClientTimeout(
                    total=self.timeout_s, sock_connect=self.connect_timeout_s
                ),
            )
        return self._session

    # -- KV --------------------------------------------------------------------

    async def get(self, key: str) -> Outcome:
        """Linearizable read; `value` is the value or None."""
        out = await self._kv("GET", key, "", None)
        return _pick(out, "value")

    async def put(self, key: str, value: Any) -> Outcome:
        """Write `value` (any JSON value); ok carries no value."""
        out = await self._kv("PUT", key, "", {"value": value})
        return Outcome("ok", None, None, out.status, out.url) if out.ok else out

    async def cas(self, key: str, expected: Any, value: Any) -> Outcome:
        """Compare-and-set; ok with value [swapped, value before] (None: absent)."""
        out = await self._kv("POST", key, "/cas", {"expected": expected, "value": value})
        if out.ok and isinstance(out.value, dict):
            return Outcome(
                "ok", [out.value.get("ok"), out.value.get("current")], None, out.status, out.url
            )
        return out

    async def delete(self, key: str) -> Outcome:
        """Delete; `value` says whether the key existed."""
        return _pick(await self._kv("DELETE", key, "", None), "existed")

    async def _kv(self, method: str, key: str, suffix: str, body: Any) -> Outcome:
        part = partition_of(key, self.partitions)
        if self._stale and time.monotonic() - self._refreshed_at >= _REFRESH_S:
            await self.refresh_routes()
        base = self._leaders.get(part) or self._pick(part)
        path = f"/kv/{_quote(key)}{suffix}"
        out = await self.request(method, path, body, base=base, partition=part)
        if out.type != "ok" and (out.status is None or out.status >= 500):
            # That node is down, stopped or has no leader to offer: try the
            # next one next time, rather than sticking to a dead leader.
            self._leaders.pop(part, None)
            self.move_on()
            self._stale = True
        return out

    @property
    def current(self) -> str:
        """The node a request sent without one goes to: where the rotation is."""
        return self.urls[self._next % len(self.urls)]

    def move_on(self) -> None:
        """The node the rotation is at failed: the next request sent without
        a node (and the next partition with no leader known) starts at the next."""
        self._next += 1

    def _pick(self, part: int) -> str:
        choices = self._hosts.get(part) or self.urls
        return choices[self._next % len(choices)]

    def route(self, part: int) -> dict[str, Any]:
        """The routing table's entry for a partition: leader URL and assigned URLs."""
        return {"leader": self._leaders.get(part), "hosts": list(self._hosts.get(part, []))}

    # -- routing -------------------------------------------------------------------

    async def refresh_routes(self) -> bool:
        """Learn each partition's assigned nodes and leader from one node; whether one answered."""
        self._refreshed_at = time.monotonic()
        for i in range(len(self.urls)):
            base = self.urls[(self._next + i) % len(self.urls)]
            status = await self._get_json(base, "/admin/status")
            if status is None:
                continue
            # A cluster without the control plane has no assignments (404):
            # the leaders alone still route, and the table is fresh again.
            assigned = await self._get_json(base, "/admin/assignments") or {}
            await self._learn(assigned, status)
            self._stale = False
            return True
        return False

    async def _learn(self, assigned: dict[str, Any], status: dict[str, Any] | None) -> None:
        named: dict[int, set[str]] = {}
        for a in assigned.get("assignments") or []:
            if a.get("zone") == _ZONE and a.get("kind") in ("stable", "pending"):
                value = a.get("value")
                if isinstance(value, list):
                    named.setdefault(int(a["partition"]), set()).update(map(str, value))
        groups = status.get("groups") if status is not None else None
        groups = groups if isinstance(groups, dict) else {}
        leaders = {st.get("leader") for st in groups.values() if isinstance(st, dict)}
        wanted = set().union(*named.values(), {n for n in leaders if isinstance(n, str)})
        if wanted - set(self._node_urls) and not self._urls_learned:
            # Once per client: a node we cannot map (down, or not in `urls`)
            # must not cost a round of /health calls on every refresh.
            self._urls_learned = True
            await self._learn_node_urls()
        self._hosts = {
            p: sorted(self._node_urls[n] for n in ids if n in self._node_urls)
            for p, ids in named.items()
        }
        for gid, st in groups.items():
            leader = st.get("leader") if isinstance(st, dict) else None
            if gid.startswith("part-") and gid[5:].isdigit() and leader in self._node_urls:
                self._leaders[int(gid[5:])] = self._node_urls[leader]

    async def _learn_node_urls(self) -> None:
        for base in self.urls:
            doc = await self._get_json(base, "/health")
            if doc is not None and isinstance(doc.get("node"), str):
                self._node_urls[doc["node"]] = base

    async def _get_json(self, base: str, path: str) -> dict[str, Any] | None:
        timeout = aiohttp.ClientTimeout(total=min(self.timeout_s, _ROUTE_TIMEOUT_S))
        try:
            async with self._http().get(base + path, timeout=timeout) as resp:
                if resp.status != 200:
                    return None
                doc = msgspec.json.decode(await resp.read())
        except (aiohttp.ClientError, TimeoutError, msgspec.DecodeError):
            return None
        return doc if isinstance(doc, dict) else None

    # -- any endpoint -------------------------------------------------------------

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        base: str | None = None,
        partition: int | None = None,
    ) -> Outcome:
        """Send one request (following 421 redirects) and classify the outcome;
        without `base`, to the node the client's rotation is at (`move_on` moves it)."""
        url = base or self.current
        for _ in range(self.max_redirects + 1):
            out, leader_url = await self._once(method, url, path, body)
            if leader_url is None:
                return out
            url = leader_url
            if partition is not None:
                self._leaders[partition] = leader_url
                self._stale = True  # the table sent us to a node that does not lead
        return out

    async def _once(
        self, method: str, base: str, path: str, body: Any
    ) -> tuple[Outcome, str | None]:
        server_timeout = max(0.05, self.timeout_s - _SERVER_MARGIN_S)
        params = {"timeout_s": f"{server_timeout:.3f}"} if path.startswith("/kv/") else None
        data = msgspec.json.encode(body) if body is not None else None
        try:
            async with self._http().request(method, base + path, data=data, params=params) as resp:
                raw = await resp.read()
                status = resp.status
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as err:
            # The request never left: the node cannot have acted on it.
            return Outcome("fail", None, f"connect: {err}", None, base), None
        except TimeoutError:
            return Outcome("unknown", None, "timeout after sending", None, base), None
        except aiohttp.ClientError as err:
            return Outcome("unknown", None, f"connection lost: {err!r}", None, base), None
        return _classify(status, raw, base)


def _classify(status: int, raw: bytes, base: str) -> tuple[Outcome, str | None]:
    try:
        doc = msgspec.json.decode(raw) if raw else {}
    except msgspec.DecodeError:
        doc = None
    if 200 <= status < 300:
        if doc is None:
            return Outcome("unknown", None, "success with an unreadable body", status, base), None
        return Outcome("ok", doc, None, status, base), None
    if not isinstance(doc, dict):
        kind: OutcomeType = "fail" if status < 500 else "unknown"
        return Outcome(kind, None, f"HTTP {status}", status, base), None
    error = f"{doc.get('error', 'error')}: {doc.get('message', '')}"
    if status == 421 and isinstance(doc.get("leader_url"), str):
        return Outcome("fail", doc, error, status, base), doc["leader_url"]
    kind = "unknown" if doc.get("outcome") == "unknown" else "fail"
    if doc.get("outcome") not in ("fail", "unknown") and status >= 500:
        kind = "unknown"
    return Outcome(kind, doc, error, status, base), None


def _pick(out: Outcome, field: str) -> Outcome:
    if out.ok and isinstance(out.value, dict):
        return Outcome("ok", out.value.get(field), None, out.status, out.url)
    return out


def _quote(key: str) -> str:
    return quote(key, safe="")


__all__ = ["EmberClient", "Outcome", "OutcomeType", "RequestLost"]
