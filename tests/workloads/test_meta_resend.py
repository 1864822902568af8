"""Traffic `resend`: a metastore write whose outcome is unknown is sent again in
the worker's client session, with the same number, and completes as its last
attempt was answered, unknown if none answered after an unknown one."""

from __future__ import annotations

import asyncio
import random
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

import pytest

from ember.client import Outcome
from harness import plan as plans
from harness.dbs.ember_run import _meta_sessions
from harness.dbs.etcd_run import SYSTEM as ETCD
from workloads import meta_traffic
from workloads.generator import Context, Op
from workloads.metastore import FULL_MIX, VALUES, EmberMetaWorker, MetastoreOps

URL = "http://n1"


@pytest.fixture(autouse=True)
def _no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(meta_traffic, "RESEND_PAUSE_S", 0.0)


class _Client:
    """Answers each request with the next scripted outcome; keeps what was sent."""

    def __init__(self, *kinds: str) -> None:
        self.kinds = list(kinds)
        self.sent: list[tuple[str, Any]] = []
        self.bases: list[str | None] = []
        self.urls = [URL, "http://n2", "http://n3"]
        self._next = 0

    def move_on(self) -> None:
        self._next += 1

    async def request(self, method: str, path: str, body: Any, *, base: str | None) -> Outcome:
        self.sent.append((path, body))
        # Where EmberClient.request sends it (tested below against the real client).
        self.bases.append(base or self.urls[self._next % len(self.urls)])
        kind = self.kinds.pop(0)
        value = {"revision": 7, "succeeded": True} if kind == "ok" else None
        error = None if kind == "ok" else f"{kind} answer"
        return Outcome(cast(Any, kind), value, error, 200 if kind == "ok" else 503, URL)


def _run(client: _Client, op: Op, session: str | None = "s1") -> Any:
    worker = EmberMetaWorker(cast(Any, client), {URL: "n1"}, session)
    return asyncio.run(worker.invoke(op))


def _sessions(client: _Client) -> list[dict[str, list[str]]]:
    return [parse_qs(urlsplit(path).query) for path, _ in client.sent]


PUT = Op(f="put", key="m/1", value=3)


def test_an_unknown_write_is_sent_again_with_the_same_number_until_answered() -> None:
    client = _Client("unknown", "unknown", "ok")
    reply = _run(client, PUT)
    assert (reply.type, reply.value) == ("ok", 7)
    numbers = _sessions(client)
    assert len(numbers) == 3
    assert all(q == {"client": ["s1"], "seq": ["1"], "lowest_open": ["1"]} for q in numbers)


def test_a_definite_failure_after_an_unknown_attempt_is_still_unknown() -> None:
    client = _Client("unknown", "fail", "fail")
    reply = _run(client, Op(f="invoke", key="m/1", value={"if": [], "then": [], "else": []}))
    assert reply.type == "info"
    assert "after an attempt whose outcome is unknown" in reply.error
    assert len(client.sent) == 1 + meta_traffic.RESENDS


def test_a_definite_failure_first_is_not_sent_again_and_numbers_go_on() -> None:
    client = _Client("fail", "ok")
    worker = EmberMetaWorker(cast(Any, client), {URL: "n1"}, "s1")
    first = asyncio.run(worker.invoke(PUT))
    second = asyncio.run(worker.invoke(Op(f="delete", key="m/1")))
    assert (first.type, second.type) == ("fail", "ok")
    assert [q["seq"] for q in _sessions(client)] == [["1"], ["2"]]


def test_reads_and_workers_without_a_session_send_once_and_plainly() -> None:
    client = _Client("unknown", "unknown")
    assert _run(client, Op(f="get", key="m/1")).type == "info"
    assert _run(client, PUT, session=None).type == "info"
    assert [path for path, _ in client.sent] == ["/meta/get", "/meta/put"]


def test_only_plans_that_name_resend_give_sessions_and_etcd_cannot() -> None:
    plain = plans.Plan(backend="sim", workload=("metastore",))
    resend = plans.Plan(backend="sim", workload=("metastore",),
                        options={"meta_traffic": ["resend"]})  # fmt: skip
    assert _meta_sessions(plain)(5) is None
    ids = {_meta_sessions(resend)(t) for t in (5, 6)}
    assert len(ids) == 2
    assert ids == {_meta_sessions(resend)(t) for t in (5, 6)}  # a replay sends the same
    assert "resend" not in ETCD.meta_traffic


@pytest.mark.parametrize("kind", ["unknown", "ok"])
def test_a_compaction_is_a_write(kind: str) -> None:
    client = _Client(kind, "ok")
    _run(client, Op(f="compact", key="m/", value={"revision": 3}))
    assert _sessions(client)[0]["seq"] == ["1"]


def test_after_a_failure_the_next_attempt_goes_to_the_next_node() -> None:
    """Not back to the first URL each time: a dead first node would fail every op."""
    client = _Client("unknown", "unknown", "ok")
    _run(client, PUT)
    assert client.bases == [URL, "http://n2", "http://n3"]


def test_with_resend_plain_puts_write_values_no_other_write_has() -> None:
    def ops(traffic: frozenset[str]) -> list[Op]:
        gen = MetastoreOps(random.Random(5), mix=FULL_MIX, traffic=traffic)
        return [cast(Op, gen.op(Context(0, (0,), (0,)))) for _ in range(300)]

    plain, resend = ops(frozenset()), ops(frozenset({"resend"}))
    puts = [op.value for op in resend if op.f == "put"]
    assert len(puts) == len(set(puts)) > 20
    assert min(puts) >= VALUES  # beyond every value an invoke writes or compares
    # Only the values differ: the same ops, keys and invokes otherwise.
    assert [(op.f, op.key) for op in plain] == [(op.f, op.key) for op in resend]
    assert all(op.value < VALUES for op in plain if op.f == "put")


def test_the_client_without_a_base_sends_where_its_rotation_is() -> None:
    """Nothing listens on these loopback ports: each request is refused, and
    its outcome names the URL it went to."""
    from ember.client import EmberClient

    async def sent_to() -> list[str | None]:
        async with EmberClient(["http://127.0.0.1:9", "http://127.0.0.1:13"]) as client:
            first = await client.request("POST", "/meta/get", {"key": "m/1"})
            client.move_on()
            second = await client.request("POST", "/meta/get", {"key": "m/1"})
            return [first.url, second.url]

    assert asyncio.run(sent_to()) == ["http://127.0.0.1:9", "http://127.0.0.1:13"]
