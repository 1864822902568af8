"""The generator library: pure, seeded, deterministic given contexts and events."""

from __future__ import annotations

import itertools
import random

from workloads.change_peers import ChangePeersGen, plan_move
from workloads.generator import (
    PENDING,
    Completion,
    Context,
    EachThread,
    Fn,
    Limit,
    Mix,
    Once,
    Op,
    Phases,
    Seq,
    Stagger,
    TimeLimit,
    drain,
)
from workloads.register import register_ops

S = 1_000_000_000


def _ops(seed: int) -> list[tuple[str, object, object]]:
    gen = Limit(200, register_ops(random.Random(seed)))
    return [(o.f, o.key, o.value) for o in drain(gen, [0, 1, 2])]


def test_register_ops_are_a_function_of_the_seed() -> None:
    """The same seed yields the same ops; another seed yields others."""
    assert _ops(7) == _ops(7)
    assert _ops(7) != _ops(8)


def test_register_ops_speak_get_put_cas_over_many_keys() -> None:
    """Every op is get, put or cas (value [expected, new]) on one of the keys."""
    ops = drain(Limit(500, register_ops(random.Random(1), keys=20)), [0])
    assert {o.f for o in ops} == {"get", "put", "cas"}
    assert len({o.key for o in ops}) == 20
    assert all(isinstance(o.value, list) and len(o.value) == 2 for o in ops if o.f == "cas")


def test_time_limit_ends_a_generator_and_drops_ops_past_it() -> None:
    """No op starts at or after the limit; the generator then says None."""
    gen = TimeLimit(
        2.0, Stagger(0.1, Fn(lambda r: Op(f="get"), random.Random(0)), random.Random(1))
    )
    ops = drain(gen, [0])
    assert ops
    assert all(o.time_ns < 2 * S for o in ops)
    assert 5 < len(ops) < 60  # mean gap 0.1 s over 2 s: about 20


def test_stagger_spaces_ops_by_about_the_mean_gap() -> None:
    """Gaps are in [0, 2 * mean) and average near the mean."""
    gen = Limit(400, Stagger(0.05, Fn(lambda r: Op(f="get"), random.Random(0)), random.Random(3)))
    times = [o.time_ns for o in drain(gen, [0])]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(0 <= g < 0.1 * S for g in gaps)
    assert 0.04 * S < sum(gaps) / len(gaps) < 0.06 * S


def test_mix_draws_from_each_generator_and_drops_exhausted_ones() -> None:
    """Mix interleaves its sources until all are exhausted."""
    a = Limit(30, Fn(lambda r: Op(f="a"), random.Random(0)))
    b = Limit(30, Fn(lambda r: Op(f="b"), random.Random(0)))
    fs = [o.f for o in drain(Mix([a, b], random.Random(5)), [0])]
    assert sorted(fs) == ["a"] * 30 + ["b"] * 30
    assert fs != sorted(fs)  # interleaved, not one after the other


def test_phases_wait_for_every_op_of_the_last_phase() -> None:
    """The next phase's first op is withheld while a thread is still busy."""
    gen = Phases([Once(Op(f="first")), Once(Op(f="second"))])
    assert isinstance(gen.op(Context(0, (0, 1), (0, 1))), Op)
    assert gen.op(Context(1, (1,), (0, 1))) is PENDING  # thread 0 still busy
    second = gen.op(Context(2, (0, 1), (0, 1)))
    assert isinstance(second, Op)
    assert second.f == "second"
    assert gen.op(Context(3, (0, 1), (0, 1))) is None


def test_seq_runs_generators_in_turn_without_a_barrier() -> None:
    """Seq moves on as soon as a generator is exhausted."""
    gen = Seq([Once(Op(f="x")), Once(Op(f="y"))])
    assert [o.f for o in drain(gen, [0])] == ["x", "y"]


def test_each_thread_gives_every_thread_its_own_generator() -> None:
    """Each thread gets its own ops, tagged with the thread."""
    gen = EachThread(lambda t: Limit(2, Fn(lambda r, t=t: Op(f=f"t{t}"), random.Random(0))))
    ops = drain(gen, [0, 1])
    assert sorted((o.thread, o.f) for o in ops) == [(0, "t0"), (0, "t0"), (1, "t1"), (1, "t1")]


def test_plan_move_keeps_groups_at_least_two_strong_and_in_bounds() -> None:
    """Every planned move names known nodes, at least two of them, and changes the set."""
    nodes = ["n1", "n2", "n3", "n4", "n5"]
    rng = random.Random(0)
    for move in ("add", "remove", "replace", "disjoint"):
        for peers in (["n1", "n2", "n3"], ["n1", "n2"], nodes):
            new = plan_move(move, peers, nodes, rng)
            if new is not None:
                assert set(new) <= set(nodes)
                assert len(new) >= 2
                assert new != sorted(peers)
    assert plan_move("add", nodes, nodes, rng) is None
    assert plan_move("disjoint", ["n1", "n2"], nodes, rng) is not None


def test_change_peers_follows_its_completions() -> None:
    """After an ok change the generator plans from the new peers; tokens increase."""
    gen = ChangePeersGen(
        random.Random(2), ["part-0"], ["n1", "n2", "n3", "n4", "n5"], ["n1", "n2", "n3"]
    )
    ctx = Context(0, (0,), (0,))
    first = gen.op(ctx)
    assert isinstance(first, Op)
    assert first.group == "part-0"
    gen.update(ctx, Completion(op=first, thread=0, type="ok", value=first.value))
    assert gen.peers["part-0"] == first.value["peers"]
    second = gen.op(ctx)
    assert isinstance(second, Op)
    assert second.value["token"] == first.value["token"] + 1
    failed = Completion(op=second, thread=0, type="fail", value=second.value)
    gen.update(ctx, failed)
    assert gen.peers["part-0"] == first.value["peers"]
