"""The nemesis schedule: a pure, seeded generator of fault and heal ops.

Theory of operation. One fault is active at a time. The schedule alternates
quiet gaps and faults; each fault is healed after its drawn duration (the
heal op is the fault's healer in `checkers.stats`: `heal-partition`,
`start` after `kill`, `resume` after `pause`, `heal-slow`). What starts a
fault depends on the mode:

- `periodic`: after a random gap (mean `gap_s`);
- `phase`: the moment an observation says a group entered the phase the
  schedule is waiting for (CATCHING_UP, JOINT, STABLE, or a rebalance
  writing pending): phases are drawn in turn from the seeded generator, so
  faults land inside the windows the run is about;
- `both` (default): phase-triggered, with a periodic fault when no wanted
  phase showed up within the gap, so a run without changes still has faults.

Each fault op's value is abstract and fixed by the seed: `kind`, the
partition `grouping` or process `target` (leader / random / joining), a
`seed` for the worker's own random choices, its `duration_s`, and the
`trigger` (group, stage, joining peers) when a phase fired it. The worker
(`nemesis.schedule`) resolves it against the live cluster and completes
the op with the concrete targets and the exact commands. After `end_s`, no
new fault starts and an active one is healed at once, then the schedule is
exhausted. Observations older than `STALE_NS` are ignored: a fault must
land inside the window, not after it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from workloads.generator import (
    NS_PER_S,
    PENDING,
    Completion,
    Context,
    Event,
    Generator,
    Observation,
    Op,
    Result,
)

FAULT_KINDS = ("partition", "kill", "pause", "slow")
GROUPINGS = ("halves", "isolate-leader", "isolate-joining", "ring", "bridge", "one-way")
TARGETS = ("leader", "random", "joining")
PHASES = ("catching-up", "joint", "stable", "pending")
# ember has no rebalance yet: schedules wait for the change-peers phases by default.
DEFAULT_PHASES = ("catching-up", "joint", "stable")
HEAL_OF = {"partition": "heal-partition", "kill": "start", "pause": "resume", "slow": "heal-slow"}
MODES = ("periodic", "phase", "both")
STALE_NS = NS_PER_S // 2


class NemesisSchedule(Generator):
    """Fault / heal ops for the single nemesis thread (see the module doc)."""

    def __init__(
        self,
        rng: random.Random,
        kinds: Sequence[str],
        *,
        mode: str = "both",
        gap_s: float = 6.0,
        duration_s: tuple[float, float] = (2.0, 6.0),
        end_s: float = 60.0,
        phases: Sequence[str] = DEFAULT_PHASES,
    ) -> None:
        bad = sorted(set(kinds) - set(FAULT_KINDS))
        if bad:
            raise ValueError(f"unknown nemesis {bad[0]!r}; known: {', '.join(FAULT_KINDS)}")
        if mode not in MODES:
            raise ValueError(f"nemesis mode {mode!r} is not one of {', '.join(MODES)}")
        # Three streams, so that what each fault is (kind, grouping, target,
        # seed, duration) is the same sequence in a replay even when timing
        # decides whether a phase or the timer started it.
        self.rng = random.Random(rng.getrandbits(64))
        self.timing = random.Random(rng.getrandbits(64))
        self.phase_rng = random.Random(rng.getrandbits(64))
        self.kinds, self.mode = list(kinds), mode
        self.gap_ns, self.duration_s = int(gap_s * NS_PER_S), duration_s
        self.end_ns = int(end_s * NS_PER_S)
        self.phases = list(phases)
        self.active: Op | None = None  # the fault waiting for its heal
        self.heal_at_ns = 0
        self.in_flight = False
        self.next_ns: int | None = None  # when the next periodic fault is due
        self.wanted = self.phase_rng.choice(self.phases) if self.phases else None
        self.trigger: Observation | None = None

    def _gap(self) -> int:
        return int(self.timing.random() * 2 * self.gap_ns)

    def op(self, ctx: Context) -> Result:
        now = ctx.time_ns
        if self.in_flight or not self.kinds:
            return PENDING if self.in_flight else None
        if self.active is not None:
            if now < self.heal_at_ns and now < self.end_ns:
                return PENDING
            return self._emit(self._heal(self.active), now)
        if now >= self.end_ns:
            return None
        if self.next_ns is None:
            self.next_ns = now + self._gap()
        trigger = self.trigger
        if trigger is not None and now - trigger.time_ns > STALE_NS:
            trigger = self.trigger = None
        if trigger is not None and self.mode != "periodic":
            self.trigger = None
            return self._emit(self._fault(trigger.data), now)
        if self.mode != "phase" and now >= self.next_ns:
            return self._emit(self._fault(None), now)
        return PENDING

    def _emit(self, op: Op, now: int) -> Op:
        self.in_flight = True
        return Op(f=op.f, value=op.value, time_ns=now)

    def _fault(self, trigger: dict[str, Any] | None) -> Op:
        kind = self.rng.choice(self.kinds)
        value: dict[str, Any] = {"kind": kind, "seed": self.rng.getrandbits(32)}
        if kind == "partition":
            value["grouping"] = self.rng.choice(GROUPINGS)
        elif kind == "slow":
            value["target"] = "joining"
        else:
            value["target"] = self.rng.choice(TARGETS)
        low, high = self.duration_s
        value["duration_s"] = round(low + self.rng.random() * (high - low), 3)
        if trigger is not None:
            value["trigger"] = {k: trigger.get(k) for k in
                                ("group", "stage", "node", "joining", "peers")}  # fmt: skip
            value["group"] = trigger.get("group")
        return Op(f=kind, value=value)

    @staticmethod
    def _heal(fault: Op) -> Op:
        return Op(f=HEAL_OF[fault.f], value={"kind": fault.f})

    def update(self, ctx: Context, event: Event) -> None:
        if isinstance(event, Observation):
            stage = event.data.get("stage")
            if event.kind == "phase" and stage == self.wanted and self.active is None:
                self.trigger = event
            return
        if not isinstance(event, Completion):
            return
        self.in_flight = False
        if event.op.f in HEAL_OF:
            # Heal whatever happened: a fault that failed half-way is undone too.
            self.active = event.op
            self.heal_at_ns = event.time_ns + int(event.op.value["duration_s"] * NS_PER_S)
            if "trigger" in event.op.value and self.phases:
                self.wanted = self.phase_rng.choice(self.phases)
        else:
            self.active = None
            self.next_ns = event.time_ns + self._gap()
