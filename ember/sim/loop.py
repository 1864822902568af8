"""A deterministic asyncio event loop on virtual time: the whole-system simulator's core.

Theory of operation
-------------------
ember and the harness are asyncio programs. `SimLoop` is an asyncio event
loop (a `BaseEventLoop`, so tasks, futures, timers and `asyncio.timeout`
work unchanged) whose clock is virtual and whose I/O never leaves the
process:

- **Time.** `time()` is a virtual clock in seconds. When nothing is ready
  to run, the clock jumps to the earliest timer; a second of simulated
  time costs only the work done in it. Handles run in FIFO order and
  timers with equal deadlines in the order they were set, so one seed gives
  one interleaving, whatever PYTHONHASHSEED says.
- **Processes.** A `Proc` (`ember.sim.procs`) is a simulated process (an ember node's
  incarnation, or the harness). Its code runs in a `contextvars.Context`
  carrying the Proc (`CURRENT`), and every task and callback it creates
  inherits that context, so the loop knows whose code each handle is:
  a paused Proc's handles are held back until it resumes (SIGSTOP), a
  killed Proc's are dropped without running (SIGKILL: no `finally`, no
  cleanup), exactly what a process sees.
- **Network.** `create_server`, `create_connection`, `sock_connect` and
  `getaddrinfo` are served by `ember.sim.wire.Wire`, an in-memory TCP with
  per-link latency, partitions and delays. aiohttp (client and server) and
  `asyncio.open_connection` run over it as they are.
- **Garbage.** Python's cyclic collector runs when allocation counts say
  so, and what it frees may have finalizers that act (an aiohttp
  `Connection` left in a cycle closes its socket from `__del__`). Counts
  differ between processes, so the loop switches the automatic collector
  off for the run and collects itself every so many handles: the same
  seed frees the same garbage at the same point.
- **Threads.** `run_in_executor` (and so `asyncio.to_thread`) runs the
  function inline, in the caller's context, and completes the future after
  a short seeded delay: a thread hop or an fsync takes time, and the code
  around it must cope with what happens meanwhile.

Nothing here knows about ember; `ember.sim.world` builds the cluster on it.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import heapq
import random
import signal
import weakref
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from ember.sim.procs import CURRENT, Proc, close_tasks, current_proc, log_unless_dead

BATCHES = 64  # scheduler rounds per `_run_once` call
# The loop's own collection schedule (see Garbage above): a young-generation
# pass every GC_HANDLES handles, an older one every GC_OLDER young passes,
# a full one every GC_FULL older ones (about the default thresholds' pace).
GC_HANDLES, GC_OLDER, GC_FULL = 500, 10, 20


class SimulationStalled(RuntimeError):  # noqa: N818 -- reads as what happened
    """Nothing is ready and no timer is set, yet the main task has not finished."""


class SimulationTimeout(RuntimeError):  # noqa: N818 -- reads as what happened
    """The virtual clock passed the loop's `max_time` (a run that never ends)."""


def _fill(
    handle: asyncio.Handle,
    callback: Callable[..., Any],
    args: tuple[Any, ...],
    loop: asyncio.AbstractEventLoop,
    context: contextvars.Context | None,
) -> None:
    """What asyncio's Handle.__init__ sets, without asking the loop for debug mode."""
    handle._context = context if context is not None else contextvars.copy_context()  # type: ignore[attr-defined]
    handle._loop = loop  # type: ignore[attr-defined]
    handle._callback = callback  # type: ignore[attr-defined]
    handle._args = args
    handle._cancelled = False
    handle._repr = None  # type: ignore[attr-defined]
    handle._source_traceback = None  # type: ignore[attr-defined]


class _Handle(asyncio.Handle):
    """asyncio's Handle without its per-call debug checks (the simulation runs
    with debug off: half a million handles a run, each asking `get_debug`)."""

    __slots__ = ()

    def __init__(
        self,
        callback: Callable[..., Any],
        args: tuple[Any, ...],
        loop: asyncio.AbstractEventLoop,
        context: contextvars.Context | None,
    ) -> None:
        _fill(self, callback, args, loop, context)


class _Timer(asyncio.TimerHandle):
    """asyncio's TimerHandle, made as cheaply as `_Handle`."""

    __slots__ = ()

    def __init__(
        self,
        when: float,
        callback: Callable[..., Any],
        args: tuple[Any, ...],
        loop: asyncio.AbstractEventLoop,
        context: contextvars.Context | None,
    ) -> None:
        _fill(self, callback, args, loop, context)
        self._when = when
        self._scheduled = False


def _proc_of(handle: asyncio.Handle) -> Proc | None:
    ctx: contextvars.Context | None = getattr(handle, "_context", None)
    return ctx.get(CURRENT) if ctx is not None else None


class SimLoop(asyncio.BaseEventLoop):
    """The event loop of one simulation (see the module doc)."""

    # BaseEventLoop's own scheduler state, which `_run_once` replaces.
    _ready: deque[asyncio.Handle]
    _stopping: bool
    _check_closed: Callable[[], None]

    def __init__(
        self,
        seed: int | str,
        *,
        max_time: float = 24 * 3600.0,
        executor_delay_s: tuple[float, float] = (0.0005, 0.003),
    ) -> None:
        super().__init__()
        from ember.sim.wire import Wire  # the wire needs the loop type only at run time

        self._now = 0.0
        self._timers: list[tuple[float, int, asyncio.TimerHandle]] = []
        self._timer_seq = 0
        self.max_time = max_time
        self.handles_run = 0
        self._gc_due = GC_HANDLES
        self._task_seq = 0
        # Each task's number and the process that made it (`create_task`).
        self.born: weakref.WeakKeyDictionary[asyncio.Task[Any], tuple[int, Proc | None]]
        self.born = weakref.WeakKeyDictionary()
        self._gc_passes = 0
        self._executor_delay = executor_delay_s
        self._rng = random.Random(f"{seed}:loop")
        self.wire = Wire(self, random.Random(f"{seed}:wire"))
        self.thread_effects: ThreadEffects | None = None  # the simulated disk, when one is on
        self.set_exception_handler(log_unless_dead)

    def create_task(  # type: ignore[override]
        self,
        coro: Coroutine[Any, Any, Any],
        *,
        name: str | None = None,
        context: contextvars.Context | None = None,
    ) -> asyncio.Task[Any]:
        """A task, numbered: `asyncio.all_tasks` is a set (id() order), and
        the end of a run walks the tasks in the order they were made."""
        task = super().create_task(coro, name=name, context=context)
        self._task_seq += 1
        owner = CURRENT.get() if context is None else context.get(CURRENT)
        self.born[task] = (self._task_seq, owner)
        return task

    # -- clock -----------------------------------------------------------

    def time(self) -> float:
        """Virtual seconds since the simulation began."""
        return self._now

    # -- processes -------------------------------------------------------

    def spawn(self, proc: Proc, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run `coro` as `proc`'s main task (its context carries the Proc)."""
        proc.ctx.run(CURRENT.set, proc)
        return self.create_task(coro, name=f"{proc.name}-main", context=proc.ctx)

    def pause(self, proc: Proc) -> None:
        """SIGSTOP: nothing of `proc` runs until `resume`; its timers fire late."""
        proc.paused = True

    def resume(self, proc: Proc) -> None:
        """SIGCONT: what was held runs now, in the order it became ready."""
        proc.paused = False
        while proc.frozen:
            self._ready.append(proc.frozen.popleft())

    def kill(self, proc: Proc) -> None:
        """SIGKILL: drop everything `proc` would run; its sockets are reset.

        Its suspended coroutines are closed here, in its own context, and not
        left to the garbage collector: closing runs their `finally` blocks,
        which at collection time would run in whatever process's context was
        current then (closing that process's descriptors by number, say).
        Now `current_proc()` is the dead process, whose file calls the
        simulated OS refuses and whose handles the loop drops, so what a
        `finally` tries has no effect, as a killed process runs none."""
        proc.alive = False
        proc.paused = False
        proc.frozen.clear()
        self.wire.process_died(proc)
        if CURRENT.get() is proc:  # it killed itself (os._exit): already in its context
            close_tasks(self, proc)
        else:
            proc.ctx.run(close_tasks, self, proc)

    def deliver_signal(self, proc: Proc, signum: int) -> bool:
        """Run `proc`'s handler for `signum` (as `add_signal_handler` set it); False if none."""
        entry = proc.signal_handlers.get(signum)
        if entry is None or not proc.alive:
            return False
        callback, args = entry
        self.call_soon(callback, *args, context=proc.ctx)
        return True

    # -- the scheduler ---------------------------------------------------

    def call_soon(  # type: ignore[override]
        self,
        callback: Callable[..., Any],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> asyncio.Handle:
        """As BaseEventLoop's, minus the debug-mode checks (the hottest call of a run)."""
        if self._closed:  # type: ignore[attr-defined]
            raise RuntimeError("Event loop is closed")
        handle = _Handle(callback, args, self, context)
        self._ready.append(handle)
        return handle

    def call_at(  # type: ignore[override]
        self,
        when: float,
        callback: Callable[..., Any],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        """A timer; equal deadlines fire in the order they were set (a heap alone
        does not keep that order, and bytes on a link would overtake each other)."""
        if self._closed:  # type: ignore[attr-defined]
            raise RuntimeError("Event loop is closed")
        timer = _Timer(when, callback, args, self, context)
        self._timer_seq += 1
        heapq.heappush(self._timers, (when, self._timer_seq, timer))
        timer._scheduled = True
        return timer

    def _run_once(self) -> None:
        # Up to BATCHES rounds per call, not one: most rounds run a handle or
        # two, and BaseEventLoop's per-call bookkeeping would cost more than
        # they do. `_stopping` (set when the main task ends) is honoured
        # after every round.
        ready, timers = self._ready, self._timers
        for _ in range(BATCHES):
            while timers and timers[0][2]._cancelled:
                heapq.heappop(timers)[2]._scheduled = False  # type: ignore[attr-defined]
            if not ready:
                if not timers:
                    if self._stopping:
                        return
                    raise SimulationStalled(f"nothing left to run at t={self._now:.3f}s")
                # Nothing to do now: jump to the next timer.
                self._now = max(self._now, timers[0][0])
                if self._now > self.max_time:
                    raise SimulationTimeout(f"virtual time passed {self.max_time:.0f} s")
            now = self._now
            while timers and timers[0][0] <= now:
                handle = heapq.heappop(timers)[2]
                handle._scheduled = False  # type: ignore[attr-defined]
                if not handle._cancelled:
                    ready.append(handle)
            count = len(ready)
            self.handles_run += count
            for _ in range(count):
                job = ready.popleft()
                if job._cancelled:
                    continue
                ctx = job._context  # type: ignore[attr-defined]
                proc = ctx.get(CURRENT) if ctx is not None else None
                if proc is not None:
                    if not proc.alive:
                        continue
                    if proc.paused:
                        proc.frozen.append(job)
                        continue
                try:
                    ctx.run(job._callback, *job._args)  # type: ignore[attr-defined]
                except (SystemExit, KeyboardInterrupt):
                    raise
                except BaseException as exc:  # as Handle._run reports it
                    self._report(job, exc)
            if self.handles_run >= self._gc_due:
                self._collect()
            if self._stopping:
                return

    def _report(self, job: asyncio.Handle, exc: BaseException) -> None:
        callback = job._callback  # type: ignore[attr-defined]
        message = f"Exception in callback {callback!r}"
        self.call_exception_handler({"message": message, "exception": exc, "handle": job})

    def _collect(self) -> None:
        self._gc_due = self.handles_run + GC_HANDLES
        self._gc_passes += 1
        if self._gc_passes % (GC_OLDER * GC_FULL) == 0:
            gc.collect(2)
        elif self._gc_passes % GC_OLDER == 0:
            gc.collect(1)
        else:
            gc.collect(0)

    def _write_to_self(self) -> None:
        """No self-pipe: nothing outside the loop ever wakes it."""

    def _process_events(self, event_list: Any) -> None:
        """No selector: I/O is the wire's callbacks."""

    async def shutdown_default_executor(self, timeout: float | None = None) -> None:
        """No threads were started."""

    # -- threads ---------------------------------------------------------

    def run_in_executor(  # type: ignore[override]
        self, executor: Any, func: Callable[..., Any], *args: Any
    ) -> Any:
        """Run `func` inline now; its future completes after a seeded short delay.

        What `func` made durable (`thread_effects`: the simulated disk's
        fsyncs) counts only when the future completes: a process killed in
        between loses it, as one killed while its thread was in fdatasync.
        """
        fut = self.create_future()
        effects = self.thread_effects
        token = effects.begin() if effects is not None else None
        try:
            result = func(*args)
        except BaseException as exc:  # handed to the awaiting caller, as a thread would
            done = effects.end(token) if effects is not None else _nothing
            self.call_later(self._thread_delay(), _complete, fut, done, None, exc)
        else:
            done = effects.end(token) if effects is not None else _nothing
            self.call_later(self._thread_delay(), _complete, fut, done, result, None)
        return fut

    def _thread_delay(self) -> float:
        low, high = self._executor_delay
        return self._rng.uniform(low, high)

    # -- network (ember.sim.wire) ----------------------------------------

    async def getaddrinfo(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        """Resolve a simulated host name; unknown names fail as DNS would."""
        return self.wire.getaddrinfo(host, port)

    async def sock_connect(self, sock: Any, address: Any) -> None:
        """Connect through the wire; `create_connection(sock=...)` picks the link up."""
        await self.wire.connect_socket(sock, tuple(address[:2]))

    async def create_connection(  # type: ignore[override]
        self,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        host: str | None = None,
        port: int | None = None,
        *,
        sock: Any = None,
        **_kwargs: Any,
    ) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        """A connection over the wire (by address, or a socket `sock_connect` connected)."""
        return await self.wire.create_connection(protocol_factory, host, port, sock)

    async def create_server(
        self,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        host: Any = None,
        port: int | None = None,
        **_kwargs: Any,
    ) -> Any:
        """Listen on the current process's host (what `host` names must be it or any)."""
        return self.wire.listen(protocol_factory, host, port or 0)

    # -- signals ---------------------------------------------------------

    def add_signal_handler(  # type: ignore[override]
        self, sig: int, callback: Callable[..., Any], *args: Any
    ) -> None:
        """Record the handler on the current process; `deliver_signal` runs it."""
        proc = current_proc()
        if proc is not None:
            proc.signal_handlers[signal.Signals(sig)] = (callback, args)

    def remove_signal_handler(self, sig: int) -> bool:
        """Forget the current process's handler for `sig`."""
        proc = current_proc()
        return proc is not None and proc.signal_handlers.pop(sig, None) is not None


class ThreadEffects(Protocol):
    """What a thread's work leaves behind that only counts once it completes."""

    def begin(self) -> Any:
        """Start collecting; returns what `end` needs."""
        ...

    def end(self, token: Any) -> Callable[[], None]:
        """Stop collecting; returns what makes the collected effects count."""
        ...


def _nothing() -> None:
    return None


def _complete(
    fut: asyncio.Future[Any],
    effects: Callable[[], None],
    result: Any,
    exc: BaseException | None,
) -> None:
    effects()
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)


def run_simulation(loop: SimLoop, main: Coroutine[Any, Any, Any]) -> Any:
    """Run `main` (as the harness process) on `loop` to completion and close the loop."""
    asyncio.set_event_loop(loop)
    collecting = gc.isenabled()
    gc.collect()  # what the process made before starts the run collected
    gc.disable()  # the loop collects on its own schedule (module doc: Garbage)
    try:
        harness = Proc("harness", loop.wire.harness_host)
        harness.ctx.run(CURRENT.set, harness)
        task = loop.create_task(main, name="harness-main", context=harness.ctx)
        return loop.run_until_complete(task)
    finally:
        _abandon(loop)
        asyncio.set_event_loop(None)
        loop.close()
        # What the world's garbage reports from now on (a powered-off
        # process's unclosed sessions) is no error of the run, and would land
        # in whatever run is logging when the collector gets to it.
        loop.set_exception_handler(_ignore)
        if collecting:
            gc.enable()


def _ignore(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    return None


def _abandon(loop: SimLoop) -> None:
    """The run is over: every process still running ends here, as a power-off would.

    Left to the garbage collector, each pending coroutine would be closed
    after the loop is, running its `finally` against a closed loop and
    printing "Event loop is closed" / "coroutine ignored GeneratorExit" by
    the thousand. Closed now, with the loop open, they end quietly.
    """
    close_tasks(loop)
    loop._ready.clear()
    loop._timers.clear()
