"""The nemesis: a seeded fault schedule and the code that applies it.

Theory of operation: `generate_schedule` draws, from the nemesis sub-seed
alone, a list of faults over the fault phase: when each starts, its kind,
how long it lasts, and a symbolic target ("leader", "member", "joining",
"any"). Symbolic targets are resolved when the fault fires, against the
cluster as it is then (the node leading now, a voter of the configuration in
force, a peer the current change is adding), with the same nemesis
generator, so the run stays a function of the seed while faults still land
where they hurt. Each fault undoes itself after its duration; `heal_all`
ends every fault at once when the fault phase is over.

Kinds: `partition` (random split into two sides), `isolate` (one node alone),
`one-way` (a set of directed links cut, the other direction still up),
`crash` (kill, restart after the duration), `pause` (SIGSTOP/SIGCONT),
`lossy` (message loss), `dup` (duplication), `reorder`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ember.sim.clock import NS_PER_MS
from ember.sim.cluster import Cluster
from ember.sim.network import NetworkConfig

FAULT_KINDS: tuple[str, ...] = (
    "partition",
    "isolate",
    "one-way",
    "crash",
    "pause",
    "lossy",
    "dup",
    "reorder",
)
TARGETS: tuple[str, ...] = ("leader", "member", "joining", "any")


@dataclass(frozen=True, slots=True)
class Fault:
    """One scheduled fault."""

    at_ns: int
    kind: str
    duration_ns: int
    target: str

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; known: {', '.join(FAULT_KINDS)}")
        if self.target not in TARGETS:
            raise ValueError(f"unknown fault target {self.target!r}; known: {', '.join(TARGETS)}")
        if self.at_ns < 0 or self.duration_ns <= 0:
            raise ValueError(f"fault {self.kind} needs at >= 0 and a positive duration")

    def encode(self) -> str:
        """`at_ns:kind:duration_ns:target`, the --schedule syntax."""
        return f"{self.at_ns}:{self.kind}:{self.duration_ns}:{self.target}"


def encode_schedule(schedule: Sequence[Fault]) -> str:
    """A schedule as one --schedule argument ("none" when empty)."""
    return ",".join(f.encode() for f in schedule) or "none"


def parse_schedule(text: str) -> tuple[Fault, ...]:
    """The inverse of encode_schedule; ValueError names the bad item."""
    if text == "none":
        return ()
    faults = []
    for item in text.split(","):
        parts = item.split(":")
        if len(parts) != 4 or not parts[0].isdigit() or not parts[2].isdigit():
            raise ValueError(f"bad fault {item!r}: expected at_ns:kind:duration_ns:target")
        faults.append(Fault(int(parts[0]), parts[1], int(parts[2]), parts[3]))
    return tuple(sorted(faults, key=lambda f: f.at_ns))


def generate_schedule(
    rng: random.Random,
    *,
    fault_ns: int,
    kinds: Sequence[str] = FAULT_KINDS,
    mean_gap_ms: float = 300.0,
    max_duration_ms: float = 1500.0,
) -> list[Fault]:
    """Faults over [0, fault_ns), drawn from `rng` only."""
    unknown = sorted(set(kinds) - set(FAULT_KINDS))
    if unknown:
        raise ValueError(f"unknown fault kind(s) {unknown}; known: {list(FAULT_KINDS)}")
    schedule: list[Fault] = []
    # Canonical order, so "--faults a,b" and "--faults b,a" replay alike.
    kinds = [k for k in FAULT_KINDS if k in kinds]
    if not kinds:
        return schedule
    at = int(rng.expovariate(1.0 / mean_gap_ms) * NS_PER_MS)
    while at < fault_ns:
        kind = rng.choice(kinds)
        duration = int(rng.uniform(50.0, max_duration_ms) * NS_PER_MS)
        schedule.append(Fault(at, kind, duration, rng.choice(TARGETS)))
        at += int(rng.expovariate(1.0 / mean_gap_ms) * NS_PER_MS) + 1
    return schedule


@dataclass(slots=True)
class Nemesis:
    """Applies faults to the cluster and remembers how to undo them."""

    cluster: Cluster
    rng: random.Random
    base_network: NetworkConfig
    joining: list[str] = field(default_factory=list)  # kept current by the workload
    counts: dict[str, int] = field(default_factory=dict)
    _partition_epoch: int = 0

    def members(self) -> list[str]:
        """Voters and learners of the configuration the latest leader knows."""
        leaders = self.cluster.leaders()
        status = leaders[0].status if leaders else None
        if status is None:
            return sorted(self.cluster.nodes)
        conf = status.conf
        return sorted(set(conf.peers) | set(conf.old_peers or ()) | set(conf.learners))

    def resolve(self, target: str) -> str:
        """A concrete node for a symbolic target."""
        if target == "leader":
            leaders = self.cluster.leaders()
            if leaders:
                return leaders[0].id
        if target == "joining" and self.joining:
            return self.rng.choice(sorted(self.joining))
        pool = sorted(self.cluster.nodes) if target == "any" else self.members()
        return self.rng.choice(pool)

    def start(self, fault: Fault) -> tuple[str, object] | None:
        """Begin `fault`; returns what `stop` needs to undo it (or None)."""
        node = self.resolve(fault.target)
        self.counts[fault.kind] = self.counts.get(fault.kind, 0) + 1
        cluster, net = self.cluster, self.cluster.network
        if fault.kind in ("partition", "isolate", "one-way"):
            net.heal()  # one partition at a time: the newest replaces the last
            self._partition_epoch += 1
            self._cut(fault.kind, node)
            return ("partition", self._partition_epoch)
        if fault.kind == "crash":
            cluster.crash(node)
            return ("crash", node)
        if fault.kind == "pause":
            cluster.pause(node)
            return ("pause", node)
        knob = {"lossy": "loss", "dup": "dup", "reorder": "reorder"}[fault.kind]
        net.config = replace(net.config, **{knob: round(self.rng.uniform(0.05, 0.4), 3)})
        return ("knob", knob)

    def _cut(self, kind: str, node: str) -> None:
        net, everyone = self.cluster.network, sorted(self.cluster.nodes)
        if kind == "isolate":
            net.partition([[node], [n for n in everyone if n != node]])
        elif kind == "partition":
            shuffled = list(everyone)
            self.rng.shuffle(shuffled)
            cut = self.rng.randint(1, len(shuffled) - 1)
            net.partition([shuffled[:cut], shuffled[cut:]])
        else:
            # One-way: `node` can no longer hear from a random half of the
            # others (or they from it); the reverse direction stays up.
            others = [n for n in everyone if n != node]
            deaf = self.rng.random() < 0.5
            for other in self.rng.sample(others, max(1, len(others) // 2)):
                if deaf:
                    net.block(other, node)
                else:
                    net.block(node, other)

    def stop(self, undo: tuple[str, object]) -> None:
        """Undo one fault (a newer partition makes an older one's undo moot)."""
        what, arg = undo
        if what == "partition":
            if arg == self._partition_epoch:
                self.cluster.network.heal()
        elif what == "crash":
            self.cluster.start(str(arg))
        elif what == "pause":
            self.cluster.resume(str(arg))
        else:
            net = self.cluster.network
            net.config = replace(net.config, **{str(arg): getattr(self.base_network, str(arg))})

    def heal_all(self) -> None:
        """End every fault: links up, knobs reset, every node running."""
        net = self.cluster.network
        net.heal()
        self._partition_epoch += 1
        net.config = self.base_network
        for node in self.cluster.nodes.values():
            if not node.up:
                self.cluster.start(node.id)
            elif node.paused:
                self.cluster.resume(node.id)
