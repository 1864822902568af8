"""Nodes started at one instant do not tick in lockstep.

The loop's timers are exact: without a boot time, every node of a run ticked
on one 50 ms grid, and two voters that drew the same election timeout split
the vote every time (seed 820575 of the property test: three split rounds in
a row after a heal, which the convergence checker rightly called instability).
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
from ember.sim.procs import current_proc
from ember.sim.world import BOOT_S, World, seeded

TICK_S = 0.05


def _boot_times(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int) -> dict[str, float]:
    served: dict[str, float] = {}

    async def node(_cfg: Any, _started: Any) -> None:
        served[current_proc().name] = asyncio.get_running_loop().time()
        await asyncio.Event().wait()

    monkeypatch.setattr(world_module, "serve", node)
    loop = SimLoop(seed)
    world = World(loop, Disk(random.Random(1)), boots=seeded(seed, "boot"))
    for i in range(1, 6):
        world.add(f"n{i}", f"10.0.0.{i}", tmp_path / str(seed) / f"n{i}", None)  # type: ignore[arg-type]

    async def main() -> None:
        for name in world.nodes:
            world.start(name)
        await asyncio.sleep(1.0)
        world.kill("n1")
        world.start("n1")  # a restart boots afresh
        await asyncio.sleep(1.0)

    run_simulation(loop, main())
    return served


def test_nodes_started_together_serve_at_their_own_phase(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    served = _boot_times(tmp_path, monkeypatch, seed=3)
    first = [t for name, t in served.items() if name.endswith("#1")]
    assert len(first) == 5
    assert "n1#2" in served
    assert all(BOOT_S[0] <= t <= BOOT_S[1] for t in first)
    assert 1.0 + BOOT_S[0] <= served["n1#2"] <= 1.0 + BOOT_S[1]
    # Each node's ticks fall at its own offset within the tick.
    assert len({round(t % TICK_S, 9) for t in first}) == 5


def test_boot_times_replay_from_the_seed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _boot_times(tmp_path, monkeypatch, 3) == _boot_times(tmp_path, monkeypatch, 3)
    assert _boot_times(tmp_path, monkeypatch, 3) != _boot_times(tmp_path, monkeypatch, 4)
