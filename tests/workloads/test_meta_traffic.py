"""The metastore traffic kinds (workloads.meta_traffic): named, switched on one by
one, and each sent when on; ember's default plans send what they always did."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest

from harness import plan as plans
from harness.dbs.ember_run import SYSTEM
from workloads import meta_traffic
from workloads.generator import Completion, Context, Op
from workloads.meta_traffic import Known, TrafficError, parse
from workloads.metastore import FULL_MIX, MetastoreOps, ProbeGen, WatchGen, metastore_streams


def _ctx() -> Context:
    return Context(0, (0,), (0,))


def test_kinds_parse_by_name_and_unknown_ones_are_named() -> None:
    assert parse(None, ("delete",)) == {"delete"}
    assert parse("all", ()) == set(meta_traffic.KINDS)
    assert parse("none", ("delete",)) == set()
    assert parse(["compact", "watch-key"], ()) == {"compact", "watch-key"}
    with pytest.raises(TrafficError, match="unknown metastore traffic watch-sideways"):
        parse("compact,watch-sideways", ())
    with pytest.raises(TrafficError, match="must be a list"):
        parse(7, ())


def _ops(traffic: frozenset[str], n: int = 400) -> tuple[list[Op], Known]:
    known = Known()
    gen = MetastoreOps(random.Random(3), mix=FULL_MIX, traffic=traffic, known=known)
    out = []
    for i in range(n):
        op = gen.op(_ctx())
        assert isinstance(op, Op)
        out.append(op)
        value: object = {"revision": i + 1, "succeeded": True, "compact_revision": 0}
        if op.f in ("put", "delete"):
            value = i + 1
        gen.update(_ctx(), Completion(op=op, thread=0, type="ok", value=value))
    return out, known


def test_compactions_come_now_and_then_and_right_after_deletes() -> None:
    ops, known = _ops(frozenset({"delete", "compact"}))
    after_delete = sum(1 for a, b in itertools.pairwise(ops)
                       if a.f == "delete" and b.f == "compact")  # fmt: skip
    deletes = sum(op.f == "delete" for op in ops[:-1])
    assert deletes > 0
    assert after_delete == deletes
    assert sum(op.f == "compact" for op in ops) > deletes  # the timer's share too
    assert known.compacted > 0
    revisions = [op.value["revision"] for op in ops if op.f == "compact"]
    assert all(r >= 1 for r in revisions)


def test_without_the_kinds_no_compaction_and_no_mod_comparison_is_sent() -> None:
    ops, _ = _ops(frozenset({"delete", "range"}))
    assert not any(op.f == "compact" for op in ops)
    conds = [c for op in ops if op.f == "invoke" for c in op.value["if"]]
    assert not any(c["target"] == "mod_revision" for c in conds)
    ops, _ = _ops(frozenset({"compare-mod"}))
    conds = [c for op in ops if op.f == "invoke" for c in op.value["if"]]
    assert any(c["target"] == "mod_revision" for c in conds)


def test_every_probe_kind_is_sent_on_the_probe_thread() -> None:
    known = Known(newest=50, compacted=20)
    gen = ProbeGen(random.Random(1), frozenset(meta_traffic.KINDS), known)
    seen: Counter[str] = Counter()
    for i in range(300):
        newest = max(known.newest, known.watched)
        op = gen.op(_ctx())
        assert isinstance(op, Op)
        v = op.value
        kind = v["probe"]  # every watch of this thread probes
        seen[kind] += 1
        seen["key"] += "key" in v
        seen["slow"] += bool(v.get("slow"))
        if kind == "now":
            assert "from" not in v
        elif kind == "compacted":
            assert 1 <= v["from"] < 20
        elif kind == "compaction":
            assert v["from"] == 20
        elif kind == "future":
            assert v["from"] > newest
        else:
            assert kind == "past"
            assert 20 <= v["from"] <= newest
        events = [{"key": "m/0", "revision": 60 + i}]
        gen.update(_ctx(), Completion(op=op, thread=0, type="ok", value=events))
        assert known.watched == 60 + i  # later probes aim at what this one saw
        assert known.chain_from is None  # and the chain is not theirs to move
    for kind in ("now", "past", "compaction", "compacted", "future", "key", "slow"):
        assert seen[kind] > 0, seen


def test_a_refused_probe_spaces_the_next_one() -> None:
    """A compacted start is refused at once: the next probe waits a pause
    instead of following in the same millisecond; any other ending does not."""
    gen = ProbeGen(random.Random(1), frozenset({"watch-compacted", "watch-now"}), Known())
    at = 5_000_000_000
    ctx = Context(at, (0,), (0,))
    first = gen.op(ctx)
    assert isinstance(first, Op)
    assert first.time_ns == at
    gen.update(ctx, Completion(op=first, thread=0, type="fail", value={"responses": []},
                               time_ns=at))  # fmt: skip
    paused = gen.op(ctx)
    assert isinstance(paused, Op)
    assert paused.time_ns == at + int(meta_traffic.REFUSED_PAUSE_S * 1e9)
    later = Context(paused.time_ns + 10, (0,), (0,))
    gen.update(later, Completion(op=paused, thread=0, type="ok", value=[], time_ns=later.time_ns))
    after = gen.op(later)
    assert isinstance(after, Op)
    assert after.time_ns == later.time_ns


def test_the_chain_never_probes_and_resumes_after_its_last_event() -> None:
    """Before, probes took turns on the chain's thread: two in a row held the
    chain back 6 s, long enough for a compaction to pass its resume point."""
    known = Known()
    chain = WatchGen(random.Random(2), frozenset(meta_traffic.KINDS), known)
    slow = 0
    for i in range(100):
        op = chain.op(_ctx())
        assert isinstance(op, Op)
        assert set(op.value) - {"slow"} == {"prefix", "from"}
        assert op.value["from"] == (1 if i == 0 else 10 * i + 1)
        slow += bool(op.value.get("slow"))
        events = [{"key": "m/0", "revision": 10 * (i + 1)}]
        chain.update(_ctx(), Completion(op=op, thread=0, type="ok", value=events))
        assert known.chain_from == 10 * (i + 1) + 1
    assert 0 < slow < 100  # watch-slow reaches the chain too


def test_a_probing_plan_runs_its_probes_on_a_thread_of_their_own() -> None:
    """Probes on: a `probe` thread kind beside the chain's `watch`, sharing
    what they learn; off (ember's default): no probe thread at all."""
    probing = plans.Plan(backend="sim", workload=("register", "metastore"),
                         options={"meta_traffic": ["watch-past", "compact"]})  # fmt: skip
    gens = SYSTEM.generators(probing, _FakeDB(), {})
    probes, chain = gens["probe"].gen, gens["watch"].gen  # type: ignore[attr-defined]
    assert isinstance(probes, ProbeGen)
    assert isinstance(chain, WatchGen)
    assert probes.known is chain.known
    plain = plans.Plan(backend="sim", workload=("register", "metastore"))
    assert "probe" not in SYSTEM.generators(plain, _FakeDB(), {})


def test_ember_plans_that_name_no_traffic_watch_and_mix_as_before() -> None:
    """The default sends deletes and past reads, no probes and no mod-revision
    comparisons (the simulator's seeds stay what they were); every kind can
    be named, compare-mod too (judged on the watch record's ranks)."""
    plan = plans.Plan(backend="sim", workload=("register", "metastore"))
    gens = SYSTEM.generators(plan, _FakeDB(), {})
    watch = gens["watch"].gen  # type: ignore[attr-defined]
    assert watch.rng is None
    assert "probe" not in gens
    assert set(meta_traffic.EMBER_DEFAULT) <= set(SYSTEM.meta_traffic)
    assert set(SYSTEM.meta_traffic) == set(meta_traffic.KINDS)
    assert "compare-mod" not in meta_traffic.EMBER_DEFAULT


class _FakeDB:
    zone_partitions = 0
    partitions = 4
    nodes: list[object] = []


def test_the_closing_watch_continues_the_chain() -> None:
    """After the final reads, one plain watch resumes where the chain stopped
    (whatever the probes saw), so the record of writes reaches past every
    revision the run saw."""
    plan = plans.Plan(backend="sim", workload=("register", "metastore"),
                      options={"meta_traffic": list(meta_traffic.EMBER_KINDS)})  # fmt: skip
    main_phase = SYSTEM.generators(plan, _FakeDB(), {})
    watch, probes = main_phase["watch"].gen, main_phase["probe"].gen  # type: ignore[attr-defined]
    assert watch.rng is not None  # slow reads on: the closing watch must not draw one
    chain = Op(f="watch", value={"prefix": "m/", "from": 1})
    events = [{"key": "m/0", "revision": 41}]
    watch.update(_ctx(), Completion(op=chain, thread=0, type="ok", value=events))
    probe = Op(f="watch", value={"prefix": "m/", "from": 90, "probe": "future"})
    far = [{"key": "m/1", "revision": 95}]
    probes.update(_ctx(), Completion(op=probe, thread=0, type="ok", value=far))
    for _ in range(20):  # whatever the slow-read stream would draw next
        closing = SYSTEM.closing(main_phase)
        assert set(closing) == {"watch"}
        op = closing["watch"].op(_ctx())
        assert isinstance(op, Op)
        assert op.f == "watch"
        assert op.value == {"prefix": "m/", "from": 42}
        assert closing["watch"].op(_ctx()) is None  # one watch, then done


def test_no_closing_watch_without_the_metastore_workload() -> None:
    plan = plans.Plan(backend="sim", workload=("register",))
    assert SYSTEM.closing(SYSTEM.generators(plan, _FakeDB(), {})) == {}


def test_compactions_never_pass_the_chains_resume() -> None:
    """A compaction that refused the chain's resume would delete the only record
    of the writes in between (and the ranking of every later revision)."""
    mix = (*FULL_MIX, ("compact", 0.5))
    ops, watch, _ = metastore_streams(lambda _name: random.Random(3), 4, mix,
                                      frozenset({"compact", "delete"}))  # fmt: skip
    known = watch.known
    assert known.chain_from == 1  # before the first watch completes: compact nothing
    known.newest = 500
    chain = Op(f="watch", value={"prefix": "m/", "from": 1})
    for last, newest in ((120, 500), (480, 500), (499, 500)):
        known.newest = newest
        events = [{"key": "m/0", "revision": last}]
        watch.update(_ctx(), Completion(op=chain, thread=0, type="ok", value=events))
        assert known.chain_from == last + 1
        targets = [meta_traffic.compact_op_value(random.Random(i), known)["revision"]
                   for i in range(200)]  # fmt: skip
        assert max(targets) <= last + 1
        assert max(targets) == min(last + 1, newest - 1)  # as recent as the chain allows
    sent = [op for op in (ops.op(_ctx()) for _ in range(300)) if isinstance(op, Op)]
    assert any(op.f == "compact" for op in sent)
    assert all(op.value["revision"] <= known.chain_from for op in sent if op.f == "compact")
