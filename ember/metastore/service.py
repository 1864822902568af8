"""The metastore over HTTP: linearizable commands through the `meta` log, and watches.

    POST /meta/get      {key}                      -> {key, value, mod_revision, ..., revision}
    POST /meta/range    {key | prefix, revision?}  -> {revision, kvs: [...]}
    POST /meta/put      {key, value}               -> {revision}
    POST /meta/delete   {key}                      -> {revision, deleted}
    POST /meta/invoke   {if, then, else} | {branches, else} -> {succeeded, branch, revision}
    POST /meta/compact  {revision}                 -> {compact_revision, revision}
    GET  /meta/watch?key=k|prefix=p&from=r         -> NDJSON stream of events

Commands (reads too) go through the group's log on its leader; a node that
is not the leader answers 421 naming it, and a node that does not host the
`meta` group answers 421 naming a node that does, so a client that follows
redirects reaches the leader. A watch is served from the local replica's
applied history: events arrive in revision order, each once, and a client
resumes after a disconnect with `from` = last revision + 1 on any replica.
A `{"progress": revision}` line is sent when idle, so a client learns how
far the replica has applied. A compacted `from` answers 410 `compacted`.

A write may name its client session in the query
(`?client=ID&seq=N&lowest_open=M`, ember.metastore.sessions): sent again
with the same numbers it applies once and answers as the first time did; one
the client no longer awaits answers 409 `stale-request`, not applied.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import msgspec
from aiohttp import web

from ember.api import ApiError, json_object
from ember.metastore.machine import MetastoreMachine, encode
from ember.metastore.sessions import READS, STALE, request_of
from ember.metastore.state import Compacted, Event, MetastoreError
from ember.raft import NotLeader
from ember.runtime import NodeRuntime, NodeStopping, OutcomeUnknown, ProposalDropped
from ember.runtime.group import Proposal
from ember.waiting import wait_set

log = logging.getLogger(__name__)
META_GROUP = "meta"
_PROGRESS_S = 1.0


class MetaService:
    """The /meta routes of one node; `machine` is None where `meta` is not hosted."""

    def __init__(self, runtime: NodeRuntime, machine: MetastoreMachine | None) -> None:
        self.runtime = runtime
        self.machine = machine
        self._wake = asyncio.Event()
        if machine is not None:
            machine.listeners.append(self._on_events)

    def add_routes(self, app: web.Application) -> None:
        """Register the /meta routes."""
        for op in ("get", "range", "put", "delete", "invoke", "compact"):
            app.router.add_post(f"/meta/{op}", self._handler(op))
        app.router.add_get("/meta/watch", self.watch)

    def _on_events(self, events: list[Event]) -> None:
        # Runs in the node loop's thread: wake every watcher, arm a fresh event.
        wake, self._wake = self._wake, asyncio.Event()
        wake.set()

    def _redirect(self) -> ApiError:
        meta = sorted(self.runtime.cfg.meta_nodes)
        target = meta[0] if meta else None
        peer = self.runtime.cfg.peers.get(target or "")
        url = peer.http_url if peer is not None else None
        return ApiError(421, "not-leader", "meta is not hosted here", leader=target, leader_url=url)

    def _handler(self, op: str) -> Any:
        async def handle(request: web.Request) -> web.Response:
            body = await json_object(request)
            if op == "invoke" and self.runtime.failpoints.hit("metastore.compare-create-revision"):
                body = _compare_create_revision(body)
            cmd = {"op": op, "spec": body} if op == "invoke" else {**body, "op": op}
            session = _session(request)
            # A read sent again changes nothing: its (perhaps large) answer is not kept.
            if (
                session is not None
                and op not in READS
                and not self.runtime.failpoints.hit("metastore.ignore-sessions")
            ):
                cmd["session"] = session
            return _json(await self.execute(cmd, _timeout(request)))

        return handle

    async def execute(self, cmd: dict[str, Any], timeout_s: float = 5.0) -> Any:
        """Propose one command on the meta group here; its result, or ApiError.

        One `Proposal` (as the KV table's writes): its future is the command's
        outcome from the moment the node loop takes it, and `proposed` says
        whether the loop appended it. A timeout cancels the future, so the loop
        skips a command not yet appended and nothing is left to retrieve; one
        already appended has an unknown outcome, never a failure (it may commit).
        """
        if self.machine is None:
            raise self._redirect()
        proposal = Proposal(META_GROUP, encode(cmd), asyncio.get_running_loop().create_future())
        try:
            self.runtime.submit(proposal)
            async with asyncio.timeout(timeout_s):  # no task per request, as wait_for makes
                result = await proposal.future
        except NotLeader as err:
            leader = err.leader if err.leader != self.runtime.id else None
            if leader is None:
                raise ApiError(503, "no-leader", f"meta: {err}") from None
            url = self.runtime.cfg.peers[leader].http_url
            raise ApiError(421, "not-leader", str(err), leader=leader, leader_url=url) from None
        except NodeStopping as err:
            raise ApiError(503, "not-applied", f"not proposed: {err}") from None
        except TimeoutError:
            if proposal.proposed:
                raise ApiError(504, "timeout", "proposed, no result in time", "unknown") from None
            raise ApiError(503, "not-applied", f"not proposed within {timeout_s:g} s") from None
        except ProposalDropped as err:
            raise ApiError(503, "not-applied", str(err)) from None
        except OutcomeUnknown as err:
            raise ApiError(504, "timeout", str(err), "unknown") from None
        if isinstance(result, dict) and "error" in result:
            if result.get("code") == STALE:
                raise ApiError(409, STALE, result["error"])
            code = "compacted" if "compacted" in result["error"] else "bad-request"
            raise ApiError(410 if code == "compacted" else 400, code, result["error"])
        return result

    async def watch(self, request: web.Request) -> web.StreamResponse:
        """Stream events on `key` or under `prefix` from revision `from`, as NDJSON."""
        if self.machine is None:
            raise self._redirect()
        key, prefix = request.query.get("key"), request.query.get("prefix")
        if (key is None) == (prefix is None):
            raise ApiError(400, "bad-request", "watch needs exactly one of key= or prefix=")
        try:
            start = int(request.query.get("from", "1"))
        except ValueError:
            raise ApiError(400, "bad-request", "from must be an integer revision") from None
        start = max(start, 1)
        state = self.machine.state
        try:
            state.watch_events(start, key=key, prefix=prefix)
        except Compacted as err:
            raise ApiError(
                410, "compacted", str(err), compact_revision=err.compact_revision
            ) from None
        resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        try:
            # A client may leave before its headers are sent, too (seen in the
            # simulator, where a watcher's process was killed right after asking).
            await resp.prepare(request)
            await self._stream(self.machine, resp, start, key, prefix)
        except ConnectionResetError:
            # The client went away (a watch ends that way normally): nothing to
            # answer, nothing went wrong here.
            log.debug("watch client %s disconnected", request.remote)
        return resp

    async def _stream(
        self,
        machine: MetastoreMachine,
        resp: web.StreamResponse,
        start: int,
        key: str | None,
        prefix: str | None,
    ) -> None:
        while True:
            wake = self._wake  # before reading, so no apply in between is missed
            state = machine.state  # a snapshot install replaces it
            try:
                events = state.watch_events(start, key=key, prefix=prefix)
            except Compacted as err:
                await resp.write(msgspec.json.encode({"error": str(err)}) + b"\n")
                return
            lines = [msgspec.json.encode(ev.to_json()) + b"\n" for ev in events]
            start = max(start, state.revision + 1)
            if lines:
                await resp.write(b"".join(lines))
            else:
                await resp.write(msgspec.json.encode({"progress": state.revision}) + b"\n")
            await wait_set(wake, _PROGRESS_S)


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=msgspec.json.encode(data), status=status, content_type="application/json"
    )


def _session(request: web.Request) -> dict[str, Any] | None:
    """The write's session from the query, or None; 400 naming a malformed part
    (the state machine checks it again, as it checks every command)."""
    query = request.query
    if "client" not in query:
        return None
    numbers = {}
    for name in ("seq", "lowest_open"):
        try:
            numbers[name] = int(query.get(name, ""))
        except ValueError:
            raise ApiError(400, "bad-request", f"session {name} is not an integer") from None
    session = {"client": query["client"], **numbers}
    try:
        request_of({"session": session})
    except MetastoreError as err:
        raise ApiError(400, "bad-request", str(err)) from None
    return session


def _timeout(request: web.Request) -> float:
    try:
        value = float(request.query.get("timeout_s", "5"))
    except ValueError:
        raise ApiError(400, "bad-request", "timeout_s is not a number") from None
    if not 0 < value <= 120:
        raise ApiError(400, "bad-request", "timeout_s must be in (0, 120]")
    return value


def _compare_create_revision(spec: dict[str, Any]) -> dict[str, Any]:
    """The planted `metastore.compare-create-revision`: every `mod_revision`
    comparison of the transaction turned into a `create_revision` one. It
    is written into the log as received, so every replica applies the same
    wrong comparison: only the answers show it, never the replicas' state."""
    conds = spec.get("if")
    if not isinstance(conds, list):
        return spec
    swapped = [{**c, "target": "create_revision"}
               if isinstance(c, dict) and c.get("target") == "mod_revision" else c
               for c in conds]  # fmt: skip
    return {**spec, "if": swapped}
