"""The node's HTTP API (aiohttp): KV operations and admin endpoints.

Every answer is JSON. An error is `{"error": code, "message": why,
"outcome": "fail" | "unknown"}` with a 4xx/5xx status: `fail` means the
operation certainly did not take effect, `unknown` that it may have (the
client's classification follows it). A request for a group this node does
not lead answers 421 with `leader` and `leader_url` when a leader is known
(503 when none is), so the client retries there.

    GET    /kv/{key}                      -> {"value": v}
    PUT    /kv/{key}        {"value": v}  -> {}
    POST   /kv/{key}/cas    {"expected": e, "value": v} -> {"ok": bool, "current": v}
    DELETE /kv/{key}                      -> {"existed": bool}
    (each takes ?timeout_s=, default 5)
    GET    /health
    GET    /admin/status
    POST   /admin/change-peers         {group, peers, learners?, token, term?, timeout_s?}
    POST   /admin/change-peers/submit  same body -> 202 {"id": ...}
    GET    /admin/changes/{id}
    POST   /admin/transfer-leader      {group, to}
    GET    /admin/failpoints
    POST   /admin/failpoints/{name}    {delay_ms?, probability?, peer?, one_shot?, point?}
    DELETE /admin/failpoints/{name}
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from aiohttp import web

from ember.failpoints import FailpointError, Failpoints
from ember.kv import Command, KvTable, NotProposed, ResultUnknown
from ember.raft import (
    ChangeBusy,
    ChangeResult,
    InvalidConfig,
    NotLeader,
    RaftError,
    StaleToken,
    WrongTerm,
)
from ember.runtime import NodeRuntime, NodeStopping, OutcomeUnknown, ProposalDropped

log = logging.getLogger(__name__)
DEFAULT_TIMEOUT_S = 5.0
MAX_TIMEOUT_S = 120.0
MAX_KEY_BYTES = 1024
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ApiError(Exception):
    """An error answer: HTTP status, code, message, outcome and extra fields."""

    def __init__(
        self, status: int, code: str, message: str, outcome: str = "fail", **extra: Any
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.outcome, self.extra = status, code, outcome, extra


class PutBody(msgspec.Struct, forbid_unknown_fields=True):
    value: Any


class CasBody(msgspec.Struct, forbid_unknown_fields=True):
    expected: Any
    value: Any


class ChangeBody(msgspec.Struct, forbid_unknown_fields=True):
    group: str
    peers: list[str]
    token: int
    learners: list[str] = []
    term: int | None = None
    timeout_s: float = 30.0


class TransferBody(msgspec.Struct, forbid_unknown_fields=True):
    group: str
    to: str


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=msgspec.json.encode(data), status=status, content_type="application/json"
    )


async def _body(request: web.Request, kind: type[Any]) -> Any:
    raw = await request.read()
    try:
        return msgspec.json.decode(raw, type=kind)
    except msgspec.ValidationError as err:
        raise ApiError(400, "bad-request", f"invalid body: {err}") from None
    except msgspec.DecodeError as err:
        raise ApiError(400, "bad-request", f"body is not valid JSON: {err}") from None


async def json_object(request: web.Request, what: str = "body") -> dict[str, Any]:
    """The request's JSON object body ({} when empty); 400 naming what is wrong."""
    raw = await request.read()
    try:
        body = msgspec.json.decode(raw) if raw.strip() else {}
    except msgspec.DecodeError as err:
        raise ApiError(400, "bad-request", f"body is not valid JSON: {err}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "bad-request", f"{what} must be a JSON object")
    return body


def _timeout(request: web.Request) -> float:
    text = request.query.get("timeout_s")
    if text is None:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        raise ApiError(400, "bad-request", f"timeout_s {text!r} is not a number") from None
    if not 0 < value <= MAX_TIMEOUT_S:
        raise ApiError(400, "bad-request", f"timeout_s must be in (0, {MAX_TIMEOUT_S}]")
    return value


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Translate every failure into one JSON error answer."""
    try:
        return await handler(request)
    except ApiError as err:
        body = {"error": err.code, "message": str(err), "outcome": err.outcome, **err.extra}
        return _json(body, err.status)
    except web.HTTPException as err:
        # Routing errors (404, 405) and aiohttp's own 4xx: JSON like the rest.
        code = "not-found" if err.status == 404 else "bad-request"
        body = {"error": code, "message": err.reason, "outcome": "fail"}
        return _json(body, err.status)
    except Exception:
        log.exception("unexpected error in %s %s", request.method, request.path)
        # It may have failed after proposing: the client cannot rule it out.
        body = {"error": "internal", "message": "internal error", "outcome": "unknown"}
        return _json(body, 500)


# The routes whose success answer `http.drop-reply` may swallow: what a client
# asks to read or change. Not the watch (a stream already sent when its
# handler returns), nor status, health or the failpoints themselves, so the
# harness can still see the node and switch the fault off.
DROPPABLE_PREFIXES = ("/kv/", "/meta/", "/admin/zones/", "/admin/cancel-rebalance")
UNDROPPABLE = frozenset({"/meta/watch"})


def drop_replies(failpoints: Failpoints) -> Any:
    """Middleware for the `http.drop-reply` failpoint: the request is served
    in full, then its connection is closed before the answer goes out, so the
    client learns nothing of an outcome the node reached (an unknown one,
    where exactly-once writes and the checkers' handling of `info` are tried).
    Error answers pass: the fault is a lost success, not a refused request."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        response = await handler(request)
        if (
            failpoints.any_enabled
            and response.status < 300
            and request.path.startswith(DROPPABLE_PREFIXES)
            and request.path not in UNDROPPABLE
            and failpoints.hit("http.drop-reply") is not None
            and request.transport is not None
        ):
            log.info("failpoint http.drop-reply: %s %s served; its %d answer is dropped",
                     request.method, request.path_qs, response.status)  # fmt: skip
            # Closed before aiohttp writes: writing to a closing transport is
            # the ConnectionError aiohttp takes for a client gone, quietly.
            request.transport.close()
        return response

    return middleware


class Api:
    """The route handlers over one node's runtime and KV table."""

    def __init__(self, runtime: NodeRuntime, table: KvTable) -> None:
        self.runtime = runtime
        self.table = table
        self.changes: dict[str, dict[str, Any]] = {}
        self._change_ids = itertools.count(1)
        self._background: set[asyncio.Task[Any]] = set()

    def app(self) -> web.Application:
        """The aiohttp application with every route."""
        app = web.Application(
            middlewares=[drop_replies(self.runtime.failpoints), json_errors],
            client_max_size=4 << 20,
        )
        app.add_routes(
            [
                web.get("/health", self.health),
                web.get("/kv/{key}", self.kv_get),
                web.put("/kv/{key}", self.kv_put),
                web.post("/kv/{key}/cas", self.kv_cas),
                web.delete("/kv/{key}", self.kv_delete),
                web.get("/admin/status", self.status),
                web.post("/admin/change-peers", self.change_peers),
                web.post("/admin/change-peers/submit", self.change_submit),
                web.get("/admin/changes/{id}", self.change_status),
                web.post("/admin/transfer-leader", self.transfer_leader),
                web.post("/admin/report-applied", self.report_applied),
                web.get("/admin/failpoints", self.failpoints_list),
                web.post("/admin/failpoints/{name}", self.failpoint_enable),
                web.delete("/admin/failpoints/{name}", self.failpoint_disable),
            ]
        )
        return app

    # -- KV ----------------------------------------------------------------

    def _key(self, request: web.Request) -> str:
        key = request.match_info["key"]
        if not key or len(key.encode()) > MAX_KEY_BYTES:
            raise ApiError(400, "bad-request", f"key must be 1..{MAX_KEY_BYTES} bytes")
        return key

    async def _execute(self, cmd: Command, timeout_s: float) -> Any:
        try:
            return await self.table.execute(cmd, timeout_s)
        except NotLeader as err:
            raise self._not_leader(self.table.group_of(cmd.key), err) from None
        except (NotProposed, ProposalDropped, NodeStopping) as err:
            raise ApiError(503, "not-applied", str(err)) from None
        except (ResultUnknown, OutcomeUnknown) as err:
            raise ApiError(504, "timeout", str(err), outcome="unknown") from None

    def _not_leader(self, group: str, err: NotLeader) -> ApiError:
        leader = err.leader if err.leader != self.runtime.id else None
        if leader is None:
            return ApiError(503, "no-leader", f"{group}: {err}", group=group)
        peer = self.runtime.cfg.peers.get(leader)
        url = peer.http_url if peer is not None else None
        return ApiError(421, "not-leader", f"{group}: {err}", leader=leader, leader_url=url)

    async def kv_get(self, request: web.Request) -> web.Response:
        """Linearizable read of one key."""
        value = await self._execute(Command(op="get", key=self._key(request)), _timeout(request))
        return _json({"value": value})

    async def kv_put(self, request: web.Request) -> web.Response:
        """Write one key."""
        key, timeout = self._key(request), _timeout(request)
        body = await _body(request, PutBody)
        await self._execute(Command(op="put", key=key, value=body.value), timeout)
        return _json({})

    async def kv_cas(self, request: web.Request) -> web.Response:
        """Compare-and-set: write `value` if the key holds `expected` (null: absent)."""
        key, timeout = self._key(request), _timeout(request)
        body = await _body(request, CasBody)
        cmd = Command(op="cas", key=key, value=body.value, expected=body.expected)
        ok, current = await self._execute(cmd, timeout)
        return _json({"ok": ok, "current": current})

    async def kv_delete(self, request: web.Request) -> web.Response:
        """Delete one key."""
        cmd = Command(op="delete", key=self._key(request))
        existed = await self._execute(cmd, _timeout(request))
        return _json({"existed": existed})

    # -- admin ---------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        """Liveness: the process answers."""
        return _json({"ok": True, "node": self.runtime.id})

    async def status(self, request: web.Request) -> web.Response:
        """Per-group Raft state (role, term, leader, indexes, configuration, stage, token)."""
        return _json(self.runtime.status())

    async def report_applied(self, request: web.Request) -> web.Response:
        """Write every group's applied state to the audit log now (the harness
        asks before it collects the logs, docs/events.md)."""
        return _json({"reported": self.runtime.report_applied("collect")})

    def _group(self, group: str) -> str:
        if group not in self.runtime.groups:
            raise ApiError(404, "unknown-group", f"no group {group!r} on this node")
        return group

    async def _start_change(self, body: ChangeBody) -> asyncio.Future[ChangeResult]:
        group = self._group(body.group)
        known = self.runtime.cfg.peers
        unknown = sorted(p for p in {*body.peers, *body.learners} if p not in known)
        if unknown:
            raise ApiError(400, "bad-request", f"unknown node(s) {unknown}; known: {sorted(known)}")
        if not 0 < body.timeout_s <= MAX_TIMEOUT_S * 5:
            raise ApiError(400, "bad-request", "timeout_s out of range")
        try:
            return await self.runtime.change_peers(
                group, body.peers, body.learners, body.token, body.term
            )
        except NotLeader as err:
            raise self._not_leader(group, err) from None
        except ChangeBusy as err:
            # `settling`: a new leader not ready yet, worth asking again (docs/node.md).
            raise ApiError(409, _raft_code(err), str(err), settling=err.settling) from None
        except (StaleToken, WrongTerm) as err:
            raise ApiError(409, _raft_code(err), str(err)) from None
        except (InvalidConfig, RaftError, ValueError) as err:
            raise ApiError(400, "invalid-config", str(err)) from None

    def _track(self, body: ChangeBody, fut: asyncio.Future[ChangeResult]) -> str:
        # Node-qualified: a change submitted to the next leader gets a fresh id.
        change_id = f"{self.runtime.id}-c{next(self._change_ids)}"
        record: dict[str, Any] = {
            "id": change_id,
            "group": body.group,
            "peers": body.peers,
            "learners": body.learners,
            "token": body.token,
            "state": "running",
            "result": None,
        }
        self.changes[change_id] = record

        def done(f: asyncio.Future[ChangeResult]) -> None:
            record["state"] = "done"
            record["result"] = msgspec.to_builtins(f.result()) if not f.cancelled() else None

        fut.add_done_callback(done)
        return change_id

    async def change_peers(self, request: web.Request) -> web.Response:
        """Change a group's peers and return when the change is done (or 504 with its id)."""
        body = await _body(request, ChangeBody)
        fut = await self._start_change(body)
        change_id = self._track(body, fut)
        try:
            result = await asyncio.wait_for(asyncio.shield(fut), body.timeout_s)
        except TimeoutError:
            msg = f"change {change_id} not done in {body.timeout_s}s; poll its status"
            raise ApiError(504, "timeout", msg, outcome="unknown", id=change_id) from None
        return _json({"id": change_id, **msgspec.to_builtins(result)})

    async def change_submit(self, request: web.Request) -> web.Response:
        """Start a change and return its id at once (poll /admin/changes/{id})."""
        body = await _body(request, ChangeBody)
        fut = await self._start_change(body)
        return _json({"id": self._track(body, fut)}, 202)

    async def change_status(self, request: web.Request) -> web.Response:
        """The state of a submitted change: running, or done with its result."""
        record = self.changes.get(request.match_info["id"])
        if record is None:
            raise ApiError(404, "unknown-change", f"no change {request.match_info['id']!r}")
        return _json(record)

    async def transfer_leader(self, request: web.Request) -> web.Response:
        """Ask the group's leader to hand leadership to `to`."""
        body = await _body(request, TransferBody)
        group = self._group(body.group)
        try:
            await self.runtime.call(group, lambda g: g.raw.transfer_leader(body.to))
        except NotLeader as err:
            raise self._not_leader(group, err) from None
        except RaftError as err:
            raise ApiError(400, "invalid-config", str(err)) from None
        return _json({"ok": True})

    async def failpoints_list(self, request: web.Request) -> web.Response:
        """Every failpoint, on or off, with its parameters."""
        return _json(self.runtime.failpoints.list())

    async def failpoint_enable(self, request: web.Request) -> web.Response:
        """Switch a failpoint on with the body's parameters."""
        params = await json_object(request, "failpoint parameters")
        try:
            fp = self.runtime.failpoints.enable(request.match_info["name"], params)
        except FailpointError as err:
            raise ApiError(400, "bad-failpoint", str(err)) from None
        return _json(fp.to_json())

    async def failpoint_disable(self, request: web.Request) -> web.Response:
        """Switch a failpoint off."""
        try:
            was_on = self.runtime.failpoints.disable(request.match_info["name"])
        except FailpointError as err:
            raise ApiError(400, "bad-failpoint", str(err)) from None
        return _json({"was_enabled": was_on})


def _raft_code(err: RaftError) -> str:
    return {ChangeBusy: "change-busy", StaleToken: "stale-token", WrongTerm: "wrong-term"}.get(
        type(err), "refused"
    )
