"""Builds a seeded cluster, plays the workload and nemesis, returns a verdict.

See runner.py for the phases and SimConfig; this module wires the parts:
seeds -> clock, network, cluster, invariants, workload, nemesis, and runs the
event loop, stopping at the first violation.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from ember.raft import RaftConfig
from ember.sim.clock import NS_PER_MS, NS_PER_S, VirtualClock
from ember.sim.cluster import Cluster
from ember.sim.faults import Fault, Nemesis, generate_schedule
from ember.sim.invariants import Invariants, Violation
from ember.sim.network import Network, NetworkConfig
from ember.sim.runner import LIVENESS, SimConfig, SimResult, _Fanout
from ember.sim.seeds import Seeds
from ember.sim.trace import Trace
from ember.sim.workload import Workload

CONVERGE_CHECK_NS = 50 * NS_PER_MS


class Simulation:
    """One run of one SimConfig; `run()` once."""

    def __init__(
        self,
        config: SimConfig,
        progress: Callable[[Simulation], None] | None = None,
        *,
        stop_at_violation: bool = True,
    ) -> None:
        self.config = config
        # The benchmark runs to the end even past a violation; checks never do.
        self.stop_at_violation = stop_at_violation
        self.progress = progress
        ids = config.node_ids
        self.seeds = Seeds(config.seed, ids)
        self.clock = VirtualClock()
        self.trace = Trace()
        self.base_network = NetworkConfig()
        self.network = Network(self.seeds.rng("network"), self.base_network)
        bugs = frozenset({config.bug}) if config.bug else frozenset()
        raft = RaftConfig(
            catchup_margin=config.catchup_margin,
            max_entries_per_append=config.max_append,
            planted_bugs=bugs,
        )
        ref: list[Cluster] = []
        self.invariants = Invariants(ref, config.catchup_margin)
        self.workload = Workload(
            ref, self.seeds.rng("workload"), ids, min(3, config.nodes),
            reads=config.reads, read_rng=self.seeds.rng("reads"), local_reads=config.local_reads,
        )  # fmt: skip
        self.cluster = Cluster(
            voters=ids[: config.nodes],
            spares=ids[config.nodes :],
            config=raft,
            clock=self.clock,
            network=self.network,
            clock_rng=self.seeds.rng("clock"),
            node_rngs={n: self.seeds.rng(f"node-{n}") for n in ids},
            trace=self.trace,
            observer=_Fanout(self.invariants, self.workload),
            compact_every=config.compact_every,
        )
        ref.append(self.cluster)
        nemesis_rng = self.seeds.rng("nemesis")
        self.fault_end_ns = int(config.sim_seconds * NS_PER_S)
        if config.schedule is not None:
            self.schedule = list(config.schedule)
        else:
            self.schedule = generate_schedule(
                nemesis_rng,
                fault_ns=self.fault_end_ns,
                kinds=config.faults,
                mean_gap_ms=config.fault_gap_ms,
            )
        self.nemesis = Nemesis(self.cluster, nemesis_rng, self.base_network)
        self.healed = False
        self.converged_ns: int | None = None
        self.wall_s = 0.0

    # -- the event loop ------------------------------------------------------

    def run(self) -> SimResult:
        """Play both phases; stop at the first violation."""
        started = time.perf_counter()
        try:
            for node_id in self.cluster.nodes:
                self.cluster.start(node_id)
            for fault in self.schedule:
                self.clock.schedule(fault.at_ns, "fault", fault)
            self.clock.after(0, "propose")
            self.clock.after(0, "change")
            if self._loop(self.fault_end_ns):
                self._heal()
                deadline = self.fault_end_ns + int(self.config.heal_seconds * NS_PER_S)
                self.clock.after(CONVERGE_CHECK_NS, "converged?")
                if self._loop(deadline) and self.converged_ns is None:
                    self._liveness_failure()
        finally:
            self.wall_s = time.perf_counter() - started
        return self._result()

    def _loop(self, until_ns: int) -> bool:
        """Handle events up to `until_ns`; False once a violation or convergence ends it."""
        count = 0
        while True:
            event = self.clock.pop(until_ns)
            if event is None:
                return True
            self._dispatch(event.kind, event.payload)
            if self.converged_ns is not None or (
                self.invariants.violations and self.stop_at_violation
            ):
                return False
            count += 1
            if self.progress is not None and count % 2000 == 0:
                self.progress(self)

    def _dispatch(self, kind: str, payload: object) -> None:
        if self.cluster.handle(kind, payload):
            return
        wl, rng = self.workload, self.workload.rng
        if kind == "propose" and not self.healed:
            wl.propose()
            self.clock.after(int(rng.expovariate(1 / self.config.propose_ms) * NS_PER_MS) + 1, kind)
        elif kind == "change" and not self.healed:
            wl.change()
            self.nemesis.joining = wl.joining()
            self.clock.after(int(rng.expovariate(1 / self.config.change_ms) * NS_PER_MS) + 1, kind)
        elif kind == "fault" and not self.healed:
            assert isinstance(payload, Fault)
            self.nemesis.joining = wl.joining()
            undo = self.nemesis.start(payload)
            self.trace.record(self.clock.now_ns, "fault", payload.target, payload.kind)
            if undo is not None:
                self.clock.after(payload.duration_ns, "unfault", undo)
        elif kind == "unfault" and not self.healed:
            self.nemesis.stop(payload)  # type: ignore[arg-type]
        elif kind == "converged?":
            if self._why_not_converged() is None:
                self.converged_ns = self.clock.now_ns
            else:
                self.clock.after(CONVERGE_CHECK_NS, kind)

    def _heal(self) -> None:
        self.healed = True
        self.trace.record(self.clock.now_ns, "heal", "-")
        self.nemesis.heal_all()

    # -- convergence ---------------------------------------------------------

    def _why_not_converged(self) -> str | None:
        """None once the healed cluster has converged, else what is missing."""
        cur = self.workload.current
        if cur is not None:
            return f"change token {cur.token} ({cur.kind}) submitted to {cur.node} never ended"
        leaders = self.cluster.leaders()
        if not leaders or leaders[0].status is None:
            return "no leader"
        leader = leaders[0]
        st = leaders[0].status
        if st.conf.is_joint or st.stage != "none":
            return f"leader {leader.id} is in stage {st.stage}, joint={st.conf.is_joint}"
        if st.commit < st.last_index:
            return f"leader {leader.id} commit {st.commit} < last index {st.last_index}"
        for member in sorted(set(st.conf.peers) | set(st.conf.learners)):
            node = self.cluster.nodes[member]
            ms = node.status
            if ms is None:
                return f"{member} is down"
            if ms.leader != leader.id or ms.term != st.term:
                return f"{member} follows {ms.leader} in term {ms.term}, not {leader.id}/{st.term}"
            if node.sm.applied != leader.sm.applied or node.sm.digest != leader.sm.digest:
                return (
                    f"{member} applied {node.sm.applied} ({node.sm.digest[:8]}), leader "
                    f"{leader.sm.applied} ({leader.sm.digest[:8]})"
                )
        if leader.sm.applied != st.commit:
            return f"leader applied {leader.sm.applied} of commit {st.commit}"
        return None

    def _liveness_failure(self) -> None:
        reason = self._why_not_converged() or "did not converge"
        detail = f"not converged {self.config.heal_seconds}s after heal: {reason}"
        self.invariants.violations.append(Violation(LIVENESS, "-", self.clock.now_ns, detail))

    def _check_acked(self) -> None:
        """Every acknowledged write is in the converged leader's state."""
        leaders = self.cluster.leaders()
        if not leaders:
            return
        sm = leaders[0].sm
        for index, data in self.workload.acked:
            key, _, value = data.decode().partition("=")
            if value not in sm.values(key):
                self.invariants.violations.append(
                    Violation(
                        "state-machine-safety",
                        leaders[0].id,
                        self.clock.now_ns,
                        f"acknowledged write {data!r} at {index} lost after convergence",
                    )
                )
                return

    # -- results ---------------------------------------------------------------

    def _result(self) -> SimResult:
        if self.converged_ns is not None:
            self._check_acked()
        for node in self.cluster.up_nodes():
            self.cluster.emit_applied(node)  # the shutdown digest (docs/events.md)
        wl = self.workload.stats
        net = self.network.stats
        stats = {
            "wall_seconds": round(self.wall_s, 3),
            "converged_after_heal_s": (
                None
                if self.converged_ns is None
                else round((self.converged_ns - self.fault_end_ns) / NS_PER_S, 3)
            ),
            "proposed": wl.proposed,
            "acked": wl.acked,
            "failed": wl.failed,
            "unknown": wl.unknown,
            "rejected": wl.rejected,
            "changes": dict(sorted(wl.changes.items())),
            "changes_submitted": len(self.workload.changes),
            "faults": dict(sorted(self.nemesis.counts.items())),
            "crashes": sum(n.crashes for n in self.cluster.nodes.values()),
            "network": dataclasses.asdict(net),
            "max_term": max(self.invariants.leaders, default=0),
        }
        return SimResult(
            config=self.config,
            violations=list(self.invariants.violations),
            trace_hash=self.trace.hexdigest(),
            sim_ns=self.clock.now_ns,
            events=self.trace.count,
            checks=dict(self.invariants.checks),
            stats=stats,
            trace_tail=self.trace.format_tail() if self.invariants.violations else [],
        )

    def write_events(self, directory: Path) -> list[Path]:
        """Each node's audit events as <dir>/<node>/events.jsonl."""
        written = []
        enc = msgspec.json.Encoder()
        for node in self.cluster.nodes.values():
            path = directory / node.id / "events.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("wb") as out:
                for event in node.events:
                    out.write(enc.encode(event) + b"\n")
            written.append(path)
        return written
