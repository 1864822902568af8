"""One simulated run: configuration, phases, verdict.

Theory of operation: a run has two phases on the virtual clock. In the
fault phase (`sim_seconds`) the workload proposes and changes peers while
the nemesis plays its seeded schedule; the invariant checker runs after
every event and the run stops at the first safety violation. Then
everything is healed and the workload stops, and the cluster must converge
within `heal_seconds`: every change request ended (ok or a reported error),
one leader that every member follows, a non-joint configuration with no
change in flight, and every member applied the leader's commit with the
same digest, holding every acknowledged write. Missing that bound is a
liveness failure, reported apart from safety (as in TigerBeetle's VOPR).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field, fields
from typing import Any

from ember.sim.cluster import Observer, SimNode
from ember.sim.faults import FAULT_KINDS, Fault, encode_schedule
from ember.sim.invariants import Violation

LIVENESS = "liveness-after-heal"


@dataclass(frozen=True, slots=True, kw_only=True)
class SimConfig:
    """Everything a run depends on; `replay_command` rebuilds it from flags."""

    seed: int
    nodes: int = 5
    spares: int | None = None  # nodes outside the first configuration; default = nodes
    sim_seconds: float = 10.0
    heal_seconds: float = 20.0
    bug: str | None = None
    catchup_margin: int = 20
    compact_every: int = 40
    max_append: int = 64  # RaftConfig.max_entries_per_append
    faults: tuple[str, ...] = FAULT_KINDS
    # An explicit fault schedule (hypothesis builds these so it can shrink
    # them); None draws one from the nemesis sub-seed with `faults` kinds.
    schedule: tuple[Fault, ...] | None = None
    fault_gap_ms: float = 300.0
    propose_ms: float = 10.0
    change_ms: float = 300.0
    reads: float = 0.0  # fraction of client proposals that are reads through the log
    local_reads: bool = False  # planted client defect: reads off a leader's state, no log

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise ValueError(f"--nodes must be at least 1, got {self.nodes}")
        if self.max_append < 1:
            raise ValueError(f"--max-append must be at least 1, got {self.max_append}")
        if self.spares is not None and self.spares < 0:
            raise ValueError(f"--spares must be >= 0, got {self.spares}")
        if self.sim_seconds <= 0 or self.heal_seconds <= 0:
            raise ValueError("--sim-seconds and --heal-seconds must be positive")
        for name in ("fault_gap_ms", "propose_ms", "change_ms"):
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name.replace('_', '-')} must be positive")
        if not 0.0 <= self.reads <= 1.0:
            raise ValueError(f"--reads must be a fraction in 0..1, got {self.reads}")
        unknown = sorted(set(self.faults) - set(FAULT_KINDS))
        if unknown:
            raise ValueError(f"unknown fault kind(s) {unknown}; known: {list(FAULT_KINDS)}")

    @property
    def node_ids(self) -> list[str]:
        spares = self.nodes if self.spares is None else self.spares
        return [f"n{i}" for i in range(1, self.nodes + spares + 1)]

    def replay_command(self) -> str:
        """The command line that reruns exactly this configuration."""
        parts = ["python", "-m", "ember.sim"]
        defaults = SimConfig(seed=0)
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "seed" and value == getattr(defaults, f.name):
                continue
            flag = "--" + f.name.replace("_", "-")
            if f.name == "schedule":
                value = encode_schedule(value)
            elif isinstance(value, tuple):
                value = ",".join(value) if value else "none"
            parts += [flag, str(value)]
        return shlex.join(parts)


@dataclass(slots=True)
class SimResult:
    """What a run found."""

    config: SimConfig
    violations: list[Violation]
    trace_hash: str
    sim_ns: int
    events: int
    checks: dict[str, int]
    stats: dict[str, Any] = field(default_factory=dict)
    trace_tail: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.violations

    @property
    def kind(self) -> str:
        """ "valid", "safety" or "liveness"."""
        if not self.violations:
            return "valid"
        return "liveness" if self.violations[0].prop == LIVENESS else "safety"


class _Fanout(Observer):
    """Passes each hook to the checker first, then the workload."""

    def __init__(self, *observers: Observer) -> None:
        self._observers = observers

    def on_write(self, node: SimNode, rd: Any) -> None:
        for o in self._observers:
            o.on_write(node, rd)

    def on_durable(self, node: SimNode, rd: Any) -> None:
        for o in self._observers:
            o.on_durable(node, rd)

    def on_applied(self, node: SimNode, entry: Any) -> None:
        for o in self._observers:
            o.on_applied(node, entry)

    def on_status(self, node: SimNode, status: Any) -> None:
        for o in self._observers:
            o.on_status(node, status)

    def on_change_result(self, node: SimNode, result: Any) -> None:
        for o in self._observers:
            o.on_change_result(node, result)

    def on_crash(self, node: SimNode) -> None:
        for o in self._observers:
            o.on_crash(node)
