"""Generators of operations, in the Jepsen style: pure, seeded, no clock.

Theory of operation. A generator is asked `op(ctx)` for its next operation
and told `update(ctx, event)` about what happened (a completion of one of
its ops, or an `Observation` such as a change-peers stage seen in a node's
audit log). It answers an `Op` (possibly with `time_ns` in the future: "not
before"), `PENDING` (nothing now; ask again after the next event or a short
wait), or `None` (exhausted). It never reads a clock or starts a task: the
time it sees is `ctx.time_ns`, given by the interpreter
(`harness.interpreter`), which alone owns tasks and clocks. Every random
choice comes from a `random.Random` handed in at construction, so a
generator's sequence of ops is a function of its seed and of the contexts
and events it was shown.

One contract keeps this simple without Jepsen's immutable generators: the
interpreter dispatches every op it is given (waiting for `time_ns` if need
be), so a generator never has to take an op back. The interpreter asks
each thread kind's generator (client, admin, nemesis) separately, and only
when a thread of that kind is free, so an op held for its time never
blocks another kind.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

Thread = int | str
NS_PER_S = 1_000_000_000


@dataclass(frozen=True, slots=True, kw_only=True)
class Op:
    """An operation to invoke: what the history's invoke event will say."""

    f: str
    key: str | None = None
    value: Any = None
    group: str | None = None
    time_ns: int = 0  # not before this time (run clock)
    thread: Thread | None = None  # None: any free thread of the generator's kind


@dataclass(frozen=True, slots=True, kw_only=True)
class Completion:
    """How an op ended (`type` ok, fail or info), shown to `update`."""

    op: Op
    thread: Thread
    type: str
    value: Any = None
    error: str | None = None
    time_ns: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Observation:
    """Something seen outside the history (an audit event, a phase change)."""

    kind: str
    data: dict[str, Any] = field(default_factory=dict)
    time_ns: int = 0


Event = Completion | Observation


class _Pending:
    def __repr__(self) -> str:
        return "PENDING"


PENDING = _Pending()
Result = Op | _Pending | None


@dataclass(frozen=True, slots=True)
class Context:
    """What a generator may know: the run clock and the threads of its kind."""

    time_ns: int
    free: tuple[Thread, ...]
    threads: tuple[Thread, ...]

    @property
    def all_free(self) -> bool:
        """No op of this kind in flight (the barrier `Phases` waits for)."""
        return len(self.free) == len(self.threads)


class Generator:
    """Base class: override `op`; `update` ignores events unless overridden."""

    def op(self, ctx: Context) -> Result:
        """The next op, PENDING, or None when exhausted."""
        raise NotImplementedError

    def update(self, ctx: Context, event: Event) -> None:
        """React to a completion or an observation (default: nothing)."""


class Fn(Generator):
    """An endless stream: `make(rng)` builds each op."""

    def __init__(self, make: Callable[[random.Random], Op], rng: random.Random) -> None:
        self.make, self.rng = make, rng

    def op(self, ctx: Context) -> Result:
        return replace(self.make(self.rng), time_ns=ctx.time_ns)


class Once(Generator):
    """Exactly one op, then exhausted."""

    def __init__(self, op: Op) -> None:
        self._op: Op | None = op

    def op(self, ctx: Context) -> Result:
        out, self._op = self._op, None
        return None if out is None else replace(out, time_ns=max(out.time_ns, ctx.time_ns))


class Seq(Generator):
    """Each generator in turn, moving on when one is exhausted (no barrier)."""

    def __init__(self, gens: Sequence[Generator]) -> None:
        self.gens = list(gens)

    def op(self, ctx: Context) -> Result:
        while self.gens:
            out = self.gens[0].op(ctx)
            if out is not None:
                return out
            self.gens.pop(0)
        return None

    def update(self, ctx: Context, event: Event) -> None:
        if self.gens:
            self.gens[0].update(ctx, event)


class Phases(Seq):
    """Like Seq, but a phase starts only once every op of the last one ended."""

    def __init__(self, gens: Sequence[Generator]) -> None:
        super().__init__(gens)
        self._draining = False

    def op(self, ctx: Context) -> Result:
        while self.gens:
            if self._draining:
                if not ctx.all_free:
                    return PENDING
                self._draining = False
            out = self.gens[0].op(ctx)
            if out is not None:
                return out
            self.gens.pop(0)
            self._draining = True
        return None


class Limit(Generator):
    """At most `count` ops of `gen`."""

    def __init__(self, count: int, gen: Generator) -> None:
        self.left, self.gen = count, gen

    def op(self, ctx: Context) -> Result:
        if self.left <= 0:
            return None
        out = self.gen.op(ctx)
        if isinstance(out, Op):
            self.left -= 1
        return out

    def update(self, ctx: Context, event: Event) -> None:
        self.gen.update(ctx, event)


class TimeLimit(Generator):
    """`gen` until `seconds` after the first time it is asked; later ops are dropped."""

    def __init__(self, seconds: float, gen: Generator) -> None:
        self.limit_ns, self.gen = int(seconds * NS_PER_S), gen
        self.deadline_ns: int | None = None

    def op(self, ctx: Context) -> Result:
        if self.deadline_ns is None:
            self.deadline_ns = ctx.time_ns + self.limit_ns
        if ctx.time_ns >= self.deadline_ns:
            return None
        out = self.gen.op(ctx)
        if isinstance(out, Op) and out.time_ns >= self.deadline_ns:
            return None  # it would start after the limit
        return out

    def update(self, ctx: Context, event: Event) -> None:
        self.gen.update(ctx, event)


class Stagger(Generator):
    """Spaces `gen`'s ops by uniform random gaps in [0, 2 * mean): a Poisson-ish rate."""

    def __init__(self, mean_s: float, gen: Generator, rng: random.Random) -> None:
        self.mean_ns, self.gen, self.rng = int(mean_s * NS_PER_S), gen, rng
        self.next_ns: int | None = None

    def op(self, ctx: Context) -> Result:
        out = self.gen.op(ctx)
        if not isinstance(out, Op):
            return out
        if self.next_ns is None:
            self.next_ns = ctx.time_ns
        at = max(out.time_ns, self.next_ns)
        self.next_ns = at + int(self.rng.random() * 2 * self.mean_ns)
        return replace(out, time_ns=at)

    def update(self, ctx: Context, event: Event) -> None:
        self.gen.update(ctx, event)


class Mix(Generator):
    """Each op from a randomly chosen generator; exhausted ones drop out."""

    def __init__(
        self, gens: Sequence[Generator], rng: random.Random, weights: Sequence[float] | None = None
    ) -> None:
        self.gens, self.rng = list(gens), rng
        self.weights = list(weights) if weights is not None else [1.0] * len(self.gens)
        self._chosen: int | None = None  # kept while the choice is PENDING

    def op(self, ctx: Context) -> Result:
        while self.gens:
            if self._chosen is None:
                self._chosen = self.rng.choices(range(len(self.gens)), self.weights)[0]
            out = self.gens[self._chosen].op(ctx)
            if out is None:
                del self.gens[self._chosen], self.weights[self._chosen]
                self._chosen = None
                continue
            if isinstance(out, Op):
                self._chosen = None
            return out
        return None

    def update(self, ctx: Context, event: Event) -> None:
        for gen in self.gens:
            gen.update(ctx, event)


class EachThread(Generator):
    """A generator per thread, made by `make(thread)`; ops carry their thread."""

    def __init__(self, make: Callable[[Thread], Generator]) -> None:
        self.make = make
        self.gens: dict[Thread, Generator] = {}

    def _gen(self, thread: Thread) -> Generator:
        if thread not in self.gens:
            self.gens[thread] = self.make(thread)
        return self.gens[thread]

    def op(self, ctx: Context) -> Result:
        pending = False
        for thread in ctx.free:
            out = self._gen(thread).op(ctx)
            if isinstance(out, Op):
                return replace(out, thread=thread)
            pending = pending or out is PENDING
        busy = len(ctx.free) < len(ctx.threads)
        return PENDING if pending or busy else None

    def update(self, ctx: Context, event: Event) -> None:
        if isinstance(event, Completion):
            self._gen(event.thread).update(ctx, event)
        else:
            for gen in self.gens.values():
                gen.update(ctx, event)


def drain(
    gen: Generator, threads: Sequence[Thread], *, step_ns: int = 0, max_ops: int = 100_000
) -> list[Op]:
    """Every op `gen` yields when each op completes `ok` at once (for tests
    and previews): a tiny synchronous interpreter with a fake clock. Stops
    after `max_ops`, so an endless generator cannot hang its caller."""
    now, out = 0, list[Op]()
    while len(out) < max_ops:
        ctx = Context(now, tuple(threads), tuple(threads))
        op = gen.op(ctx)
        if op is None:
            return out
        if not isinstance(op, Op):
            now += max(step_ns, 1_000_000)
            continue
        now = max(now, op.time_ns)
        out.append(op)
        thread = op.thread if op.thread is not None else threads[0]
        gen.update(ctx, Completion(op=op, thread=thread, type="ok", time_ns=now))
        now += step_ns
    return out
