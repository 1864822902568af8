"""The etcd metastore workload's generators: model-shaped ops, resumable watches."""

from __future__ import annotations

import random

from harness.dbs.etcd_client import compare, request
from workloads.etcd_metastore import PREFIX, WatchGen, metastore_ops
from workloads.generator import Completion, Context, Op


def _ctx() -> Context:
    return Context(0, (0,), (0,))


def test_every_generated_invoke_translates_to_an_etcd_txn() -> None:
    """Conditions and writes are ones the client maps and the metastore model reads."""
    gen = metastore_ops(random.Random(4))
    fs = set()
    for _ in range(300):
        op = gen.op(_ctx())
        assert isinstance(op, Op)
        assert (op.key or "").startswith(PREFIX)
        fs.add(op.f)
        if op.f == "invoke":
            for cond in op.value["if"]:
                assert cond["target"] in ("value", "exists", "version")
                compare(cond)
            for write in op.value["then"] + op.value["else"]:
                request(write)
    assert fs == {"get", "put", "invoke"}


def test_a_watch_resumes_after_the_last_revision_delivered() -> None:
    """Events up to 5 -> next watch from 6; an empty or cut-off watch keeps its place."""
    gen = WatchGen()
    first = gen.op(_ctx())
    assert isinstance(first, Op)
    assert first.value == {"prefix": PREFIX, "from": 1}
    events = [{"key": "m/1", "revision": 3}, {"key": "m/2", "revision": 5}]
    gen.update(_ctx(), Completion(op=first, thread=0, type="info", value=events))
    second = gen.op(_ctx())
    assert isinstance(second, Op)
    assert second.value["from"] == 6
    gen.update(_ctx(), Completion(op=second, thread=0, type="ok", value=[]))
    third = gen.op(_ctx())
    assert isinstance(third, Op)
    assert third.value["from"] == 6


def test_a_watch_resumes_after_a_stream_recorded_as_responses() -> None:
    """ember's watches record {responses}: progress lines move nothing, events do."""
    gen = WatchGen()
    first = gen.op(_ctx())
    assert isinstance(first, Op)
    stream = {"responses": [{"revision": 4, "events": [{"key": "m/1", "revision": 4}]},
                            {"revision": 9, "progress": True}], "unframed": True}  # fmt: skip
    gen.update(_ctx(), Completion(op=first, thread=0, type="ok", value=stream))
    second = gen.op(_ctx())
    assert isinstance(second, Op)
    assert second.value["from"] == 5


def test_a_watch_refused_as_compacted_goes_on_from_the_compact_revision() -> None:
    gen = WatchGen()
    first = gen.op(_ctx())
    assert isinstance(first, Op)
    refused = {"responses": [], "unframed": True, "compacted": 40}
    gen.update(_ctx(), Completion(op=first, thread=0, type="fail", value=refused))
    second = gen.op(_ctx())
    assert isinstance(second, Op)
    assert second.value["from"] == 40
