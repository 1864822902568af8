"""The placement driver's watch on the zone keys: it only says *when* to tick.

A `ZoneWatch` streams the metastore's `zone.` prefix (GET /meta/watch on a
node hosting `meta`) and sets the driver's wake-up event on every event.
It never hands the driver a value: the tick reads the keys itself (a
linearizable range), so a watch served late by a lagging replica can delay
a tick but not make it act on old keys. After a disconnect it resumes, on
the next metastore node, from the last revision it saw (that revision
again: an invoke's events share one revision and a break may fall between
them; a repeated wake-up is harmless). A compacted revision ends the watch
and wakes the driver, whose next fresh read starts a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import aiohttp

from ember.metastore.client import MetaClient, MetaRefused, watch_stream

log = logging.getLogger(__name__)
RETRY_S = 0.2
PREFIX = "zone."


class ZoneWatch:
    """One watch task at a time on `zone.`, waking `kick` per event."""

    def __init__(self, meta: MetaClient, kick: asyncio.Event) -> None:
        self.meta = meta
        self.kick = kick
        self.events = 0  # events that woke the driver
        self._task: asyncio.Task[None] | None = None

    def ensure(self, revision: int) -> None:
        """Watch from `revision` + 1 (a fresh read's revision) unless one runs."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(revision + 1))

    async def stop(self) -> None:
        """End the watch (the driver lost its lease or stops)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _run(self, start: int) -> None:
        urls, tried, nxt = self.meta.urls, 0, start
        async with aiohttp.ClientSession() as session:
            while True:
                url = urls[tried % len(urls)]
                try:
                    async for item in watch_stream(session, url, prefix=PREFIX, start=nxt):
                        if "error" in item:  # compacted past us mid-stream
                            self.kick.set()
                            return
                        if "progress" in item:
                            nxt = max(nxt, int(item["progress"]) + 1)
                            continue
                        nxt = max(nxt, int(item["revision"]))
                        self.events += 1
                        self.kick.set()
                except MetaRefused as err:
                    if err.code == "410":
                        self.kick.set()
                        return
                    log.info("zone watch on %s: %s", url, err)
                except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as err:
                    log.info("zone watch on %s: %r", url, err)
                tried += 1
                await asyncio.sleep(RETRY_S)
