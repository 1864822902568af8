"""Synthetic runs: a complete run directory without a cluster.

Theory of operation. `make_run` lays out what a real run leaves behind
(test.json, history.jsonl, nodes/<n>/events.jsonl, results.json) from one
seed, so reports, the pipeline and their tests have realistic input in
milliseconds. The story of every run is the same five nodes, two Raft
groups (`part-0` on n1,n2,n3 led by n1; `part-1` on n3,n4,n5 led by n4) and,
as fractions of the run's duration D:

- 0.15-0.35 D: a partition isolates n4; part-1 elects n5 in term 2, and n4
  steps down when the partition heals;
- 0.45-0.65 D: n2 is killed, then restarted (`started`, then follower);
- 0.50-0.60 D: part-0 changes peers from n1,n2,n3 to n1,n3,n4 through the
  jraft stages (catching-up, joint, stable), driven by a rebalance of zone 1
  partition 0 whose assignment keys are written with revisions;
- the last 0.35 D is quiet, so the convergence checker can judge the end.

Client operations are get/put/cas on a few keys (the kv model: a register
per key). Each takes effect at a random instant between its invoke and its
completion (its linearization point), so the history is linearizable with
that order as witness; ops sent to an isolated or dead node fail or time
out (`info`, which may or may not have taken effect, and whose process is
replaced). `valid=False` plants one stale read: a get returns the value a
write had overwritten before the get began. The verdicts in results.json
come from the real checkers (checkers.compose), never from here.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from checkers import compose
from harness import plan as plans
from harness.store import RunDir, new_run
from harness.synthetic_story import (
    CHANGE,
    CLIENTS,
    KILL,
    MONO_AT_ZERO,
    NEW_PART0,
    NODES,
    NS_PER_MS,
    NS_PER_S,
    PARTITION,
    QUIET_FRACTION,
    AuditStory,
    window,
)


@dataclass
class _Op:
    """One client operation while it is being generated."""

    slot: int  # client slot; the process id is slot + CLIENTS * (infos so far)
    process: int
    f: str
    key: str
    invoke: int
    complete: int
    type: str = "ok"
    value: Any = None
    output: Any = None
    error: str | None = None
    node: str = ""
    point: int = 0  # linearization point (ns); meaningful if the op took effect
    effective: bool = True


def duration_ns(ops: int) -> int:
    """The run's length: 20 s, or 5 ms per operation for long runs."""
    return max(20 * NS_PER_S, ops * 5 * NS_PER_MS)


def make_run(
    root: Path,
    *,
    seed: int,
    ops: int,
    valid: bool = True,
    faults: bool = True,
    changes: bool = True,
    rebalance: bool = True,
    name: str = "synthetic",
    started: float | None = None,
) -> RunDir:
    """Writes one synthetic run under `root` (a store) and returns its RunDir.

    Deterministic for given arguments except for the directory's time stamp
    (`started`, Unix seconds, defaults to now). results.json is written by
    the real checkers.
    """
    if ops < 1:
        raise ValueError(f"a synthetic run needs at least one operation, got {ops}")
    rng = random.Random(f"synthetic/{seed}")
    end = duration_ns(ops)
    plan = plans.Plan(
        name=name,
        seed=seed,
        backend="sim",
        nodes=NODES,
        db_settings={"version": "synthetic"},
        workload=("register", "change-peers") if changes else ("register",),
        nemesis=("partition", "kill") if faults else (),
        concurrency=CLIENTS,
        rate_hz=round(ops / (end / NS_PER_S), 3),
        time_limit_s=end / NS_PER_S,
        quiet_s=round(QUIET_FRACTION * end / NS_PER_S, 3),
        options={"synthetic": {"ops": ops, "valid": valid, "rebalance": rebalance}},
    )
    # Whole seconds: the run dir's stamp then names the run's exact start, which
    # the report uses to put audit events (wall) on the history's clock.
    wall0 = float(int(time.time() if started is None else started))
    run = new_run(root, name, seed, started=wall0)
    run.plan.write_bytes(plans.dump(plan))
    client_ops = _client_ops(rng, ops, end, faults)
    _linearize(rng, client_ops, keys=max(2, min(8, ops // 200)))
    if not valid and not _plant_stale_read(client_ops):
        raise ValueError(f"{ops} operations leave no room for a stale read; use more")
    events = _history(client_ops, end, faults, changes, rebalance)
    _write_jsonl(run.history, events)
    # The clock contract (docs/events.md): nodes share the harness's monotonic clock.
    anchor = {"history_zero_wall": wall0, "history_zero_mono_ns": MONO_AT_ZERO,
              "shared_monotonic": True}  # fmt: skip
    run.timeline.write_bytes(msgspec.json.encode(anchor) + b"\n")
    audit = AuditStory(wall0, end, seed)
    audit.build(faults=faults, changes=changes, rebalance=rebalance)
    for node, node_events in audit.by_node().items():
        run.node_dir(node).mkdir(parents=True, exist_ok=True)
        _write_jsonl(run.events(node), node_events)
    loaded_plan, history, loaded_audit, _ = compose.load_run(run.path)
    result = compose.check(loaded_plan, history, audit=loaded_audit)
    compose.write_results(result, run.path)
    return run


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    encoder = msgspec.json.Encoder()
    with path.open("wb") as fh:
        for row in rows:
            fh.write(encoder.encode(row) + b"\n")


def _client_ops(rng: random.Random, ops: int, end: int, faults: bool) -> list[_Op]:
    """Each client slot's operations back to back, with fault effects."""
    cut_off = {NODES[3]: window(end, PARTITION), NODES[1]: window(end, KILL)} if faults else {}
    busy = int(0.9 * end)  # leave the tail of the run without traffic
    gap = max(1, busy * CLIENTS // ops)
    out: list[_Op] = []
    for slot in range(CLIENTS):
        count = ops // CLIENTS + (1 if slot < ops % CLIENTS else 0)
        node = NODES[slot % len(NODES)]
        t = rng.randrange(gap)
        process = slot
        for _ in range(count):
            invoke = t + rng.randrange(1, 2 * gap)
            latency = int(rng.lognormvariate(0.5, 0.6) * NS_PER_MS)
            down = cut_off.get(node)
            op = _Op(slot, process, rng.choice(("get", "get", "put", "cas")), "", invoke, 0)
            op.node = node
            if down is not None and down[0] <= invoke < down[1]:
                if node == NODES[1] or rng.random() < 0.8:
                    op.type, op.error, op.effective = "fail", "unavailable", False
                else:  # timed out: may or may not have happened
                    op.type, op.error = "info", "timeout"
                    op.effective = rng.random() < 0.5
                    latency = min(gap // 2, 500 * NS_PER_MS)
            op.complete = invoke + max(latency, 1000)
            t = op.complete
            out.append(op)
            if op.type == "info":
                process += CLIENTS
    return out


def _linearize(rng: random.Random, ops: list[_Op], keys: int) -> None:
    """Picks keys, values and outputs by applying ops in linearization order."""
    for op in ops:
        op.key = f"k{min(int(rng.paretovariate(1.2)) - 1, keys - 1)}"
        op.point = rng.randrange(op.invoke, op.complete + 1)
    state: dict[str, int | None] = {}
    written: dict[str, list[int]] = {}
    fresh = 0
    for op in sorted(ops, key=lambda o: o.point):
        now = state.get(op.key)
        if op.f == "get":
            op.output = now
            continue
        fresh += 1
        if op.f == "put":
            op.value = op.output = fresh
        else:
            seen = written.get(op.key, [])
            guess = now if rng.random() < 0.6 or not seen else rng.choice(seen)
            op.value, op.output = [guess, fresh], guess == now
        if op.effective and (op.f == "put" or op.output):
            state[op.key] = fresh
            written.setdefault(op.key, []).append(fresh)


def _plant_stale_read(ops: list[_Op]) -> bool:
    """Makes one get return a value overwritten before it began.

    The overwritten value's writer W and the overwriting write P are both
    acknowledged, W completed before P was invoked and P before the get was
    invoked; values are unique, so no order can explain the read.
    """
    writes: dict[str, list[_Op]] = {}
    order = sorted(ops, key=lambda o: o.point)
    for op in order:
        if op.f != "get" and op.effective and (op.f == "put" or op.output):
            writes.setdefault(op.key, []).append(op)
    # Plant it in the least used key: the checker decides small partitions
    # first, so even a huge history gets its verdict quickly.
    load: dict[str, int] = {}
    for op in ops:
        load[op.key] = load.get(op.key, 0) + 1
    middle = sorted(order[len(order) // 2 :], key=lambda o: load[o.key])
    for get in (o for o in middle if o.f == "get" and o.type == "ok"):
        chain = [w for w in writes.get(get.key, []) if w.point < get.point]
        for w, p in zip(chain[-2::-1], chain[:0:-1], strict=False):
            if w.type == p.type == "ok" and w.complete < p.invoke and p.complete < get.invoke:
                get.output = w.value if w.f == "put" else w.value[1]
                return True
    return False


def _history(
    ops: list[_Op], end: int, faults: bool, changes: bool, rebalance: bool
) -> list[dict[str, Any]]:
    """Every history event in time order, indexed."""
    rows: list[tuple[int, int, dict[str, Any]]] = []
    for n, op in enumerate(ops):
        base = {"process": op.process, "f": op.f, "key": op.key, "node": op.node}
        rows.append((op.invoke, 2 * n, {**base, "type": "invoke", "value": op.value}))
        done = {**base, "type": op.type}
        if op.type == "ok":
            done["value"] = op.output if op.f != "put" else op.value
        else:
            done["value"], done["error"] = op.value, op.error
        rows.append((op.complete, 2 * n + 1, done))
    seq = 2 * len(ops)
    for t0, t1, process, f, value in _admin_ops(end, faults, changes, rebalance):
        row = {"process": process, "f": f, "value": value}
        rows.append((t0, seq, {**row, "type": "invoke"}))
        # Jepsen's convention: a nemesis op ends with info.
        rows.append((t1, seq + 1, {**row, "type": "info" if process == "nemesis" else "ok"}))
        seq += 2
    rows.sort(key=lambda r: (r[0], r[1]))
    out = []
    for index, (t, _, row) in enumerate(rows):
        ev = {"index": index, "time": t, **{k: v for k, v in row.items() if v is not None}}
        out.append(ev)
    return out


AdminOp = tuple[int, int, str, str, Any]  # invoke, complete, process, f, value


def _admin_ops(end: int, faults: bool, changes: bool, rebalance: bool) -> Iterator[AdminOp]:
    """The nemesis's and the admin's operations."""
    if faults:
        (p0, p1), (k0, k1) = window(end, PARTITION), window(end, KILL)
        yield p0, p0 + NS_PER_MS, "nemesis", "partition", {"isolated": [NODES[3]]}
        yield p1, p1 + NS_PER_MS, "nemesis", "heal-partition", None
        yield k0, k0 + NS_PER_MS, "nemesis", "kill", [NODES[1]]
        yield k1, k1 + NS_PER_MS, "nemesis", "start", [NODES[1]]
    if changes:
        # The admin's call returns once the change is done (or rebalanced).
        c0, c1 = window(end, CHANGE)
        f = "rebalance" if rebalance else "change-peers"
        yield c0, c1, "admin", f, {"group": "part-0", "peers": list(NEW_PART0)}
