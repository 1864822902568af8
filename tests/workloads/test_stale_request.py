"""The stale-request schedule and the request it rebuilds: seeded, bounded, honest."""

from __future__ import annotations

import random
from typing import Any

from ember.rebalance.keys import key
from workloads.generator import Completion, Context, Op, drain
from workloads.rebalance import RebalanceGen
from workloads.stale_request import LIMIT, STALE_F, StaleRequests, is_stale_op, rebuild

S = 1_000_000_000
NODES = ("n1", "n2", "n3", "n4", "n5")


def _times(seed: int, stop_s: float = 300.0, **kw: Any) -> list[tuple[int, list[int]]]:
    st = StaleRequests(random.Random(seed), stop_ns=int(stop_s * S), **kw)
    out, now = [], 0
    while (due := st.due(now)) is not None:
        op = st.take(due, 4)
        out.append((op.time_ns, op.value["partitions"]))
        now = due
    return out


def test_the_schedule_is_a_function_of_the_seed() -> None:
    """Same seed, same times and partition orders; another seed, others."""
    assert _times(5) == _times(5)
    assert _times(5) != _times(6)


def test_a_few_a_minute_bounded_and_none_at_or_after_stop() -> None:
    """Gaps 0.5..1.5 x gap_s; at most `limit`; nothing at or past stop_ns."""
    ops = _times(7, stop_s=120.0, gap_s=12.0)
    times = [t for t, _ in ops]
    assert 120 / 18 - 1 <= len(ops) <= 120 / 6
    assert all(t < 120 * S for t in times)
    gaps = [b - a for a, b in zip([0, *times], times, strict=False)]
    assert all(6 * S <= g <= 18 * S for g in gaps), gaps
    assert len(_times(7, stop_s=10_000.0)) == LIMIT
    assert len(_times(7, stop_s=10_000.0, limit=3)) == 3


def test_each_op_tries_every_zone_partition_once() -> None:
    """The value orders all partitions of the zone (a seeded shuffle)."""
    orders = [order for _, order in _times(11)]
    assert all(sorted(order) == [0, 1, 2, 3] for order in orders)
    assert len({tuple(o) for o in orders}) > 1


def _gen(seed: int, stale: bool) -> RebalanceGen:
    extra = StaleRequests(random.Random(99), stop_ns=60 * S) if stale else None
    return RebalanceGen(random.Random(seed), NODES, max_partitions=4, stop_ns=60 * S, stale=extra)


def test_the_rebalance_workload_interleaves_them_without_changing_its_alters() -> None:
    """Alters as without stale requests; stale ops in between, in time order."""
    plain = drain(_gen(3, stale=False), ["t"])
    mixed = drain(_gen(3, stale=True), ["t"])
    stale = [o for o in mixed if is_stale_op(o)]
    assert stale
    assert all(o.f == STALE_F for o in stale)
    assert [(o.value, o.time_ns) for o in mixed if not is_stale_op(o)] == [
        (o.value, o.time_ns) for o in plain
    ]
    times = [o.time_ns for o in mixed]
    assert times == sorted(times)
    assert mixed[-1].value == {"partitions": 4, "filter": ["*"]}  # still ends with the restore


def test_a_stale_completion_does_not_change_the_believed_zone() -> None:
    gen = _gen(1, stale=True)
    before = dict(gen.zone)
    op = Op(f=STALE_F, value={"stale": True, "partitions": [0]})
    done = Completion(op=op, thread="t", type="ok", value={"outcome": "ignored"})
    gen.update(Context(0, ("t",), ("t",)), done)
    assert gen.zone == before
    assert not is_stale_op(Op(f=STALE_F, value={"partitions": [0]}))  # a real rebalance op


def _kv(k: str, value: Any, mod: int) -> dict[str, Any]:
    return {"key": k, "value": value, "mod_revision": mod, "create_revision": 1, "version": 1}


def _snap(p: int, stable: list[str], pending: tuple[list[str], int] | None, s_mod: int) -> Any:
    snap = {key("default", p, "stable"): _kv(key("default", p, "stable"), stable, s_mod)}
    if pending is not None:
        k = key("default", p, "pending")
        snap[k] = _kv(k, pending[0], pending[1])
    return snap


def test_a_pending_rebalance_is_resent_as_stamped_at_its_pending_write() -> None:
    now = _snap(1, ["n1", "n2", "n3"], (["n1", "n2", "n3", "n4"], 40), 12)
    assert rebuild(now, None, 1) == {
        "zone": "default", "partition": 1, "pending_revision": 40, "revision": 40,
        "old": ["n1", "n2", "n3"], "new": ["n1", "n2", "n3", "n4"],
    }  # fmt: skip


def test_a_finished_rebalance_is_rebuilt_from_the_keys_before_its_done() -> None:
    """Pending gone: the keys at stable's mod revision - 1 hold its request."""
    now = _snap(0, ["n2", "n3", "n4"], None, 57)
    before = _snap(0, ["n1", "n2", "n3"], (["n2", "n3", "n4"], 50), 12)
    request = rebuild(now, before, 0)
    assert request is not None
    assert (request["revision"], request["pending_revision"]) == (50, 50)
    assert (request["old"], request["new"]) == (["n1", "n2", "n3"], ["n2", "n3", "n4"])


def test_no_request_when_no_rebalance_ever_ran() -> None:
    """Stable from the zone's creation (no pending before it): nothing to resend."""
    now = _snap(0, ["n1", "n2", "n3"], None, 12)
    assert rebuild(now, _snap(0, ["n1", "n2", "n3"], None, 12), 0) is None
    assert rebuild(now, None, 0) is None
    assert rebuild({}, None, 0) is None
