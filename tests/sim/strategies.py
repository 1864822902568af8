"""Hypothesis strategies for simulator configurations."""

from __future__ import annotations

from hypothesis import strategies as st

from ember.sim.clock import NS_PER_MS
from ember.sim.faults import FAULT_KINDS, TARGETS, Fault
from ember.sim.runner import SimConfig


@st.composite
def schedules(draw: st.DrawFn, *, sim_seconds: float, max_faults: int = 15) -> tuple[Fault, ...]:
    """An explicit fault schedule, which hypothesis can shrink fault by fault."""
    span_ms = int(sim_seconds * 1000)
    faults = draw(
        st.lists(
            st.builds(
                Fault,
                at_ns=st.integers(0, span_ms - 1).map(lambda ms: ms * NS_PER_MS),
                kind=st.sampled_from(FAULT_KINDS),
                duration_ns=st.integers(20, 1500).map(lambda ms: ms * NS_PER_MS),
                target=st.sampled_from(TARGETS),
            ),
            max_size=max_faults,
        )
    )
    return tuple(sorted(faults, key=lambda f: f.at_ns))


@st.composite
def sim_configs(
    draw: st.DrawFn, *, nodes: tuple[int, ...] = (3, 4), sim_seconds: float = 2.0
) -> SimConfig:
    """A small random cluster run: seed, size, faults and core tunables.

    The seed drives every choice inside the run. Faults come either from the
    seed (any mix of kinds) or from an explicit schedule, which shrinks to the
    few faults that matter when a property fails.
    """
    return SimConfig(
        seed=draw(st.integers(min_value=0, max_value=2**63 - 1)),
        nodes=draw(st.sampled_from(nodes)),
        sim_seconds=sim_seconds,
        heal_seconds=20.0,
        faults=tuple(sorted(draw(st.sets(st.sampled_from(FAULT_KINDS), min_size=1)))),
        schedule=draw(st.none() | schedules(sim_seconds=sim_seconds)),
        fault_gap_ms=draw(st.sampled_from([100.0, 300.0])),
        catchup_margin=draw(st.sampled_from([3, 20, 1000])),
        compact_every=draw(st.sampled_from([0, 20, 40])),
        max_append=draw(st.sampled_from([1, 4, 64])),
        change_ms=draw(st.sampled_from([100.0, 300.0])),
    )
