"""A killed incarnation's leftovers are not the node failing.

Default-plan seed 5137: the loop's garbage collection closed a killed
incarnation's main coroutine mid-run; its `finally` awaited, the close
raised "coroutine ignored GeneratorExit" inside the world's `_serve`, and
the world recorded "node failed to start" and crashed the node's disk under
the running incarnation, so the run ended invalid for the simulator's doing.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import logging
import os
import random
from pathlib import Path
from typing import Any

import pytest

from ember.sim import world as world_module
from ember.sim.hostos import Disk, simulated_os
from ember.sim.loop import SimLoop, run_simulation
from ember.sim.procs import current_proc
from ember.sim.world import NodeLogRouter, World


async def _forever(_cfg: Any, _started: Any) -> None:
    await asyncio.Event().wait()


def test_an_error_out_of_a_killed_incarnation_is_not_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(world_module, "serve", _forever)
    loop = SimLoop(1)
    world = World(loop, Disk(random.Random(1)))
    world.add("n1", "10.0.0.1", tmp_path / "n1", None)  # type: ignore[arg-type]  # unread

    async def main() -> None:
        world.start("n1")
        await asyncio.sleep(0.1)
        task = world.nodes["n1"].task
        assert task is not None
        world.kill("n1")
        world.start("n1")  # the next incarnation runs
        with pytest.raises(RuntimeError):
            task.get_coro().throw(RuntimeError("coroutine ignored GeneratorExit"))
        await asyncio.sleep(0.1)

    run_simulation(loop, main())
    assert world.failures == []
    assert len(world.crashes) == 1  # the kill's own, not a second one under n1#2


def test_a_killed_incarnation_runs_nothing_that_touches_a_live_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The `finally` of a killed incarnation's coroutine closes a descriptor
    by number, as the storage's shutdown does. Left suspended until the
    collector closed it, that ran in no process's context after the kill,
    when the number could be a live process's. The kill now ends it in its
    own context, where the simulated OS refuses a dead process's calls."""
    seen: dict[str, Any] = {}
    victim = tmp_path / "victim"
    victim.write_bytes(b"")

    async def node(_cfg: Any, _started: Any) -> None:
        fd = os.open(victim, os.O_RDONLY)
        seen["fd"] = fd
        try:
            await asyncio.Event().wait()
        finally:
            seen["closed_as"] = current_proc()
            try:
                os.close(fd)  # after the kill, this number is the kernel's to reuse
            except OSError as exc:
                seen["refused"] = exc.errno
            logging.getLogger("ember.test").warning("last words")

    monkeypatch.setattr(world_module, "serve", node)
    loop = SimLoop(1)
    disk = Disk(random.Random(1))
    world = World(loop, disk)
    world.add("n1", "10.0.0.1", tmp_path / "n1", None)  # type: ignore[arg-type]  # unread
    router = NodeLogRouter(world, tmp_path / "harness.log")
    logging.getLogger("ember.test").addHandler(router)

    async def main() -> None:
        world.start("n1")
        await asyncio.sleep(0.1)
        dead = world.nodes["n1"].proc
        world.kill("n1")
        assert seen["closed_as"] is dead  # ended at the kill, as itself
        assert seen["refused"] == errno.EBADF
        # The number goes to a live file, which the dead one's leftovers must not close.
        other = os.open(victim, os.O_RDONLY)
        assert other == seen["fd"]
        gc.collect()
        os.fstat(other)
        os.close(other)

    try:
        with simulated_os(loop, disk, world.exited):
            run_simulation(loop, main())
    finally:
        logging.getLogger("ember.test").removeHandler(router)
        router.close()
    assert world.failures == []
    assert not (tmp_path / "n1" / "ember.log").exists()  # a killed process writes nothing


def test_a_node_that_exits_ends_its_other_coroutines_and_dies_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`os._exit` (the crash failpoint) kills the process from inside one of
    its own coroutines: the others end then, as it, and the death that
    their `finally` blocks might report again is not a second crash."""
    ended: list[Any] = []

    async def waiter() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            ended.append(current_proc())
            os._exit(3)  # a dead process's exit changes nothing

    async def node(_cfg: Any, _started: Any) -> None:
        helper = asyncio.get_running_loop().create_task(waiter())
        await asyncio.sleep(0.1)
        assert not helper.done()
        os._exit(1)

    monkeypatch.setattr(world_module, "serve", node)
    loop = SimLoop(1)
    disk = Disk(random.Random(1))
    world = World(loop, disk)
    world.add("n1", "10.0.0.1", tmp_path / "n1", None)  # type: ignore[arg-type]  # unread

    async def main() -> None:
        world.start("n1")
        proc = world.nodes["n1"].proc
        await asyncio.sleep(0.5)
        assert proc is not None
        assert not proc.alive
        assert ended == [proc]

    with simulated_os(loop, disk, world.exited):
        run_simulation(loop, main())
    assert len(world.crashes) == 1
