"""An async client of the metastore's HTTP API that finds the leader.

`MetaClient(urls)` sends each command to the node it last found leading the
`meta` group, follows 421 redirects, and on a refused connection or a 503
tries the next node, until its deadline. Errors raise `MetaUnavailable`
(`outcome` "fail" when the command certainly did not apply, "unknown" when
it may have), or `MetaRefused` for a 4xx the metastore meant (bad input,
compacted).

Given a `client_id` (unique to this process), every write carries its client
session (ember.metastore.sessions): its number stays the same on every
attempt, so a write sent again after an unknown outcome applies once and is
answered as its first attempt was, rather than applying twice or failing its
own guard.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncGenerator
from typing import Any

import aiohttp

from ember.metastore.sessions import READS

log = logging.getLogger(__name__)


class MetaUnavailable(Exception):  # noqa: N818 -- reads as the state it reports
    """No answer in time; `outcome` says whether the command may have applied."""

    def __init__(self, message: str, outcome: str) -> None:
        super().__init__(message)
        self.outcome = outcome


class MetaRefused(Exception):  # noqa: N818 -- reads as the outcome it reports
    """The metastore refused the command (`code`: bad-request, compacted, ...)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class MetaClient:
    """Metastore commands over HTTP; share one per process, `close()` when done."""

    def __init__(
        self, urls: list[str], timeout_s: float = 10.0, client_id: str | None = None
    ) -> None:
        if not urls:
            raise ValueError("MetaClient needs at least one node URL")
        self.urls = list(urls)
        self.timeout_s = timeout_s
        self.client_id = client_id
        self._leader = self.urls[0]
        self._session: aiohttp.ClientSession | None = None
        self._last_seq = 0
        self._open: set[int] = set()  # writes sent and not yet answered or given up

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    async def close(self) -> None:
        """Close the HTTP session."""
        if self._session is not None:
            await self._session.close()

    async def call(self, op: str, body: dict[str, Any], timeout_s: float | None = None) -> Any:
        """One command (`op` get/range/put/delete/invoke/compact); its JSON result."""
        if self.client_id is None or op in READS:
            return await self._attempts(op, body, timeout_s, None)
        self._last_seq += 1
        seq = self._last_seq
        self._open.add(seq)
        try:
            return await self._attempts(op, body, timeout_s, seq)
        finally:
            self._open.discard(seq)

    async def _attempts(
        self, op: str, body: dict[str, Any], timeout_s: float | None, seq: int | None
    ) -> Any:
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        url, tried, outcome, last = self._leader, 0, "fail", "no node answered"
        told = False
        while time.monotonic() < deadline:
            if seq is not None and outcome == "unknown" and not told:
                told = True  # once a call: the repeats that follow say nothing new
                log.info("metastore %s %d of %s may have applied (%s); sending it again, "
                         "applied once by its session", op, seq, self.client_id, last)  # fmt: skip
            left = max(0.2, deadline - time.monotonic())
            params = {"timeout_s": "4"}
            if seq is not None:
                # Asked afresh each attempt: answers to other writes meanwhile raise it.
                params.update(client=str(self.client_id), seq=str(seq),
                              lowest_open=str(min(self._open)))  # fmt: skip
            try:
                timeout = aiohttp.ClientTimeout(total=min(left, 6.0), sock_connect=1.0)
                async with self._http().post(
                    f"{url}/meta/{op}", json=body, params=params, timeout=timeout
                ) as resp:
                    data = await resp.json(content_type=None)
                    if not isinstance(data, dict):
                        data = {"error": "bad-answer", "message": repr(data)}
                    if resp.status == 200:
                        self._leader = url
                        return data
                    code = data.get("error") if isinstance(data, dict) else None
                    if resp.status == 421 and data.get("leader_url"):
                        url = data["leader_url"]
                        continue
                    if resp.status in (400, 404, 409, 410):
                        raise MetaRefused(str(code), str(data.get("message")))
                    if data.get("outcome") == "unknown":
                        outcome = "unknown"
                    last = f"{url}: {resp.status} {code}"
            except (
                aiohttp.ClientConnectorError,
                aiohttp.ConnectionTimeoutError,  # no connection in time: nothing was sent
                ConnectionRefusedError,
            ) as err:
                last = f"{url}: {err}"
            except (aiohttp.ClientError, TimeoutError) as err:
                outcome, last = "unknown", f"{url}: {err!r}"
            tried += 1
            url = self.urls[tried % len(self.urls)]
            await asyncio.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
        raise MetaUnavailable(f"metastore {op} failed: {last}", outcome)

    async def get(self, key: str) -> dict[str, Any]:
        """One key now: {value, create_revision, mod_revision, version, revision}."""
        result: dict[str, Any] = await self.call("get", {"key": key})
        return result

    async def range(self, prefix: str, revision: int | None = None) -> dict[str, Any]:
        """Every key under `prefix` (at `revision`): {revision, kvs}."""
        body: dict[str, Any] = {"prefix": prefix}
        if revision is not None:
            body["revision"] = revision
        result: dict[str, Any] = await self.call("range", body)
        return result

    async def invoke(self, spec: dict[str, Any]) -> dict[str, Any]:
        """An atomic invoke: {succeeded, branch, revision}."""
        result: dict[str, Any] = await self.call("invoke", spec)
        return result

    async def put(self, key: str, value: Any) -> int:
        """Write one key; the revision after."""
        return int((await self.call("put", {"key": key, "value": value}))["revision"])


async def watch_stream(
    session: aiohttp.ClientSession, url: str, *, prefix: str, start: int
) -> AsyncGenerator[dict[str, Any], None]:
    """Events (and progress lines) of one watch connection, until it ends.

    A node that hosts no metastore answers 421 naming one that does; that one
    is asked instead (once), as `MetaClient.call` follows it for commands."""
    params = {"prefix": prefix, "from": str(start)}
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=1.0, sock_read=5.0)
    for redirects in range(2):
        async with session.get(f"{url}/meta/watch", params=params, timeout=timeout) as resp:
            if resp.status != 200:
                text = await resp.text()
                named = _leader_url(text) if resp.status == 421 and not redirects else None
                if named is None:
                    raise MetaRefused(str(resp.status), text)
                url = named
                continue
            async for line in resp.content:
                if line.strip():
                    yield json.loads(line)
            return


def _leader_url(answer: str) -> str | None:
    """The metastore node a 421 answer names, if it names one."""
    try:
        doc = json.loads(answer)
    except ValueError:
        return None
    named = doc.get("leader_url") if isinstance(doc, dict) else None
    return named.rstrip("/") if isinstance(named, str) and named else None
