"""Hypothesis strategies for simulator configurations."""

from __future__ import annotations

from hypothesis import strategies as st

from ember.sim.faults import FAULT_KINDS
from ember.sim.runner import SimConfig


@st.composite
def sim_configs(
    draw: st.DrawFn, *, nodes: tuple[int, ...] = (3, 4), sim_seconds: float = 2.0
) -> SimConfig:
    """A small random cluster run: seed, size, fault mix and core tunables.

    The seed drives every choice inside the run; the other fields are drawn
    so hypothesis can shrink a failure to the simplest setting that shows it.
    """
    return SimConfig(
        seed=draw(st.integers(min_value=0, max_value=2**63 - 1)),
        nodes=draw(st.sampled_from(nodes)),
        sim_seconds=sim_seconds,
        heal_seconds=20.0,
        faults=tuple(sorted(draw(st.sets(st.sampled_from(FAULT_KINDS), min_size=1)))),
        fault_gap_ms=draw(st.sampled_from([100.0, 300.0])),
        catchup_margin=draw(st.sampled_from([3, 20, 1000])),
        compact_every=draw(st.sampled_from([0, 20, 40])),
        max_append=draw(st.sampled_from([1, 4, 64])),
        change_ms=draw(st.sampled_from([100.0, 300.0])),
    )
