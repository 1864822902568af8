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

import hashlib
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

NODES = ("n1", "n2", "n3", "n4", "n5")
OLD_PART0, NEW_PART0, PART1 = ("n1", "n2", "n3"), ("n1", "n3", "n4"), ("n3", "n4", "n5")
CLIENTS = 5
NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000
ZONE = 1
# Windows as fractions of the run's duration (see the module doc).
PARTITION, KILL, CHANGE = (0.15, 0.35), (0.45, 0.65), (0.50, 0.60)
QUIET_FRACTION = 0.15  # of D; traffic runs to ~0.9 D, the last fault ends at 0.65 D


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
    audit = _Audit(wall0, end, seed)
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


def _window(end: int, span: tuple[float, float]) -> tuple[int, int]:
    return int(span[0] * end), int(span[1] * end)


def _client_ops(rng: random.Random, ops: int, end: int, faults: bool) -> list[_Op]:
    """Each client slot's operations back to back, with fault effects."""
    cut_off = {NODES[3]: _window(end, PARTITION), NODES[1]: _window(end, KILL)} if faults else {}
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
        (p0, p1), (k0, k1) = _window(end, PARTITION), _window(end, KILL)
        yield p0, p0 + NS_PER_MS, "nemesis", "partition", {"isolated": [NODES[3]]}
        yield p1, p1 + NS_PER_MS, "nemesis", "heal-partition", None
        yield k0, k0 + NS_PER_MS, "nemesis", "kill", [NODES[1]]
        yield k1, k1 + NS_PER_MS, "nemesis", "start", [NODES[1]]
    if changes:
        # The admin's call returns once the change is done (or rebalanced).
        c0, c1 = _window(end, CHANGE)
        f = "rebalance" if rebalance else "change-peers"
        yield c0, c1, "admin", f, {"group": "part-0", "peers": list(NEW_PART0)}


class _Audit:
    """Builds each node's audit events (docs/events.md) for the run's story."""

    def __init__(self, wall0: float, end: int, seed: int) -> None:
        self.wall0, self.end, self.seed = wall0, end, seed
        self.events: list[tuple[int, int, dict[str, Any]]] = []

    def emit(self, t: int, node: str, kind: str, group: str | None = None, **fields: Any) -> None:
        """Appends one event at history time `t` (ns)."""
        ev: dict[str, Any] = {"kind": kind, "node": node}
        if group is not None:
            ev["group"] = group
        ev |= {"mono_ns": t, "wall": round(self.wall0 + t / NS_PER_S, 6), **fields}
        self.events.append((t, len(self.events), ev))

    def by_node(self) -> dict[str, list[dict[str, Any]]]:
        """Each node's events in emission order."""
        out: dict[str, list[dict[str, Any]]] = {n: [] for n in NODES}
        for _, _, ev in sorted(self.events, key=lambda e: (e[0], e[1])):
            out[ev["node"]].append(ev)
        return out

    def elect(self, t: int, group: str, voters: tuple[str, ...], leader: str, term: int) -> None:
        """`leader` wins `term`; the other voters follow it."""
        for node in voters:
            self.emit(t, node, "term", group, term=term)
        self.emit(t, leader, "role", group, role="leader", term=term)
        for node in voters:
            if node != leader:
                self.emit(t + 1, node, "vote-granted", group, candidate=leader, term=term)
                self.emit(t + 1, node, "role", group, role="follower", term=term)
            self.emit(t + 2, node, "leader", group, leader=leader, term=term)

    def config(self, t: int, kinds: tuple[str, ...], nodes: tuple[str, ...], **conf: Any) -> None:
        """One part-0 configuration entry's events on each node."""
        for node in nodes:
            for n, kind in enumerate(kinds):
                self.emit(t + n, node, kind, "part-0", **conf)

    def build(self, *, faults: bool, changes: bool, rebalance: bool) -> None:
        """Emits the whole story (see the module doc)."""
        for node in NODES:
            self.emit(0, node, "started")
        for group, voters in (("part-0", OLD_PART0), ("part-1", PART1)):
            boot = {"index": 1, "stage": "stable", "peers": list(voters), "old_peers": None,
                    "learners": [], "token": None, "term": 1}  # fmt: skip
            for node in voters:
                self.emit(1, node, "config-applied", group, **boot)
                self.emit(2, node, "config-committed", group, **boot)
            self.elect(10, group, voters, voters[0] if group == "part-0" else "n4", 1)
        revision = self._initial_assignments() if rebalance else 0
        if faults:
            self._partition()
            self._kill()
        if changes:
            self._change_peers(revision if rebalance else None)
        self._final_digests(changes)

    def _initial_assignments(self) -> int:
        for rev, (part, peers) in enumerate(((0, OLD_PART0), (1, PART1)), start=1):
            self.emit(100, "n1", "assignments-written", zone=ZONE, partition=part, revision=rev,
                      keys={f"zone.{ZONE}.assignments.stable": {"old": None,
                                                               "new": list(peers)}})  # fmt: skip
        return 2

    def _partition(self) -> None:
        p0, p1 = _window(self.end, PARTITION)
        self.emit(p0 + 5 * NS_PER_MS, "n5", "role", "part-1", role="candidate", term=2)
        self.elect(p0 + 6 * NS_PER_MS, "part-1", ("n3", "n5"), "n5", 2)
        self.emit(p1 + NS_PER_MS, "n4", "term", "part-1", term=2)
        self.emit(p1 + NS_PER_MS, "n4", "step-down", "part-1", reason="higher-term", term=2)
        self.emit(p1 + NS_PER_MS, "n4", "role", "part-1", role="follower", term=2)
        self.emit(p1 + 2 * NS_PER_MS, "n4", "leader", "part-1", leader="n5", term=2)

    def _kill(self) -> None:
        _, k1 = _window(self.end, KILL)
        self.emit(k1 + NS_PER_MS, "n2", "started")
        self.emit(k1 + 2 * NS_PER_MS, "n2", "role", "part-0", role="follower", term=1)
        self.emit(k1 + 3 * NS_PER_MS, "n2", "leader", "part-0", leader="n1", term=1)

    def _change_peers(self, revision: int | None) -> None:
        """part-0: n1,n2,n3 -> n1,n3,n4 through catching-up, joint and stable."""
        c0, c1 = _window(self.end, CHANGE)
        step = (c1 - c0) // 8
        old, new, token = list(OLD_PART0), list(NEW_PART0), f"chg-{self.seed}"
        if revision is not None:
            revision = self._rebalance_start(c0, revision)
        stage = {"peers": new, "old_peers": old, "learners": [], "token": token, "term": 1}
        self.emit(c0 + step, "n1", "change-stage", "part-0", stage="catching-up", **stage)
        self.emit(c0 + step, "n1", "catchup-start", "part-0", peer="n4", margin=1000,
                  leader_last=40, match=0, term=1)  # fmt: skip
        self.emit(c0 + step, "n4", "leader", "part-0", leader="n1", term=1)
        self.emit(c0 + 2 * step, "n1", "catchup-done", "part-0", peer="n4", leader_last=60,
                  match=58, term=1)  # fmt: skip
        joint = {"index": 61, "stage": "joint", **stage}
        self.config(c0 + 3 * step, ("config-appended", "config-applied"), ("n1", "n3", "n4"),
                    **joint)  # fmt: skip
        self.emit(c0 + 3 * step + 5, "n1", "change-stage", "part-0", stage="joint", **stage)
        self.config(c0 + 4 * step, ("config-committed",), ("n1", "n3", "n4"), **joint)
        final = {**joint, "index": 62, "stage": "stable", "old_peers": None}
        self.config(c0 + 5 * step, ("config-appended", "config-applied"), ("n1", "n3", "n4"),
                    **final)  # fmt: skip
        self.emit(c0 + 5 * step + 5, "n1", "change-stage", "part-0", stage="stable", **stage)
        self.config(c0 + 6 * step, ("config-committed",), ("n1", "n3", "n4"), **final)
        self.emit(c0 + 6 * step + 5, "n1", "change-done", "part-0", peers=new, learners=[],
                  token=token, term=1)  # fmt: skip
        self.emit(c0 + 6 * step + 6, "n1", "change-stage", "part-0", stage="none", **stage)
        self.emit(c0 + 6 * step + 7, "n4", "role", "part-0", role="follower", term=1)
        if revision is not None:
            keys = {"stable": {"old": old, "new": new}, "pending": {"old": new, "new": None}}
            self._assignments(c0 + 7 * step, revision + 1, keys)

    def _assignments(self, t: int, revision: int, keys: dict[str, Any]) -> None:
        full = {f"zone.{ZONE}.assignments.{k}": v for k, v in keys.items()}
        self.emit(t, "n1", "assignments-written", zone=ZONE, partition=0, revision=revision,
                  group="part-0", keys=full)  # fmt: skip

    def _rebalance_start(self, t: int, revision: int) -> int:
        """Writes pending (and the change trigger) and delivers the request."""
        rev = revision + 1
        pending = {"old": None, "new": list(NEW_PART0)}
        self._assignments(t, rev, {"pending": pending, "change": {"old": None, "new": rev}})
        for direction in ("received", "applied"):
            self.emit(t + 1, "n1", "rebalance-request", "part-0", direction=direction,
                      request_revision=rev, last_seen_revision=rev if direction == "applied"
                      else revision, partition=0, peers=list(NEW_PART0))  # fmt: skip
        return rev

    def _final_digests(self, changes: bool) -> None:
        """Every voter reports the same applied state at the end."""
        t = self.end - NS_PER_MS
        for group, voters in (("part-0", NEW_PART0 if changes else OLD_PART0), ("part-1", PART1)):
            index = 500
            digest = hashlib.sha256(f"{self.seed}/{group}/{index}".encode()).hexdigest()[:16]
            for node in voters:
                self.emit(t, node, "applied", group, index=index, digest=digest)
        for t_end, node in ((self.end, n) for n in NODES):
            self.emit(t_end, node, "stopping")
