"""Hypothesis strategies for small whole-system simulation plans."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from harness import plan as plans
from nemesis.generator import PRIMITIVES

NODE_NAMES = ("n1", "n2", "n3", "n4", "n5")


def _raft_tunables(draw: st.DrawFn) -> dict[str, Any]:
    """The Raft tunables that make the core's corner cases likely."""
    return {
        "catchup_margin": draw(st.sampled_from([3, 20, 1000])),
        "max_entries_per_append": draw(st.sampled_from([1, 4, 64])),
        "compact_every": draw(st.sampled_from([0, 20, 200])),
    }


@st.composite
def sim_plans(
    draw: st.DrawFn, *, nodes: tuple[int, ...] = (3, 4), time_limit_s: float = 6.0
) -> plans.Plan:
    """A short `--backend sim` plan: register traffic and membership changes
    under a random subset of the nemesis primitives, on 3-5 nodes.

    The seed drives every choice inside the run (clocks, network, disk, the
    workloads and the fault schedule); the drawn knobs are the Raft tunables
    and plan options that make the core's corner cases likely: a small
    catch-up margin, one entry per append, frequent compaction, learners.
    """
    db = _raft_tunables(draw)
    options: dict[str, Any] = {
        "change_interval_s": draw(st.sampled_from([0.5, 1.0, 2.0])),
        "change_learners": draw(st.booleans()),
        "nemesis_gap_s": draw(st.sampled_from([1.0, 2.0, 4.0])),
    }
    return plans.Plan(
        seed=draw(st.integers(min_value=0, max_value=2**31 - 1)),
        backend="sim",
        nodes=NODE_NAMES[: draw(st.sampled_from(nodes))],
        db_settings=db,
        workload=("register", "change-peers"),
        nemesis=tuple(sorted(draw(st.sets(st.sampled_from(PRIMITIVES), min_size=1)))),
        concurrency=5,
        time_limit_s=time_limit_s,
        quiet_s=3.0,
        options=options,
    )


@st.composite
def mix_plans(draw: st.DrawFn) -> plans.Plan:
    """A short `--backend sim` plan of ember's full workload mix (register,
    change-peers, rebalance, cancel-race, metastore) under a random subset of
    the nemesis primitives, on 3-5 nodes, with the same Raft tunables drawn."""
    db = _raft_tunables(draw)
    return plans.Plan(
        seed=draw(st.integers(min_value=0, max_value=2**31 - 1)),
        backend="sim",
        nodes=NODE_NAMES[: draw(st.sampled_from((3, 4, 5)))],
        db_settings=db,
        nemesis=tuple(sorted(draw(st.sets(st.sampled_from(PRIMITIVES), min_size=1)))),
        time_limit_s=draw(st.sampled_from([8.0, 15.0])),
        quiet_s=4.0,
        options={"nemesis_gap_s": draw(st.sampled_from([1.0, 2.0, 4.0]))},
    )
