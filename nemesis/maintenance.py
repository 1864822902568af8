"""`compact-kill`: a kill timed to land while the store compacts or defragments.

Theory of operation. etcd's robustness tests crash members during
compaction and defragmentation because that is when a store rewrites its
history on disk: a crash there has lost deletes, resurrected keys and left
watches unable to resume. The fault asks the db (a `Maintainable`) for the
revision its target has applied, sends the maintenance request (a
compaction at that revision minus the op's `back`, or a defragmentation of
the target) without waiting for the answer, sleeps the op's `delay_ms`
(seeded, 0-20 ms) and kills the target as the `kill` fault does. Then it
waits briefly for the request's answer, which the completion records:
`answered` (a JSON answer came, before or despite the kill), or not
(no answer within 2 s, or an error status). The
kill is the fault (healed by `start`); the request is its timing.

The db decides where each request goes: etcd sends both to the target
member (etcd forwards a compaction to its leader, and a defragmentation is
the member's own); ember's compaction goes through the `meta` group's
leader, which every replica then applies. The request reaches the store
as any client's would; the checkers learn the compaction only from the
history, so a compaction whose answer was lost is never assumed done.

Both backends share this code: the worker supplies `blocking` (Docker: a
thread; the simulator: inline) and `post` (urllib in a thread; aiohttp over
the simulated network), so the delay is wall time on Docker and virtual
time in the simulator.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from nemesis.targets import UnresolvedError

ANSWER_WAIT_S = 2.0  # after the kill: how long the request's answer is awaited


@dataclass(frozen=True, slots=True)
class Call:
    """One JSON POST: where, and what."""

    url: str
    body: dict[str, Any]


class Maintainable(Protocol):
    """What a db offers `compact-kill` (etcd and ember do)."""

    maintenance: tuple[str, ...]  # the actions it has: "compact", "defrag"

    def maintenance_node(self, target: str) -> str:
        """The node the requests around a kill of `target` go to (may block:
        it may ask the cluster who leads)."""
        ...

    def revision_call(self, node: str) -> Call:
        """The request that answers the store's current revision."""
        ...

    def revision_in(self, doc: dict[str, Any] | None) -> int | None:
        """The (model) revision in that request's answer; None if absent."""
        ...

    def maintenance_call(self, node: str, action: str, revision: int) -> Call:
        """The request performing `action` (a compaction at `revision`)."""
        ...


Post = Callable[[Call], Awaitable[dict[str, Any] | None]]
Blocking = Callable[..., Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Timed:
    """What the maintenance request did around the kill, for the completion."""

    action: str
    revision: int | None  # compaction: the revision asked for
    url: str
    sent_wall: float
    answered: bool
    answer: dict[str, Any] | None

    def as_value(self, killed_wall: float) -> dict[str, Any]:
        """The completion's `maintenance` field."""
        out: dict[str, Any] = {"action": self.action, "url": self.url,
                               "sent_wall": round(self.sent_wall, 6),
                               "kill_after_ms": round((killed_wall - self.sent_wall) * 1000, 1),
                               "answered": self.answered}  # fmt: skip
        if self.revision is not None:
            out["revision"] = self.revision
        if self.answer is not None:
            out["answer"] = self.answer
        return out


async def around_kill(
    db: Maintainable,
    target: str,
    value: dict[str, Any],
    post: Post,
    blocking: Blocking,
    kill: Callable[[], Awaitable[Any]],
) -> tuple[Any, Timed]:
    """Send the op's maintenance request to `db`, kill `target` its
    `delay_ms` later (`kill`), and return the kill's result with the timing.

    UnresolvedError (the fault applies nothing, and nothing is to heal) when
    the store did not say its revision (the node is down, paused or cut
    off): no request was sent and nobody was killed."""
    action = str(value.get("action"))
    if action not in db.maintenance:
        raise ValueError(f"the db has no {action!r} (it has {', '.join(db.maintenance)})")
    node = await blocking(db.maintenance_node, target)
    revision: int | None = None
    if action == "compact":
        ask = db.revision_call(node)
        current = db.revision_in(await post(ask))
        if current is None:
            raise UnresolvedError(
                f"the store said no revision: nothing compacted, nobody killed ({ask.url})"
            )
        revision = max(1, current - int(value.get("back", 0)))
    call = db.maintenance_call(node, action, revision or 0)
    request = asyncio.ensure_future(post(call))
    sent = time.time()
    await asyncio.sleep(float(value.get("delay_ms", 0.0)) / 1000)
    try:
        killed = await kill()
    except BaseException:
        request.cancel()
        raise
    done, _ = await asyncio.wait([request], timeout=ANSWER_WAIT_S)
    answer = request.result() if done else None
    if not done:
        request.cancel()
    return killed, Timed(action, revision, call.url, sent, bool(done) and answer is not None,
                         answer)  # fmt: skip
