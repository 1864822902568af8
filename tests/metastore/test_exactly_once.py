"""A metastore command the client sends again after an unknown outcome applies
once, and the retry is told what the first attempt did.

Before, `MetaClient` sent a command again on the next node after a 504 (the
entry was appended, its result unheard) as a new command: a put applied twice
and a guarded invoke whose first attempt applied saw its own write fail the
compare, so `POST /admin/zones/default` answered "the zone changed meanwhile"
for a change it had made, and a primary took a lease renewal it had written
for a lease lost. Now each write carries the client's session and sequence
number (ember.metastore.sessions) and the state machine answers a repeat from
what it remembers.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any, cast

import aiohttp
import msgspec
from aiohttp import web
from aiohttp.test_utils import TestServer

from ember.api import json_errors
from ember.failpoints import Failpoints
from ember.metastore.client import MetaClient, MetaUnavailable
from ember.metastore.machine import MetastoreMachine
from ember.metastore.service import MetaService
from ember.raft import Entry
from ember.runtime import OutcomeUnknown
from ember.runtime.group import Proposal


class _Runtime:
    """Commits every proposal at once into one machine; the answers of the
    first `lose` proposals are lost after they applied (the loop's leadership
    ended before the caller heard: an unknown outcome)."""

    id = "n1"

    def __init__(self, machine: MetastoreMachine, lose: int) -> None:
        self.failpoints = Failpoints(random.Random(0))
        self.machine = machine
        self.lose = lose
        self.applied: list[bytes] = []

    def submit(self, item: Proposal) -> None:
        item.proposed = True
        self.applied.append(item.data)
        entry = Entry(term=1, index=self.machine.applied + 1, data=item.data)
        result = self.machine.apply(entry)
        if self.lose > 0:
            self.lose -= 1
            item.future.set_exception(OutcomeUnknown("leadership lost before the answer"))
        else:
            item.future.set_result(result)


async def _served(
    lose: int, client_id: str | None, talk: Callable[[MetaClient], Awaitable[Any]]
) -> tuple[Any, MetastoreMachine, _Runtime]:
    machine = MetastoreMachine()
    runtime = _Runtime(machine, lose=0)
    service = MetaService(cast(Any, runtime), machine)
    app = web.Application(middlewares=[json_errors])
    service.add_routes(app)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    client = MetaClient([str(server.make_url("")).rstrip("/")], timeout_s=5, client_id=client_id)
    try:
        runtime.lose = lose
        answer = await talk(client)
    finally:
        await client.close()
        await server.close()
    return answer, machine, runtime


def _guarded_put(key: str, mod_revision: int, value: Any) -> dict[str, Any]:
    return {"if": [{"key": key, "target": "mod_revision", "value": mod_revision}],
            "then": [{"op": "put", "key": key, "value": value}], "else": []}  # fmt: skip


def test_a_guarded_invoke_whose_first_attempt_applied_answers_succeeded() -> None:
    async def talk(client: MetaClient) -> Any:
        return await client.invoke(_guarded_put("zone", 0, {"replicas": 3}))

    answer, machine, runtime = asyncio.run(_served(1, "n1/1", talk))
    assert len(runtime.applied) == 2  # the first attempt and its repeat reached the log
    assert answer["succeeded"] is True
    assert answer["revision"] == 1 == machine.state.revision
    assert machine.state.kv["zone"].version == 1


def test_a_put_sent_twice_applies_once() -> None:
    async def talk(client: MetaClient) -> Any:
        return await client.put("k", "v")

    revision, machine, runtime = asyncio.run(_served(1, "n1/1", talk))
    assert len(runtime.applied) == 2
    assert revision == 1 == machine.state.revision
    assert machine.state.kv["k"].version == 1


def test_without_a_session_a_repeat_is_a_new_command() -> None:
    """The API's contract for clients that send no session (the harness's own
    workloads, which never resend): each request is one command. This is what
    the control plane's client did before: a put applied twice, a guarded
    invoke answered as failed for the write it made."""

    async def put(client: MetaClient) -> Any:
        return await client.put("k", "v")

    revision, machine, _ = asyncio.run(_served(1, None, put))
    assert revision == 2 == machine.state.kv["k"].version

    async def invoke(client: MetaClient) -> Any:
        return await client.invoke(_guarded_put("zone", 0, {"replicas": 3}))

    answer, machine, _ = asyncio.run(_served(1, None, invoke))
    assert (answer["succeeded"], machine.state.kv["zone"].version) == (False, 1)


def test_reads_carry_no_session_and_writes_number_on() -> None:
    async def talk(client: MetaClient) -> Any:
        await client.put("a", 1)
        await client.get("a")
        await client.put("b", 2)
        return None

    _, machine, runtime = asyncio.run(_served(0, "n1/1", talk))
    commands = [msgspec.msgpack.decode(data) for data in runtime.applied]
    seqs = [cmd.get("session", {}).get("seq") for cmd in commands]
    assert seqs == [1, None, 2]
    assert machine.state.revision == 2


async def _post_all(
    paths: list[str], body: dict[str, Any] | None = None
) -> tuple[list[tuple[int, dict[str, Any]]], MetastoreMachine]:
    """Raw POSTs (of a put, unless `body`) to one served machine, in turn."""
    machine = MetastoreMachine()
    app = web.Application(middlewares=[json_errors])
    MetaService(cast(Any, _Runtime(machine, lose=0)), machine).add_routes(app)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    answers = []
    try:
        async with aiohttp.ClientSession() as http:
            for path in paths:
                sent = body if body is not None else {"key": "k", "value": 1}
                async with http.post(server.make_url(path), json=sent) as r:
                    answers.append((r.status, await r.json()))
    finally:
        await server.close()
    return answers, machine


def test_the_session_in_the_query_is_checked_and_a_stale_copy_refused() -> None:
    answers, _ = asyncio.run(
        _post_all(
            [
                "/meta/put?client=c1&seq=two&lowest_open=1",
                "/meta/put?client=c1&seq=1&lowest_open=2",
                "/meta/put?client=c1&seq=2&lowest_open=2",
                "/meta/put?client=c1&seq=1&lowest_open=1",  # a late copy of one given up
            ]
        )
    )
    (bad_number, bad_order, applied, stale) = answers
    assert bad_number[0] == 400
    assert "seq is not an integer" in bad_number[1]["message"]
    assert bad_order[0] == 400
    assert "lowest_open <= seq" in bad_order[1]["message"]
    assert applied == (200, {"revision": 1})
    assert (stale[0], stale[1]["error"], stale[1]["outcome"]) == (409, "stale-request", "fail")


def test_a_read_in_a_session_is_not_remembered() -> None:
    """A read sent again changes nothing, so its answer (a range may be large)
    is not kept for repeats."""
    answers, machine = asyncio.run(
        _post_all(["/meta/range?client=c1&seq=1&lowest_open=1"], {"prefix": "k"})
    )
    assert answers[0][0] == 200
    assert machine.sessions.clients == {}


class _NoConnection:
    """An HTTP session whose every request finds no connection in time."""

    closed = False

    def post(self, url: str, **_kw: Any) -> Any:
        return self

    async def __aenter__(self) -> Any:
        raise aiohttp.ConnectionTimeoutError("Connection timeout to host")

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def close(self) -> None:
        return None


def test_a_write_that_never_found_a_connection_certainly_failed() -> None:
    """A connect timeout comes before anything is sent: the outcome is fail
    (it was unknown, and the client said it was sending a write again)."""

    async def talk() -> MetaUnavailable:
        client = MetaClient(["http://127.0.0.1:9"], timeout_s=0.5, client_id="n1/1")
        client._session = cast(Any, _NoConnection())
        try:
            await client.put("k", 1)
        except MetaUnavailable as err:
            return err
        raise AssertionError("a put with no connection answered")

    err = asyncio.run(talk())
    assert err.outcome == "fail"
    assert "Connection timeout" in str(err)
