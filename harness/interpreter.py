"""The one interpreter: runs pure generators against workers, owns tasks and clocks.

Theory of operation. Threads are fixed at construction: ints for clients
and admins, "nemesis" for the nemesis; each belongs to one kind and has one
`Worker`. `run(gens)` takes a generator per kind and loops:

1. for each kind with a free thread and no op held, ask its generator
   (`workloads.generator`: an op, PENDING or None);
2. an op whose `time_ns` has come goes to a free thread: the invoke event
   is written to the history, then a task awaits the worker's `Reply`;
3. otherwise sleep until the earliest held op is due, a completion or an
   observation arrives, or (if a generator said PENDING) a short poll;
4. each completion is written to the history and shown to its kind's
   generator; each observation (`observe()`, thread-safe) to every one.

`run` returns once every generator is exhausted and nothing is in flight;
it may be called again (the next phase) with the same clock, history and
process numbering. A client whose op ends `info` is never used again under
its process id: the thread takes a fresh one (id + number of int threads),
as DESIGN.md's history rules require. A worker that raises yields `info`
with the error, never a crashed run.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from ember.waiting import wait_set
from harness.history_writer import HistoryWriter
from workloads.generator import (
    PENDING,
    Completion,
    Context,
    Generator,
    Observation,
    Op,
    Thread,
)

ReplyType = Literal["ok", "fail", "info"]
POLL_S = 0.02


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    """What a worker says became of an op."""

    type: ReplyType
    value: Any = None
    error: str | None = None
    node: str | None = None


class Worker(Protocol):
    """Invokes ops of one thread against the system (a Jepsen client)."""

    async def invoke(self, op: Op) -> Reply:
        """Perform `op`; classify the outcome (never raise for the system's errors)."""
        ...


@dataclass(slots=True)
class Counts:
    """Completions per kind and type, for progress and benchmarks."""

    by_kind: dict[str, dict[str, int]] = field(default_factory=dict)

    def add(self, kind: str, type_: str) -> None:
        """Count one completion."""
        per = self.by_kind.setdefault(kind, {"ok": 0, "fail": 0, "info": 0})
        per[type_] = per.get(type_, 0) + 1


@dataclass(slots=True)
class _Flight:
    kind: str
    thread: Thread
    process: int | str
    op: Op


class Interpreter:
    """Runs generators on worker threads, writing every event to `history`."""

    def __init__(
        self,
        kinds: Mapping[str, Sequence[Thread]],
        workers: Mapping[Thread, Worker],
        history: HistoryWriter,
        *,
        clock: Callable[[], int] | None = None,
        on_event: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.kinds = {k: tuple(ts) for k, ts in kinds.items()}
        missing = [t for ts in self.kinds.values() for t in ts if t not in workers]
        if missing:
            raise ValueError(f"no worker for thread(s) {missing}")
        self.workers = dict(workers)
        self.history = history
        # Looked up now, not at import: the simulator's clock replaces time's.
        self._clock = clock or time.monotonic_ns
        self._t0 = self._clock()
        self.on_event = on_event
        ints = [t for ts in self.kinds.values() for t in ts if isinstance(t, int)]
        self._stride = max(ints, default=-1) + 1
        self.process: dict[Thread, int | str] = {t: t for ts in self.kinds.values() for t in ts}
        self.counts = Counts()
        self._busy: dict[Thread, _Flight] = {}
        self._done: list[tuple[asyncio.Task[Reply], _Flight]] = []
        self._observed: list[Observation] = []
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def now(self) -> int:
        """Run time in ns (monotonic, since the interpreter was made)."""
        return self._clock() - self._t0

    def observe(self, kind: str, data: dict[str, Any]) -> None:
        """Hand an observation to the generators; callable from any thread."""
        obs = Observation(kind=kind, data=data, time_ns=self.now())
        loop = self._loop
        if loop is None:
            self._observed.append(obs)
            return

        def put() -> None:
            self._observed.append(obs)
            if self._wake is not None:
                self._wake.set()

        with contextlib.suppress(RuntimeError):  # the loop closed: the run is over
            loop.call_soon_threadsafe(put)

    def _ctx(self, kind: str) -> Context:
        threads = self.kinds.get(kind, ())
        free = tuple(t for t in threads if t not in self._busy)
        return Context(self.now(), free, threads)

    def _dispatch(self, kind: str, thread: Thread, op: Op) -> None:
        process = self.process[thread]
        flight = _Flight(kind, thread, process, op)
        self.history.write(
            time=self.now(), process=process, type="invoke", f=op.f, key=op.key,
            value=op.value, group=op.group,
        )  # fmt: skip
        self._busy[thread] = flight
        task = asyncio.ensure_future(self._invoke(thread, op))
        task.add_done_callback(lambda t: self._completed(t, flight))

    async def _invoke(self, thread: Thread, op: Op) -> Reply:
        try:
            return await self.workers[thread].invoke(op)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a worker bug must not end the run: outcome unknown
            return Reply(type="info", error=f"harness: {type(exc).__name__}: {exc}")

    def _completed(self, task: asyncio.Task[Reply], flight: _Flight) -> None:
        self._done.append((task, flight))
        if self._wake is not None:
            self._wake.set()

    def _finish(self, gens: Mapping[str, Generator]) -> None:
        done, self._done = self._done, []
        for task, flight in done:
            if task.cancelled():
                continue
            reply = task.result()
            now = self.now()
            self.history.write(
                time=now, process=flight.process, type=reply.type, f=flight.op.f,
                key=flight.op.key, value=reply.value, node=reply.node, error=reply.error,
                group=flight.op.group,
            )  # fmt: skip
            del self._busy[flight.thread]
            if reply.type == "info" and isinstance(flight.process, int):
                self.process[flight.thread] = flight.process + self._stride
            self.counts.add(flight.kind, reply.type)
            completion = Completion(
                op=flight.op, thread=flight.thread, type=reply.type, value=reply.value,
                error=reply.error, time_ns=now,
            )  # fmt: skip
            if flight.kind in gens:
                gens[flight.kind].update(self._ctx(flight.kind), completion)
            if self.on_event is not None:
                self.on_event({"kind": flight.kind, "type": reply.type, "f": flight.op.f})
        observed, self._observed = self._observed, []
        for obs in observed:
            for kind, gen in gens.items():
                gen.update(self._ctx(kind), obs)

    def _step(
        self, gens: Mapping[str, Generator], held: dict[str, Op], exhausted: set[str]
    ) -> tuple[bool, bool, int | None]:
        """Dispatch what is due: (dispatched any, any PENDING, earliest held time)."""
        dispatched, pending, wake_ns = False, False, None
        for kind, gen in gens.items():
            if kind in exhausted:
                continue
            ctx = self._ctx(kind)
            if kind not in held:
                if not ctx.free:
                    continue
                out = gen.op(ctx)
                if out is None:
                    exhausted.add(kind)
                    continue
                if out is PENDING or not isinstance(out, Op):
                    pending = True
                    continue
                held[kind] = out
            op = held[kind]
            if op.time_ns > ctx.time_ns:
                wake_ns = op.time_ns if wake_ns is None else min(wake_ns, op.time_ns)
                continue
            thread = op.thread if op.thread is not None else (ctx.free[0] if ctx.free else None)
            if thread is None or thread not in ctx.free:
                continue  # its thread is busy: a completion will wake us
            del held[kind]
            self._dispatch(kind, thread, op)
            dispatched = True
        return dispatched, pending, wake_ns

    async def run(self, gens: Mapping[str, Generator]) -> None:
        """Run `gens` (kind -> generator) to exhaustion; see the module doc."""
        unknown = sorted(set(gens) - set(self.kinds))
        if unknown:
            raise ValueError(f"generators for unknown thread kinds {unknown}")
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        held: dict[str, Op] = {}
        exhausted: set[str] = set()
        try:
            while True:
                self._finish(gens)
                dispatched, pending, wake_ns = self._step(gens, held, exhausted)
                if dispatched:
                    continue
                if len(exhausted) == len(gens) and not self._busy:
                    return
                timeout = POLL_S if pending else None
                if wake_ns is not None:
                    due = max(0.0, (wake_ns - self.now()) / 1e9)
                    timeout = due if timeout is None else min(timeout, due)
                if timeout is None and not self._busy:
                    timeout = POLL_S  # a kind waits for nothing we can see: poll
                if not self._done and not self._observed:
                    self._wake.clear()
                    await wait_set(self._wake, timeout)
        finally:
            # Ops still in flight (cancelled run) stay open invokes: `info`.
            self._loop = None
