"""`faultline run --backend sim`: the plan played in ember's deterministic simulator.

The simulator (`ember.sim`, through its public `Simulation` API) runs the
same Raft core on a virtual network and clock, with its own seeded
workload and nemesis. What it produces, and what this writes into the
store, is

- nodes/<n>/events.jsonl: every node's audit events (the same format as
  the daemon's), which the raft checker judges;
- history.jsonl, on the virtual clock: the simulated clients' puts and
  reads through the log when the plan's workloads include `register`
  (ember.sim.clients: the `kv` model, one key of eight per op; the read
  fraction is the plan option `sim_reads`, default 0.3; `sim_local_reads`
  plants stale reads off a believed leader's state), the membership
  changes it requested (f change-peers, from submission to outcome) and the
  faults it played (invoke at the fault's start, its heal at the end of its
  duration);
- results.json: the raft and linearizability checkers plus `sim`, the
  simulator's own invariant and liveness verdict (convergence after the
  heal, with its replay command).

The stats checker's traffic guards are not run: the simulated clients are
not the harness's workers (no rate or concurrency to judge them by).
"""

from __future__ import annotations

import msgspec

from checkers.api import Anomaly, CheckerResult, merge_validity
from checkers.compose import Result, check, load_run, write_results
from ember.sim.clients import history_rows
from ember.sim.runner import SimConfig
from ember.sim.simulation import Simulation
from harness.history_writer import HistoryWriter
from harness.plan import Plan
from harness.progress import RunStatus
from harness.store import RunDir

# faultline nemesis kinds -> the simulator's fault kinds
SIM_FAULTS = {
    "partition": ("partition", "isolate", "one-way"),
    "kill": ("crash",),
    "pause": ("pause",),
    "slow": ("lossy", "reorder"),
    "mix": ("partition", "isolate", "one-way", "crash", "pause", "lossy", "reorder"),
}
# Convergence after the heal is the simulator's own liveness check (`sim`).
SIM_CHECKERS = ("raft", "linearizable")
DEFAULT_READS = 0.3
CLIENT_PROCESS_BASE = 1_000_000  # client processes after the changes' (one per change)


def sim_config(plan: Plan) -> SimConfig:
    """The simulator configuration for `plan` (ValueError naming a bad field)."""
    faults = tuple(dict.fromkeys(k for n in plan.nemesis for k in SIM_FAULTS.get(n, (n,))))
    return SimConfig(
        seed=plan.seed,
        nodes=len(plan.nodes),
        sim_seconds=plan.time_limit_s,
        heal_seconds=max(plan.quiet_s, 20.0),
        faults=faults,
        change_ms=float(plan.options.get("change_interval_s", 0.3)) * 1000,
        reads=float(plan.options.get("sim_reads", DEFAULT_READS)) if _clients(plan) else 0.0,
        local_reads=bool(plan.options.get("sim_local_reads", False)),
    )


def _clients(plan: Plan) -> bool:
    return "register" in plan.workload


def _history(sim: Simulation, run: RunDir, clients: bool) -> None:
    rows: list[tuple[int, int, dict[str, object]]] = []
    end = sim.clock.now_ns
    for seq, ch in enumerate(sim.workload.changes):
        value = {"group": "sim", "peers": list(ch.peers), "learners": list(ch.learners),
                 "token": ch.token, "move": ch.kind}  # fmt: skip
        # One process per change: an unknown outcome must not be followed by
        # another invoke of the same process.
        base = {"process": seq, "f": "change-peers", "value": value, "group": "sim"}
        rows.append((ch.submitted_ns, 2 * seq, {**base, "type": "invoke"}))
        if ch.ended_ns is not None:
            kind = "ok" if ch.outcome == "ok" else "info"
            error = None if kind == "ok" else ch.outcome
            rows.append((ch.ended_ns, 2 * seq + 1, {**base, "type": kind, "error": error}))
    offset = 2 * len(sim.workload.changes)
    for seq, fault in enumerate(f for f in sim.schedule if f.at_ns <= end):
        value = {"kind": fault.kind, "target": fault.target}
        for i, (at, f) in enumerate(
            ((fault.at_ns, fault.kind), (fault.at_ns + fault.duration_ns, f"heal-{fault.kind}"))
        ):
            if at > end:
                continue
            for j, type_ in enumerate(("invoke", "ok")):
                event: dict[str, object] = {"process": "nemesis", "f": f, "type": type_}
                event["value"] = value
                rows.append((at, offset + 4 * seq + 2 * i + j, event))
    offset = 1 + max((r[1] for r in rows), default=0)
    if clients:
        ops = history_rows(sim.workload.ops, CLIENT_PROCESS_BASE)
        rows += [(at, offset + i, fields) for i, (at, fields) in enumerate(ops)]
    # Changes by one process never overlap in the sim (one in flight at a time).
    rows.sort(key=lambda r: (r[0], r[1]))
    with HistoryWriter(run.history) as writer:
        for at, _seq, fields in rows:
            writer.write(time=at, **fields)


def run_sim(plan: Plan, run: RunDir, status: RunStatus) -> Result:
    """Play `plan` in the simulator and store what it produced (see module doc)."""
    status.stage = "simulating"
    sim = Simulation(sim_config(plan))
    outcome = sim.run()
    sim.write_events(run.nodes)
    _history(sim, run, _clients(plan))
    status.stage = "checking"
    plan_doc, history, audit, _ = load_run(run.path)
    result = check(plan_doc, history, {"checkers": list(SIM_CHECKERS)}, audit=audit)
    violations = [
        Anomaly(kind=v.prop, message=str(v), events=[msgspec.to_builtins(v)])
        for v in outcome.violations[:20]
    ]
    result.checkers["sim"] = CheckerResult(
        name="sim",
        valid=outcome.valid,
        anomalies=violations,
        figures={
            "kind": outcome.kind,
            "replay": outcome.config.replay_command(),
            "trace_hash": outcome.trace_hash,
            **outcome.stats,
        },
    )
    result.valid = merge_validity(r.valid for r in result.checkers.values())
    if not _clients(plan):
        result.reasons.append("sim: no register workload, so no client history to check")
    write_results(result, run.path)
    return result
