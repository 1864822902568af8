"""A killed incarnation's leftovers are not the node failing.

Default-plan seed 5137: the loop's garbage collection closed a killed
incarnation's main coroutine mid-run; its `finally` awaited, the close
raised "coroutine ignored GeneratorExit" inside the world's `_serve`, and
the world recorded "node failed to start" and crashed the node's disk under
the running incarnation, so the run ended invalid for the simulator's doing.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest

from ember.sim import world as world_module
from ember.sim.hostos import Disk
from ember.sim.loop import SimLoop, run_simulation
from ember.sim.world import World


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
