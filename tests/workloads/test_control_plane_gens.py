"""The rebalance, cancel-race and metastore generators: seeded, deterministic, sensible."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest

from workloads.cancel_race import PHASES, CancelRaceGen, choose_cancel, phase_reached
from workloads.generator import PENDING, Completion, Context, Limit, Op, drain
from workloads.metastore import BASIC_MIX, FULL_MIX, PREFIX, MetastoreOps
from workloads.rebalance import (
    MIN_PARTITIONS,
    REPLICAS,
    RESTORE_RETRY_S,
    RESTORE_TRIES,
    RebalanceGen,
)

S = 1_000_000_000
NODES = ("n1", "n2", "n3", "n4", "n5")


def _alters(seed: int, stop_s: float = 60.0) -> list[Op]:
    gen = RebalanceGen(random.Random(seed), NODES, max_partitions=4, stop_ns=int(stop_s * S))
    return drain(gen, ["t"])


def test_rebalance_alters_are_a_function_of_the_seed() -> None:
    """Same seed, same alters at the same times; another seed, others."""
    a, b = _alters(3), _alters(3)
    assert [(o.value, o.time_ns) for o in a] == [(o.value, o.time_ns) for o in b]
    assert [o.value for o in a] != [o.value for o in _alters(4)]


def test_rebalance_alters_stay_in_range_and_end_with_the_restore() -> None:
    """Replicas 3..5, partitions 2..4, filters leave one node out; the last alter restores."""
    ops = _alters(9)
    assert len(ops) > 5
    assert all(o.f == "alter-zone" for o in ops)
    for o in ops[:-1]:
        (kind, value), *_ = o.value.items()
        if kind == "replicas":
            assert value in REPLICAS
        elif kind == "partitions":
            assert MIN_PARTITIONS <= value <= 4
        else:
            assert value == ["*"] or (len(value) == 4 and set(value) < set(NODES))
    assert ops[-1].value == {"partitions": 4, "filter": ["*"]}
    assert ops[-1].time_ns >= 60 * S
    assert all(o.time_ns < 60 * S for o in ops[:-1])


@pytest.mark.parametrize("partitions", [1, 2])
def test_a_zone_of_one_or_two_partitions_still_gets_alters(partitions: int) -> None:
    """`--db-setting zone_partitions=1` drew a partition count among none
    (IndexError, sim seed 112); 2 did the same whenever the zone had 2."""
    for seed in range(20):
        gen = RebalanceGen(random.Random(seed), NODES, max_partitions=partitions, stop_ns=60 * S)
        ops = drain(gen, ["t"])
        assert len(ops) > 5
        counts = [o.value["partitions"] for o in ops[:-1] if "partitions" in o.value]
        assert all(1 <= c <= partitions for c in counts), counts
        if partitions == 1:
            assert counts == []


def test_a_restore_that_fails_is_asked_again_until_ok() -> None:
    """The restore goes at the time limit, when the nemesis heals and a restarted
    node may not listen yet: a failed or unknown one is asked again, later,
    and the generator ends only once one is ok."""
    gen = RebalanceGen(random.Random(2), NODES, max_partitions=4, stop_ns=10 * S)
    now, restores = 0, []
    while (op := gen.op(Context(now, ("t", "u"), ("t", "u")))) is not None:
        assert isinstance(op, Op), "nothing pending while only the restore is left"
        now = max(now, op.time_ns)
        if op.value != gen.restore():
            gen.update(Context(now, ("t",), ("t",)), Completion(op=op, thread="t", type="ok"))
            continue
        restores.append(now)
        # While the restore is in flight another free thread gets nothing.
        assert gen.op(Context(now, ("u",), ("t", "u"))) is PENDING
        kind = ("fail", "info", "ok")[min(len(restores) - 1, 2)]
        now += S // 100
        gen.update(Context(now, ("t",), ("t",)),
                   Completion(op=op, thread="t", type=kind, time_ns=now))  # fmt: skip
    assert len(restores) == 3
    assert restores[0] >= 10 * S
    assert all(b - a >= RESTORE_RETRY_S * S for a, b in itertools.pairwise(restores))


def test_a_restore_that_never_succeeds_is_given_up() -> None:
    gen = RebalanceGen(random.Random(2), NODES, max_partitions=4, stop_ns=0)
    tries = 0
    while (op := gen.op(Context(tries * S, ("t",), ("t",)))) is not None:
        assert isinstance(op, Op)
        assert op.value == gen.restore()
        tries += 1
        gen.update(Context(tries * S, ("t",), ("t",)),
                   Completion(op=op, thread="t", type="fail", time_ns=tries * S))  # fmt: skip
    assert tries == RESTORE_TRIES


def test_rebalance_never_asks_the_zone_it_believes_it_has() -> None:
    """After a completion reports the zone, the next alter of that field differs."""
    gen = RebalanceGen(random.Random(1), NODES, max_partitions=4, stop_ns=600 * S)
    for _ in range(50):
        op = gen.op(Context(0, ("t",), ("t",)))
        assert isinstance(op, Op)
        (kind, value), *_ = op.value.items()
        zone = dict(gen.zone)
        assert value != zone[kind]
        zone[kind] = value
        done = Completion(op=op, thread="t", type="ok", value={"zone": zone})
        gen.update(Context(op.time_ns, ("t",), ("t",)), done)


def _cancel_rounds(seed: int, rounds: int) -> list[tuple[str, Any]]:
    """Drives CancelRaceGen with ok completions that report a revision."""
    gen = CancelRaceGen(random.Random(seed), partitions=4, stop_ns=10_000 * S)
    out: list[tuple[str, Any]] = []
    rev = 10
    for _ in range(rounds):
        ctx = Context(0, ("t",), ("t",))
        op = gen.op(ctx)
        assert isinstance(op, Op)
        out.append((op.f, op.value))
        rev += 3
        value = {"zone": {"replicas": op.value.get("replicas", 3), "partitions": 4},
                 "revision": rev} if op.f == "alter-zone" else {"outcome": "cancelled"}  # fmt: skip
        gen.update(ctx, Completion(op=op, thread="t", type="ok", value=value))
    return out


def test_cancel_race_alternates_trigger_and_cancel_of_that_trigger() -> None:
    """alter, cancel naming the alter's revision, alter, ...; deterministic per seed."""
    rounds = _cancel_rounds(5, 40)
    assert rounds == _cancel_rounds(5, 40)
    assert [f for f, _ in rounds] == ["alter-zone", "cancel-rebalance"] * 20
    revision = 10
    for f, value in rounds:
        revision += 3
        if f == "cancel-rebalance":
            assert value["after"] == revision - 3
            assert value["phase"] in PHASES
            assert sorted(value["partitions"]) == [0, 1, 2, 3]
    phases = {v["phase"] for f, v in rounds if f == "cancel-rebalance"}
    assert len(phases) >= 3
    assert any(v["stale"] for f, v in rounds if f == "cancel-rebalance")


def test_cancel_race_skips_the_cancel_when_the_trigger_failed() -> None:
    """A failed alter is followed by another alter, not by a cancel."""
    gen = CancelRaceGen(random.Random(2), partitions=4, stop_ns=10_000 * S)
    ctx = Context(0, ("t",), ("t",))
    op = gen.op(ctx)
    assert isinstance(op, Op)
    gen.update(ctx, Completion(op=op, thread="t", type="fail", value={"asked": op.value}))
    nxt = gen.op(ctx)
    assert isinstance(nxt, Op)
    assert nxt.f == "alter-zone"


def test_cancel_race_stops_at_its_stop_time() -> None:
    """No op starts at or after stop_ns."""
    gen = CancelRaceGen(random.Random(2), partitions=4, stop_ns=30 * S)
    ops = drain(gen, ["t"], step_ns=S // 10)
    assert ops
    assert all(o.time_ns < 30 * S for o in ops)


def test_choose_cancel_stale_cancels_go_at_pending_with_seeded_delays() -> None:
    """Stale cancels are sent once pending is written; delays are within the buckets."""
    rng = random.Random(8)
    values = [choose_cancel(rng, 100, 3) for _ in range(300)]
    assert all(v["phase"] == "pending" for v in values if v["stale"])
    assert all(0 <= v["delay_ms"] <= 300 for v in values)
    assert {v["delay_ms"] == 0 for v in values} == {True, False}
    assert {v["phase"] for v in values} == set(PHASES)


@pytest.mark.parametrize(
    ("phase", "stage", "peers", "pending", "reached"),
    [
        ("pending", None, None, True, True),
        ("catching-up", None, None, True, False),  # the leader's stage unknown yet
        ("catching-up", "none", ["n1", "n2", "n3"], True, False),  # not started
        ("catching-up", "catching-up", ["n1", "n2", "n3"], True, True),
        ("joint", "catching-up", ["n1", "n2", "n3"], True, False),
        ("joint", "joint", ["n1", "n2", "n3", "n4"], True, True),
        ("joint", "stable", ["n1", "n2", "n4"], True, True),  # past it: send now
        ("stable", "joint", ["n1", "n2", "n3", "n4"], True, False),
        ("stable", "stable", ["n1", "n2", "n4"], True, True),
        ("stable", "none", ["n1", "n2", "n4"], True, True),  # committed, pending not cleared
        ("stable", "none", ["n1", "n2", "n3"], False, True),  # finished: nothing to wait for
    ],
)
def test_phase_choice(
    phase: str, stage: str | None, peers: list[str] | None, pending: bool, reached: bool
) -> None:
    """When a cancel aimed at `phase` is sent, for the leader's view of the change."""
    assert phase_reached(phase, stage, peers, ["n1", "n2", "n4"], pending) is reached


def _meta_ops(seed: int, mix: Any) -> list[Op]:
    return drain(Limit(300, MetastoreOps(random.Random(seed), 4, mix)), [0, 1])


def test_metastore_ops_are_seeded_and_etcd_keeps_its_mix() -> None:
    """Same seed, same ops; the basic mix (etcd) never deletes nor reads the past."""
    a = [(o.f, o.key, str(o.value)) for o in _meta_ops(4, FULL_MIX)]
    assert a == [(o.f, o.key, str(o.value)) for o in _meta_ops(4, FULL_MIX)]
    assert {f for f, _, _ in a} == {"get", "put", "invoke", "delete", "range"}
    basic = _meta_ops(4, BASIC_MIX)
    assert {o.f for o in basic} == {"get", "put", "invoke"}
    assert all(o.key and o.key.startswith(PREFIX) for o in basic)


def test_past_reads_trail_the_newest_revision_seen() -> None:
    """A range reads below the highest revision a completion reported."""
    gen = MetastoreOps(random.Random(1), 4, (("range", 1.0),))
    ctx = Context(0, (0,), (0,))
    put = Op(f="put", key="m/0", value=1)
    gen.update(ctx, Completion(op=put, thread=0, type="ok", value=500))
    for _ in range(50):
        op = gen.op(ctx)
        assert isinstance(op, Op)
        assert 480 <= op.value["revision"] < 500


def test_slow_rounds_do_not_outlive_the_stop_time() -> None:
    """Rounds that take 30 s each (cancels waiting out their end) still stop at stop_ns."""
    gen = CancelRaceGen(random.Random(4), partitions=4, stop_ns=40 * S, gap_s=1.5)
    now, rev, starts = 0, 10, []
    while (op := gen.op(Context(now, ("t",), ("t",)))) is not None:
        assert isinstance(op, Op)
        now = max(now, op.time_ns)
        starts.append(now)
        now += 30 * S if op.f == "cancel-rebalance" else S // 10
        rev += 3
        value = {"zone": {"replicas": op.value.get("replicas", 3)}, "revision": rev}
        gen.update(Context(now, ("t",), ("t",)), Completion(op=op, thread="t", type="ok",
                                                            value=value))  # fmt: skip
    assert starts
    assert max(starts) < 40 * S
