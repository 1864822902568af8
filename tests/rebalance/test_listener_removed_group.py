"""A leader-event send whose group leaves the node ends quietly (ember/rebalance/listener.py).

Seen in simulated runs of the default plan: a rebalance moved a group's
replica off its leader while a send was retrying, and the send's task died
with KeyError, logged as "Task exception was never retrieved"."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from ember.metastore.client import MetaUnavailable
from ember.rebalance.listener import GroupListener


class _Meta:
    """A metastore that cannot answer; the first read removes the group."""

    def __init__(self, runtime: Any) -> None:
        self.runtime, self.reads = runtime, 0

    async def get(self, key: str) -> dict[str, Any]:
        self.reads += 1
        self.runtime.groups.pop("part-2", None)
        raise MetaUnavailable(key, "none")


def test_a_send_ends_when_its_group_has_left_the_node() -> None:
    raw = SimpleNamespace(leader="n1", term=3)
    runtime = SimpleNamespace(id="n1", groups={"part-2": SimpleNamespace(raw=raw)},
                              event_listeners=[])  # fmt: skip
    meta = _Meta(runtime)
    listener = GroupListener(runtime, meta, peers=None)  # type: ignore[arg-type]
    asyncio.run(asyncio.wait_for(listener._send("part-2", {"term": 3}), timeout=10))
    assert meta.reads == 1  # it led the group, tried once, and stopped when the group went


def test_a_send_for_a_group_never_here_does_nothing() -> None:
    runtime = SimpleNamespace(id="n1", groups={}, event_listeners=[])
    meta = _Meta(runtime)
    listener = GroupListener(runtime, meta, peers=None)  # type: ignore[arg-type]
    asyncio.run(listener._send("part-7", {"term": 1}))
    assert meta.reads == 0
