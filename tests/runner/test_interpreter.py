"""The interpreter: runs generators on worker threads and writes a valid history."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from checkers.history import load_history, pair
from harness.history_writer import HistoryWriter
from harness.interpreter import Interpreter, Reply
from workloads.generator import Completion, Context, Event, Fn, Generator, Limit, Once, Op, Result

S = 1_000_000_000


class Echo:
    """A worker answering ok with the op's value, or a scripted outcome per f."""

    def __init__(self, script: dict[str, Reply] | None = None) -> None:
        self.script = script or {}
        self.seen: list[Op] = []

    async def invoke(self, op: Op) -> Reply:
        self.seen.append(op)
        await asyncio.sleep(0)
        if op.f == "boom":
            raise RuntimeError("worker bug")
        return self.script.get(op.f, Reply(type="ok", value=op.value))


def _run(tmp_path: Path, kinds: dict, workers: dict, gens: dict) -> list:
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path) as writer:
        interp = Interpreter(kinds, workers, writer)
        asyncio.run(interp.run(gens))
    return load_history(path)


def test_every_op_is_invoked_and_completed_in_a_valid_history(tmp_path: Path) -> None:
    """N ops give 2N events that pass the history rules and pair up ok."""
    w = Echo()
    gen = Limit(50, Fn(lambda r: Op(f="put", key="k", value=r.randrange(9)), random.Random(0)))
    events = _run(tmp_path, {"client": [0, 1, 2]}, dict.fromkeys([0, 1, 2], w), {"client": gen})
    ops = pair(events)
    assert len(events) == 100
    assert len(ops) == 50
    assert all(op.type == "ok" for op in ops)
    assert [e.index for e in events] == list(range(100))


def test_an_info_gives_the_thread_a_fresh_process(tmp_path: Path) -> None:
    """After `info`, the thread invokes under process + number of threads."""
    w = Echo({"lost": Reply(type="info", error="timeout")})
    gen = Limit(3, Fn(lambda r: Op(f="lost"), random.Random(0)))
    events = _run(tmp_path, {"client": [0, 1]}, {0: w, 1: w}, {"client": gen})
    invokes = [e.process for e in events if e.type == "invoke"]
    assert len(set(invokes)) == 3
    assert all(isinstance(p, int) for p in invokes)


def test_a_worker_that_raises_yields_info_not_a_crash(tmp_path: Path) -> None:
    """A harness bug in a worker is an unknown outcome naming the error."""
    events = _run(tmp_path, {"client": [0]}, {0: Echo()}, {"client": Once(Op(f="boom"))})
    assert events[-1].type == "info"
    assert "worker bug" in (events[-1].error or "")


def test_kinds_run_side_by_side_and_the_nemesis_is_its_own_process(tmp_path: Path) -> None:
    """Client and nemesis ops interleave; nemesis events carry process "nemesis"."""
    w = Echo()
    client = Limit(20, Fn(lambda r: Op(f="get", key="k"), random.Random(0)))
    nemesis = Once(Op(f="partition", value={"kind": "partition"}, time_ns=1_000))
    events = _run(
        tmp_path, {"client": [0], "nemesis": ["nemesis"]}, {0: w, "nemesis": w},
        {"client": client, "nemesis": nemesis},
    )  # fmt: skip
    nem = [e for e in events if e.process == "nemesis"]
    assert [e.type for e in nem] == ["invoke", "ok"]
    assert nem[0].f == "partition"
    assert sum(1 for e in events if e.process == 0) == 40


def test_a_held_op_waits_for_its_time(tmp_path: Path) -> None:
    """An op due later is invoked no earlier than its time_ns."""
    due = S // 20
    events = _run(tmp_path, {"client": [0]}, {0: Echo()}, {"client": Once(Op(f="x", time_ns=due))})
    assert events[0].time >= due


class WaitsForObservation(Generator):
    """Emits one op once it has seen an observation of kind "phase"."""

    def __init__(self) -> None:
        self.seen: dict | None = None
        self.fired = False

    def op(self, ctx: Context) -> Result:
        from workloads.generator import PENDING

        if self.fired:
            return None
        if self.seen is None:
            return PENDING
        self.fired = True
        return Op(f="fault", value=self.seen)

    def update(self, ctx: Context, event: Event) -> None:
        if not isinstance(event, Completion) and event.kind == "phase":
            self.seen = event.data


def test_observations_reach_generators(tmp_path: Path) -> None:
    """observe() from another thread wakes the loop and reaches every generator."""
    path = tmp_path / "history.jsonl"
    gen = WaitsForObservation()

    async def main() -> None:
        with HistoryWriter(path) as writer:
            interp = Interpreter({"nemesis": ["nemesis"]}, {"nemesis": Echo()}, writer)
            loop = asyncio.get_running_loop()
            loop.call_later(0.05, lambda: loop.run_in_executor(
                None, interp.observe, "phase", {"stage": "joint"}))  # fmt: skip
            await interp.run({"nemesis": gen})

    asyncio.run(main())
    events = load_history(path)
    assert events[0].f == "fault"
    assert events[0].value == {"stage": "joint"}
