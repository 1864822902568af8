"""The etcd JSON-gateway client: encoding, revision numbering, outcome classification."""

from __future__ import annotations

import asyncio
import base64
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web

from harness.dbs.etcd_client import (
    EtcdClient,
    b64,
    compare,
    int_value,
    is_definite,
    model_revision,
    prefix_end,
    request,
)


def test_keys_and_values_travel_as_base64_and_ints_come_back_as_ints() -> None:
    """What the workload writes is what it reads back."""
    assert base64.b64decode(b64("k1")) == b"k1"
    assert int_value(b64("3")) == 3
    assert int_value(b64("x")) == "x"
    assert int_value(None) is None


def test_prefix_end_covers_exactly_the_prefix() -> None:
    """range_end is the prefix with its last byte incremented."""
    assert base64.b64decode(prefix_end("m/")) == b"m0"


def test_revisions_are_shifted_to_the_models_numbering() -> None:
    """etcd's empty store is at 1, the model's at 0; absent stays 0."""
    assert model_revision("1") == 0
    assert model_revision("7") == 6
    assert model_revision(None) == 0


def test_conditions_map_to_etcd_compares() -> None:
    """exists becomes a create_revision test; revision targets are shifted up."""
    value = compare({"key": "a", "target": "value", "op": "eq", "value": 2})
    assert value == {"key": b64("a"), "target": "VALUE", "result": "EQUAL", "value": b64("2")}
    exists = compare({"key": "a", "target": "exists", "value": True})
    assert (exists["target"], exists["result"], exists["create_revision"]) == (
        "CREATE",
        "GREATER",
        "0",
    )
    absent = compare({"key": "a", "target": "exists", "value": False})
    assert (absent["result"], absent["create_revision"]) == ("EQUAL", "0")
    mod = compare({"key": "a", "target": "mod_revision", "op": "lt", "value": 4})
    assert (mod["target"], mod["result"], mod["mod_revision"]) == ("MOD", "LESS", "5")


def test_writes_map_to_request_ops() -> None:
    """put and delete become request_put and request_delete_range."""
    assert request({"op": "put", "key": "a", "value": 1}) == {
        "request_put": {"key": b64("a"), "value": b64("1")}
    }
    assert request({"op": "delete", "key": "a"}) == {"request_delete_range": {"key": b64("a")}}


def test_only_errors_raised_before_proposing_are_definite() -> None:
    """A learner refusal is a fail; a timeout or leader change may have applied."""
    assert is_definite("etcdserver: rpc not supported for learner")
    assert is_definite("etcdserver: no leader")
    assert not is_definite("etcdserver: request timed out")
    assert not is_definite("etcdserver: leader changed")


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _serve(handler: Handler, scenario: Callable[[EtcdClient], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        app = web.Application()
        app.router.add_route("POST", "/{tail:.*}", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        client = EtcdClient(lambda: [f"http://127.0.0.1:{port}"], timeout_s=1.0)
        try:
            return await scenario(client)
        finally:
            await client.close()
            await runner.cleanup()

    return asyncio.run(main())


def test_an_indeterminate_write_error_is_unknown_but_a_read_error_fails() -> None:
    """'request timed out' on a put is unknown (info); on a get it is a fail."""

    async def handler(_req: web.Request) -> web.StreamResponse:
        return web.json_response({"error": "etcdserver: request timed out", "code": 14}, status=503)

    async def scenario(c: EtcdClient) -> tuple[str, str]:
        return (await c.put("k", 1)).type, (await c.get("k")).type

    assert _serve(handler, scenario) == ("unknown", "fail")


def test_a_put_reports_its_revision_and_a_cas_its_swap() -> None:
    """put's value is the write's revision; cas's is [succeeded, revision]."""

    async def handler(req: web.Request) -> web.StreamResponse:
        if req.path == "/v3/kv/put":
            return web.json_response({"header": {"revision": "5"}})
        return web.json_response({"header": {"revision": "9"}, "succeeded": True})

    async def scenario(c: EtcdClient) -> tuple[Any, Any]:
        return (await c.put("k", 1)).value, (await c.cas("k", 0, 1)).value

    assert _serve(handler, scenario) == (4, [True, 8])


def test_a_refused_connection_is_a_fail() -> None:
    """Nothing listening: the request certainly did not apply."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again before the request: nothing listens

    async def scenario() -> str:
        client = EtcdClient(lambda: [f"http://127.0.0.1:{port}"], timeout_s=1.0)
        try:
            return (await client.put("k", 1)).type
        finally:
            await client.close()

    assert asyncio.run(scenario()) == "fail"


def test_delete_range_and_compact_answer_in_the_models_shapes() -> None:
    """delete says what it deleted; a past read and a compaction shift revisions."""
    seen: list[tuple[str, Any]] = []

    async def handler(req: web.Request) -> web.StreamResponse:
        body = await req.json()
        seen.append((req.path, body))
        if req.path == "/v3/kv/deleterange":
            return web.json_response({"header": {"revision": "8"}, "deleted": "1"})
        if req.path == "/v3/kv/range":
            kv = {"key": b64("m/1"), "value": b64("3"), "mod_revision": "5"}
            return web.json_response({"header": {"revision": "9"}, "kvs": [kv]})
        return web.json_response({"header": {"revision": "9"}})

    async def scenario(c: EtcdClient) -> list[Any]:
        return [(await c.delete("m/1")).value, (await c.range_at("m/", 6)).value,
                (await c.compact(4)).value]  # fmt: skip

    deleted, snapshot, compacted = _serve(handler, scenario)
    assert deleted == {"revision": 7, "deleted": 1}
    assert snapshot == {"at": 6, "kvs": [{"key": "m/1", "value": 3, "mod_revision": 4}]}
    assert compacted == {"compact_revision": 4, "revision": 8}
    assert seen[1][1]["revision"] == "7"  # model 6 is etcd 7
    assert seen[2][1] == {"revision": "5"}


def _watch_lines(*results: dict[str, Any]) -> bytes:
    import json

    return b"".join(json.dumps({"result": r}).encode() + b"\n" for r in results)


def test_a_watch_records_responses_progress_and_a_compaction_refusal() -> None:
    """etcd's responses stay whole (framed); the creation ack is dropped; a
    response with nothing but a header is a progress notification; a start
    below the compaction ends the stream naming the compact revision."""
    from harness.dbs.etcd_client import watch

    ev = {"type": "PUT", "kv": {"key": b64("m/1"), "value": b64("2"), "mod_revision": "6"}}
    gone = {"type": "DELETE", "kv": {"key": b64("m/2"), "mod_revision": "6"}}
    bodies: list[Any] = []

    async def handler(req: web.Request) -> web.StreamResponse:
        create = (await req.json())["create_request"]
        bodies.append(create)
        resp = web.StreamResponse()
        await resp.prepare(req)
        if create.get("start_revision") == "2":
            await resp.write(_watch_lines({"header": {"revision": "9"}, "created": True},
                                          {"header": {"revision": "9"}, "canceled": True,
                                           "compact_revision": "5"}))  # fmt: skip
            return resp
        await resp.write(_watch_lines({"header": {"revision": "6"}, "created": True},
                                      {"header": {"revision": "6"}, "events": [ev, gone]},
                                      {"header": {"revision": "8"}}))  # fmt: skip
        return resp

    async def scenario(c: EtcdClient) -> list[Any]:
        url = c.pick()
        return [await watch(c._http(), url, {"prefix": "m/", "from": 5}, 2.0),
                await watch(c._http(), url, {"key": "m/1", "from": 1}, 2.0),
                await watch(c._http(), url, {"prefix": "m/"}, 2.0)]  # fmt: skip

    (served, cut), (refused, why), (now, _) = _serve(handler, scenario)
    assert cut == "stream ended"
    assert served == {"responses": [
        {"revision": 5, "events": [
            {"key": "m/1", "value": 2, "revision": 5, "type": "PUT"},
            {"key": "m/2", "value": None, "revision": 5, "type": "DELETE"}]},
        {"revision": 7, "progress": True}]}  # fmt: skip
    assert refused == {"responses": [], "compacted": 4}
    assert why == "canceled"
    assert bodies[0]["start_revision"] == "6"
    assert bodies[0]["progress_notify"] is True
    assert base64.b64decode(bodies[1]["key"]) == b"m/1"
    assert "range_end" not in bodies[1]
    assert "start_revision" not in bodies[2]
    assert now["responses"][0]["revision"] == 5


class _NoConnection:
    """An HTTP session whose every request finds no connection in time."""

    def post(self, url: str, **_kw: Any) -> Any:
        return self

    async def __aenter__(self) -> Any:
        raise aiohttp.ConnectionTimeoutError(f"Connection timeout to host {self!r}")

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def close(self) -> None:
        return None


def test_a_write_that_found_no_connection_in_time_certainly_failed() -> None:
    """A connect timeout is raised before anything is sent: a write's outcome is
    fail, not unknown (it was unknown before, which only weakened the check)."""

    async def scenario() -> str:
        client = EtcdClient(lambda: ["http://127.0.0.1:9"], timeout_s=1.0)
        client._http = _NoConnection  # type: ignore[assignment,method-assign]
        out = await client.put("k", 1)
        assert "cannot connect" in str(out.error)
        return out.type

    assert asyncio.run(scenario()) == "fail"
