"""Waiting for an event with a deadline, without a task per wait."""

from __future__ import annotations

import asyncio


async def wait_set(event: asyncio.Event, timeout_s: float | None) -> bool:
    """Wait until `event` is set or `timeout_s` passes (None: no limit); whether it was set.

    `asyncio.timeout`, not `wait_for`: on Python 3.11 `wait_for` runs the
    wait in a task of its own, with three more loop callbacks per wait, and
    these are a node's and the harness's most frequent waits (every
    metastore apply wakes every watch stream; the harness's interpreter
    waits once per dispatch).
    """
    if event.is_set():
        return True
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        return False
    return True
