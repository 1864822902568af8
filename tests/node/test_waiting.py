"""`wait_set`: an event wait with a deadline that starts no task of its own."""

from __future__ import annotations

import asyncio

from ember.waiting import wait_set


def test_wait_set_reports_set_timeout_and_no_limit() -> None:
    async def scenario() -> tuple[bool, bool, bool, bool, int]:
        loop = asyncio.get_running_loop()
        event = asyncio.Event()
        timed_out = await wait_set(event, 0.01)
        during: list[int] = []
        loop.call_later(0.005, lambda: during.append(len(asyncio.all_tasks())))
        loop.call_later(0.01, event.set)
        woken = await wait_set(event, 5.0)
        already = await wait_set(event, 0.0)  # set: no wait at all, even with no time left
        event.clear()
        loop.call_later(0.01, event.set)
        unlimited = await wait_set(event, None)
        return timed_out, woken, already, unlimited, during[0]

    timed_out, woken, already, unlimited, tasks_while_waiting = asyncio.run(scenario())
    assert (timed_out, woken, already, unlimited) == (False, True, True, True)
    assert tasks_while_waiting == 1  # the waiting coroutine's own task, no second one


def test_a_cancelled_waiter_is_cancelled_not_timed_out() -> None:
    async def scenario() -> bool:
        waiter = asyncio.create_task(wait_set(asyncio.Event(), 5.0))
        await asyncio.sleep(0)
        waiter.cancel()
        try:
            await waiter
        except asyncio.CancelledError:
            return True
        return False

    assert asyncio.run(scenario())
