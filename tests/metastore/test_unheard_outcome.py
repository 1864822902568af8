"""A metastore command's answer matches what became of it, however its timeout
falls against the node loop.

Before, `execute` asked the loop to append the command (`runtime.propose`) under
one timeout and waited for the result under a second. A timeout that fired after
the loop had appended the entry but before the caller resumed answered
"not-applied" (a definite failure) for an entry that could still commit, and the
entry's future was left to no one: seed 26 of the default simulated plan logged
"Future exception was never retrieved: ProposalDropped('index 320 committed from
term 3')" on n3. Now the command is one `Proposal`, as the KV table's writes are.
"""

from __future__ import annotations

import asyncio
import gc
from types import SimpleNamespace
from typing import Any, cast

from ember.api import ApiError
from ember.metastore.service import MetaService
from ember.runtime import ProposalDropped
from ember.runtime.group import Proposal

TIMEOUT_S = 0.05


class _Raw:
    term = 3

    def __init__(self) -> None:
        self.appended: list[bytes] = []

    def propose(self, data: bytes) -> int:
        self.appended.append(data)
        return len(self.appended)


class _Runtime:
    """Hands each submitted proposal to the test, which plays the node loop."""

    id = "n1"

    def __init__(self) -> None:
        self.group = SimpleNamespace(raw=_Raw(), waiters={})
        self.submitted: list[Proposal] = []

    def submit(self, item: Proposal) -> None:
        self.submitted.append(item)


async def _execute(loop_runs_at: float | None) -> tuple[ApiError | Any, _Runtime, list[Any]]:
    """One `get`, with the node loop taking it `loop_runs_at` seconds in (None: never)."""
    unretrieved: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _l, ctx: unretrieved.append(ctx))
    runtime = _Runtime()
    service = MetaService(cast(Any, runtime), cast(Any, SimpleNamespace(listeners=[])))
    task = asyncio.ensure_future(service.execute({"op": "get", "key": "k"}, TIMEOUT_S))
    await asyncio.sleep(0)
    (proposal,) = runtime.submitted
    if loop_runs_at is not None:
        asyncio.get_running_loop().call_later(loop_runs_at, proposal.run, runtime.group)
    try:
        answer: ApiError | Any = await task
    except ApiError as err:
        answer = err
    await asyncio.sleep(2 * TIMEOUT_S)  # the loop runs late, if it does
    # Another leader's entry takes the index: the apply fails the waiter, if any.
    for _term, fut in runtime.group.waiters.values():
        if not fut.done():
            fut.set_exception(ProposalDropped("index 1 committed from term 4"))
    await asyncio.sleep(0)
    del proposal, task
    gc.collect()
    return answer, runtime, unretrieved


def test_appended_before_the_timeout_is_an_unknown_outcome_never_a_failure() -> None:
    answer, runtime, unretrieved = asyncio.run(_execute(loop_runs_at=TIMEOUT_S / 5))
    assert isinstance(answer, ApiError)
    assert (answer.status, answer.outcome) == (504, "unknown")
    assert len(runtime.group.raw.appended) == 1
    assert unretrieved == []


def test_taken_by_the_loop_after_the_timeout_is_never_appended() -> None:
    answer, runtime, unretrieved = asyncio.run(_execute(loop_runs_at=TIMEOUT_S * 1.5))
    assert isinstance(answer, ApiError)
    assert (answer.status, answer.code, answer.outcome) == (503, "not-applied", "fail")
    assert runtime.group.raw.appended == []  # the answer "fail" is the truth
    assert unretrieved == []


def test_the_loop_at_the_very_deadline_is_answered_by_what_it_did() -> None:
    """The loop's turn at the deadline's instant: whichever runs first, appended
    means unknown and not appended means a failure."""
    answer, runtime, unretrieved = asyncio.run(_execute(loop_runs_at=TIMEOUT_S))
    assert isinstance(answer, ApiError)
    appended = bool(runtime.group.raw.appended)
    assert answer.outcome == ("unknown" if appended else "fail")
    assert unretrieved == []
