"""Simulated processes: whose code runs, their hosts' clocks, and what a kill leaves.

A `Proc` is one process of the simulation (an ember node's incarnation, or
the harness); its code runs in a context carrying it (`CURRENT`), so
`ember.sim.loop.SimLoop` knows whose every handle is. A kill drops the
process's handles and closes its suspended coroutines (`close_tasks`); what
it leaves behind, its tasks destroyed pending and its connections left open,
is what a kill is, and `log_unless_dead` keeps it out of the run's errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import warnings
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ember.sim.loop import SimLoop

log = logging.getLogger("ember.sim.loop")  # the name the runs' logs have always shown


@dataclass(eq=False)
class HostClock:
    """A host's wall clock against the simulation's (true) time: a clock fault's state.

    The wall clock reads true time plus `offset_at(t)`: a step `offset_s`
    (a jump, forward or back), plus a drift (`rate` seconds of wall time per
    true second since `since`), plus a strobe (`strobe_s` ahead then behind,
    flipping every `period_s`). Exact and analytic, so no timer is needed and
    a seed replays the same readings. The monotonic clock is not moved, as a
    `date -s` or an NTP step leaves CLOCK_MONOTONIC alone. Kept per host, so
    a restarted process reads the same skewed clock.
    """

    offset_s: float = 0.0
    rate: float = 1.0
    since: float = 0.0
    strobe_s: float = 0.0
    period_s: float = 0.0

    def offset_at(self, t: float) -> float:
        offset = self.offset_s + (self.rate - 1.0) * (t - self.since)
        if self.strobe_s and self.period_s:
            flips = int((t - self.since) / self.period_s)
            offset += self.strobe_s if flips % 2 == 0 else -self.strobe_s
        return offset

    def reset(self) -> None:
        """In step with true time again (a heal: the clock jumps back)."""
        self.offset_s, self.rate, self.since, self.strobe_s, self.period_s = 0.0, 1.0, 0.0, 0.0, 0.0


@dataclass(eq=False)
class Proc:
    """A simulated process: whose code a handle is, and what state it is in."""

    name: str
    host: str  # the address its sockets bind to
    ctx: contextvars.Context = field(default_factory=contextvars.Context)
    alive: bool = True
    paused: bool = False
    frozen: deque[asyncio.Handle] = field(default_factory=deque)
    signal_handlers: dict[int, tuple[Callable[..., Any], tuple[Any, ...]]] = field(
        default_factory=dict
    )
    fds: set[int] = field(default_factory=set)  # raw descriptors it opened (ember.sim.hostos)
    clock: HostClock = field(default_factory=HostClock)  # its host's wall clock

    def __repr__(self) -> str:
        state = "dead" if not self.alive else "paused" if self.paused else "running"
        return f"<Proc {self.name}@{self.host} {state}>"


# The attribute of a client connection's protocol naming the Proc that opened it (ember.sim.wire).
DIALER = "_sim_dialer"
CURRENT: contextvars.ContextVar[Proc | None] = contextvars.ContextVar("sim_proc", default=None)


def current_proc() -> Proc | None:
    """The simulated process whose code is running (None outside any)."""
    return CURRENT.get()


def log_unless_dead(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """A killed process's tasks are destroyed pending, and its connections
    are left open: that is what a kill is. Anything else is an error of the run."""
    message = str(context.get("message", ""))
    if "destroyed but it is pending" in message:
        return
    if left_by_the_dead(context):
        log.debug("simulation: %s, left by a killed process", message)
        return
    exc = context.get("exception")
    log.error("simulation: %s%s", message, f": {exc!r}" if exc else "", exc_info=exc)


def left_by_the_dead(context: dict[str, Any]) -> bool:
    """Whether what aiohttp reports is a connection a killed process left
    open: the wire marks each client protocol with the process that dialed
    (`DIALER`). Anything else it reports stays an error."""
    protocol = getattr(context.get("client_connection"), "_protocol", None)
    dialer = getattr(protocol, DIALER, None)
    return isinstance(dialer, Proc) and not dialer.alive


def _suspended(coro: Any) -> bool:
    """A coroutine not yet closed: started and waiting, or never started (not
    the one running: a process that `os._exit`s kills itself from inside it)."""
    return getattr(coro, "cr_frame", None) is not None and not getattr(coro, "cr_running", False)


_CLOSE_PASSES = 16


def close_tasks(loop: SimLoop, proc: Proc | None = None) -> None:
    """Close the still suspended coroutines of `proc`'s tasks (of every task
    of the loop if None), oldest task first. A `finally` that awaits (closing
    a link) catches a close at its await, and closing may start new tasks
    (aiohttp's connector close): each pass ends one more step of those, until
    nothing is left suspended."""
    born = loop.born
    for _ in range(_CLOSE_PASSES):
        tasks = (asyncio.all_tasks(loop) if proc is None
                 else [t for t, (_, owner) in list(born.items()) if owner is proc])  # fmt: skip
        live = [t for t in tasks if not t.done() and _suspended(t.get_coro())]
        if not live:
            return
        for task in sorted(live, key=lambda t: born.get(t, (0, None))[0]):
            with warnings.catch_warnings(), contextlib.suppress(BaseException):
                warnings.simplefilter("ignore")
                task.get_coro().close()
