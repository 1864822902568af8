"""A metastore proposal whose caller timed out still has its outcome retrieved.

The Docker runs' ember.log held "Future exception was never retrieved"
(ProposalDropped) for such proposals: `execute` shields the entry's future
from its own timeout, so nothing took the exception another leader's entry
set on it later."""

from __future__ import annotations

import asyncio
import gc
from types import SimpleNamespace
from typing import Any, cast

import pytest

from ember.api import ApiError
from ember.metastore.service import MetaService
from ember.runtime import ProposalDropped


class _Runtime:
    """Takes one proposal and keeps its future, as the node loop would."""

    def __init__(self) -> None:
        self.futures: list[asyncio.Future[Any]] = []

    async def propose(self, _group: str, _data: bytes) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.futures.append(fut)
        return fut


def test_a_dropped_proposal_after_the_timeout_is_not_reported_unretrieved() -> None:
    async def scenario() -> list[dict[str, Any]]:
        unretrieved: list[dict[str, Any]] = []
        asyncio.get_running_loop().set_exception_handler(lambda _l, ctx: unretrieved.append(ctx))
        runtime = _Runtime()
        service = MetaService(cast(Any, runtime), cast(Any, SimpleNamespace(listeners=[])))
        with pytest.raises(ApiError, match="no result in time"):
            await service.execute({"op": "get", "key": "k"}, timeout_s=0.01)
        fut = runtime.futures.pop()
        fut.set_exception(ProposalDropped("index 7 committed from term 3"))
        await asyncio.sleep(0)  # the done callbacks run
        del fut
        gc.collect()
        return unretrieved

    assert asyncio.run(scenario()) == []
