"""The nemesis schedule: a pure, seeded generator of fault and heal ops.

Theory of operation. One fault is active at a time. The schedule alternates
quiet gaps and faults; each fault is healed after its drawn duration (the
heal op is the fault's healer in `checkers.stats`: `heal-partition`,
`start` after `kill`, `resume` after `pause`, `heal-slow`). What starts a
fault depends on the mode:

- `periodic`: after a random gap (mean `gap_s`);
- `phase`: the moment an observation says a group entered the phase the
  schedule is waiting for; phases are drawn in turn from the seeded
  generator, so faults land inside the windows the run is about; one that
  has not opened when a periodic fault would have been due is given up for
  another draw (no fault is started then);
- `both` (default): phase-triggered, with a periodic fault when no wanted
  phase showed up within the gap, so a run without changes still has faults.

The phases (`nemesis.phase`): the change-peers stages `catching-up`,
`joint`, `stable`, `done` (the stable entry committed); a rebalance's
`pending` (its pending assignment written); and `pending-open`, the window
after pending is written but before stable switches: on a pending
observation the schedule arms a fault a seeded 10-90% of the median of the
last 16 such windows later (of 0.15 s, the measured median of both
backends, before it has seen one; never over 1 s), and fires it
then only if no `switched` observation (the done invoke) came for that
group meanwhile. Its trigger's `wall` is when the armed delay ran out (the
pending's wall plus `armed_s`), so `reaction_ms` is the lag after the
chosen moment, not the chosen delay.

Nemesis names (`--nemesis`): `partition`, `kill`, `pause`, `slow`, and
`mix`, the combined default for the full run. `mix` is every fault kind,
kills and pauses aimed at any role (`group-leader`, `meta-leader`,
`placement-driver`, `primary`: resolved by the worker when the fault fires,
see `nemesis.targets`) or a random or joining node, partitions that also
isolate one of those roles, and slow catch-up; with the runner's default
phases it waits for every phase above, rebalance windows included, with
timed faults in between (mode `both`). Its faults last 1-4 s, and there are
at most one per `MIN_CYCLE_S` of the run. Whatever the names, no fault
starts after `end_s` (the main phase's end) and an active one is healed at
once then, so every fault is healed before the runner's heal-all and quiet
period, and convergence can be judged.

`clock` moves one node's wall clock (the host's, so it survives a restart):
a `bump` jumps it by `delta_s` (forward or back, 1-4 placement-driver
lease lengths), a `strobe` flips it `delta_s` ahead and behind every
`period_s`, a `drift` runs it at `rate` (0.5x to 2x); aimed at a role like
a kill. `mix` draws it for one fault in ten (`CLOCK_SHARE_IN_MIX`) where
the cluster's clocks can be moved (`clocks=True`: ember in the simulator,
on Docker or on SSH hosts; the runner decides); `--nemesis mix,clock` or `clock` names
it outright and draws it as often as any other kind. The simulator moves
its host clock exactly (`harness.sim.nemesis`); on Docker and SSH hosts the fault
rewrites an offset file ember follows (`nemesis.clock`, `ember/clock.py`:
a drift there steps the offset every 10 ms).

`compact-kill` kills a node a seeded 0-20 ms after the harness sent a
compaction (at the store's revision, or up to 3 below it) or, where the
db has one, a defragmentation of that node (`nemesis.maintenance`): the
crash lands while the store rewrites its history, where etcd's robustness
tests have found lost and resurrected keys. It heals as a kill does. It is
drawn where the db can compact (`maintenance`: the actions it offers):
named (`--nemesis mix,compact-kill`), or mixed into `mix` for one fault in
seven where the db asks for that (`mix_maintenance`: etcd's default plan),
so a seed's ember schedule stays what it was.

`drop-replies` makes one node (aimed at a role like a kill) serve client
requests in full and lose a drawn share (`probability`, 0.1-0.8) of its
success answers: the connection closes where the answer would go
(ember's `http.drop-reply` failpoint, on every backend ember runs on). The
client learns nothing of a write that took effect, the window where a
write sent again applies twice unless the store has exactly-once
sessions, and where a checker must place an `info` op. Aimed at the
`meta-leader`, it loses the answers of the metastore's writes, the control
plane's own included. It heals by switching the failpoint off. Drawn only
when named (`--nemesis mix,drop-replies`), so no other seed's schedule
moves; a db without failpoints (etcd) refuses it up front. The share was
at most a half while the metastore's check ran on values alone: at
0.3-0.8 about 20 metastore writes a run lost their answer on every send,
and the search could not place them (4 of 8 valid runs unknown). With its
revisions ranked by the watch record (checkers/meta_ranks.py) those runs
are decided in a fifth of a second, so the share goes up to 0.8 again.

A plan narrows what is drawn with options: `nemesis_kinds` (which kinds),
`nemesis_targets` (what kills and pauses aim at) and `nemesis_groupings`
(which partition shapes: `halves`, `isolate-leader`, `isolate-joining`,
`ring`, `bridge`, `one-way`, and `isolate`, one role's holder alone), as
Jepsen's nemesis packages let a test pick its partitioners.

Each fault op's value is abstract and fixed by the seed: `kind`, the
partition `grouping` or process `target`, a `seed` for the worker's own
random choices, its `duration_s`, and the `trigger` (group, stage,
reporting node, joining peers, event wall time) when a phase fired it. The
worker (`nemesis.schedule`) resolves it against the live cluster and
completes the op with the concrete targets and the exact commands. A fault
that completes `info` with `unresolved` (a role nobody held) applied
nothing and is not healed. Observations older than `STALE_NS` are ignored:
a fault must land inside the window, not after it.
"""

from __future__ import annotations

import random
import statistics
from collections import deque
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from nemesis.targets import ROLE_TARGETS
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

PRIMITIVES = ("partition", "kill", "pause", "slow")
# Not primitives: `mix` draws clock and compact-kill where they apply, and
# drop-replies only when it is named.
EXTRA_KINDS = ("clock", "compact-kill", "drop-replies")
# A modest rate: a clock fault is rarely the cause, and other faults keep theirs.
CLOCK_SHARE_IN_MIX = 0.1
MAINTENANCE_SHARE_IN_MIX = 1 / 7  # compact-kill in a db's mix: one fault in seven
MIX = "mix"
FAULT_KINDS = (*PRIMITIVES, *EXTRA_KINDS, MIX)  # what --nemesis accepts
GROUPINGS = ("halves", "isolate-leader", "isolate-joining", "ring", "bridge", "one-way")
TARGETS = ("leader", "random", "joining")
MIX_GROUPINGS = (*GROUPINGS, "isolate")  # `isolate`: the fault's drawn role target alone
MIX_TARGETS = (*ROLE_TARGETS, "random", "joining")
PHASES = ("catching-up", "joint", "stable", "done", "pending", "pending-open")
# Plans that name no phases wait for the change-peers stages; `mix` for all.
DEFAULT_PHASES = ("catching-up", "joint", "stable")
HEAL_OF = {"partition": "heal-partition", "kill": "start", "pause": "resume", "slow": "heal-slow",
           "clock": "heal-clock", "compact-kill": "start",
           "drop-replies": "heal-drop-replies"}  # fmt: skip
MAINTENANCE_DELAY_MS = 20.0  # compact-kill: the kill lands 0 to this after the request
MAINTENANCE_BACK = 3  # compact-kill: compact at the store's revision minus 0 to this
CLOCK_MODES = ("bump", "strobe", "drift")
LEASE_S = 3.0  # the placement driver's lease (ember.placement.driver): what a bump is measured in
MODES = ("periodic", "phase", "both")
STALE_NS = NS_PER_S // 2
MIX_DURATION_S = (1.0, 4.0)
MIN_CYCLE_S = 2.0  # mix: at most one fault per this many seconds of the run
# pending-open arms this share of the recent windows' median after pending; before
# any window was seen, of this prior (pending to switch: a median 0.165 s on Docker,
# 0.06-0.17 s in the simulator), never later than the cap.
PENDING_OPEN_SHARE = (0.1, 0.9)
PENDING_OPEN_PRIOR_S = 0.15
PENDING_OPEN_MAX_S = 1.0
WINDOWS_KEPT = 16
DROP_PROBABILITY = (0.1, 0.8)  # drop-replies: the share of success answers lost


@dataclass(frozen=True)
class Aims:
    """What a schedule draws from once a plan's options and the db's defaults
    are filled in (`aims`): the one statement of it, which explore's `Space`
    and nightly's reachable cells read too, so they cannot drift from it."""

    kinds: tuple[str, ...]  # drawn evenly
    clock_share: float  # `mix` alone mixes clock faults in at this share
    maintenance_share: float  # ... and compact-kills at this one
    roles: tuple[str, ...]  # the role targets the db has
    targets: tuple[str, ...]  # what kills, pauses and clock faults aim at
    groupings: tuple[str, ...]  # partition shapes, in the known order
    phases: tuple[str, ...]  # the windows phase-triggered faults wait for

    @property
    def drawable(self) -> tuple[str, ...]:
        """Every kind a fault can be, the mixed-in ones included."""
        mixed = {"clock": self.clock_share, "compact-kill": self.maintenance_share}
        return tuple(k for k in (*PRIMITIVES, *EXTRA_KINDS) if k in self.kinds or mixed.get(k))


def aims(
    kinds: Sequence[str],
    *,
    phases: Sequence[str] | None = None,
    targets: Sequence[str] | None = None,
    groupings: Sequence[str] | None = None,
    only: Sequence[str] | None = None,
    roles: Sequence[str] = ROLE_TARGETS,
    clocks: bool = False,
    maintenance: Sequence[str] = (),
    mix_maintenance: bool = False,
) -> Aims:
    """What `NemesisSchedule` with these arguments draws from (see its
    parameters); ValueError naming the first unknown kind, phase, target or
    grouping, or a compact-kill on a db that cannot compact."""
    bad = sorted(set(kinds) - set(FAULT_KINDS))
    if bad:
        raise ValueError(f"unknown nemesis {bad[0]!r}; known: {', '.join(FAULT_KINDS)}")
    bad = sorted(set(phases or ()) - set(PHASES))
    if bad:
        raise ValueError(f"unknown nemesis phase {bad[0]!r}; known: {', '.join(PHASES)}")
    if "compact-kill" in kinds and not maintenance:
        raise ValueError("nemesis compact-kill needs a db that compacts; this one cannot")
    mix = MIX in kinds
    extra = [k for k in EXTRA_KINDS if k in kinds]
    drawn = [*PRIMITIVES, *extra] if mix else [k for k in kinds if k != MIX]
    # `mix` alone mixes clock faults in at a share of their own, so the
    # other kinds keep their relative rates; naming `clock` draws it evenly.
    mixed_clock = mix and clocks and "clock" not in extra
    mixed_maintenance = (mix and mix_maintenance and bool(maintenance)
                         and "compact-kill" not in extra)  # fmt: skip
    if only is not None:  # swarm testing: this run's subset of the kinds
        drawable = (*PRIMITIVES, *EXTRA_KINDS)
        bad = sorted(set(only) - set(drawable))
        if bad or not only:
            what = repr(bad[0]) if bad else "(none given)"
            raise ValueError(f"unknown fault kind {what}; known: {', '.join(drawable)}")
        drawn = [k for k in drawn if k in only]
        mixed_clock = mixed_clock and "clock" in only
        mixed_maintenance = mixed_maintenance and "compact-kill" in only
        if mixed_clock and not drawn:
            drawn, mixed_clock = ["clock"], False
        if mixed_maintenance and not drawn:
            drawn, mixed_maintenance = ["compact-kill"], False
    # The roles the db has (etcd: no placement driver, primaries or
    # metastore group). With every role the draws are the ones they
    # always were, so a seed's schedule on ember does not change.
    have = tuple(r for r in ROLE_TARGETS if r in roles)
    aimed: tuple[str, ...] = (*have, "random", "joining") if mix else TARGETS
    if targets is not None:  # aim kills and pauses at these only
        aimable = tuple(dict.fromkeys([*TARGETS, *MIX_TARGETS]))
        bad = sorted(set(targets) - set(aimable))
        if bad or not targets:
            what = repr(bad[0]) if bad else "(none given)"
            raise ValueError(f"unknown nemesis target {what}; known: {', '.join(aimable)}")
        absent = set(ROLE_TARGETS) - set(have)
        aimed = tuple(t for t in targets if t not in absent) or tuple(targets)
    shapes: tuple[str, ...] = (MIX_GROUPINGS if have else GROUPINGS) if mix else GROUPINGS
    if groupings is not None:  # partitions of these shapes only
        allowed: tuple[str, ...] = (*GROUPINGS, "isolate") if have else GROUPINGS
        bad = sorted(set(groupings) - set(allowed))
        if bad or not groupings:
            what = repr(bad[0]) if bad else "(none given)"
            raise ValueError(f"unknown partition grouping {what}; known: {', '.join(allowed)}")
        # In the known order, so a plan's draws do not depend on how it lists them.
        shapes = tuple(g for g in allowed if g in groupings)
    return Aims(
        kinds=tuple(drawn),
        clock_share=CLOCK_SHARE_IN_MIX if mixed_clock else 0.0,
        maintenance_share=MAINTENANCE_SHARE_IN_MIX if mixed_maintenance else 0.0,
        roles=have,
        targets=aimed,
        groupings=shapes,
        # Named phases are taken as named, even the three a plan naming none
        # waits for; `mix` naming none waits for every window.
        phases=tuple(phases if phases is not None else PHASES if mix else DEFAULT_PHASES),
    )


def fit_targets(
    kinds: Sequence[str], targets: Sequence[str] | None, roles: Sequence[str], db: str
) -> str | None:
    """What a schedule on a db with only `roles` aims at instead, said in one
    line (None: nothing to adapt); ValueError when the plan names only
    targets the db lacks, so no kill or pause of it could ever be applied.
    """
    missing = [r for r in ROLE_TARGETS if r not in roles]
    if not missing:
        return None
    if targets is not None:
        wanted = [t for t in targets if t in missing]
        kept = [t for t in targets if t not in missing]
        if wanted and not kept:
            raise ValueError(f"{db} has no {', '.join(wanted)}: nemesis targets "
                             f"{', '.join(targets)} name no role it can aim at")  # fmt: skip
        if wanted:
            return (f"nemesis on {db}: {', '.join(wanted)} dropped from the targets "
                    f"({db} has none); kills and pauses aim at {', '.join(kept)}")  # fmt: skip
        return None
    if MIX not in kinds:
        return None  # the primitives aim at leader, random or joining: every db has those
    aims = (*(r for r in ROLE_TARGETS if r in roles), "random", "joining")
    return (f"nemesis on {db}: no {', '.join(missing)} to aim at; mix kills, pauses and "
            f"isolating partitions aim at {', '.join(aims)}")  # fmt: skip


class NemesisSchedule(Generator):
    """Fault / heal ops for the single nemesis thread (see the module doc)."""

    def __init__(
        self,
        rng: random.Random,
        kinds: Sequence[str],
        *,
        mode: str = "both",
        gap_s: float = 6.0,
        duration_s: tuple[float, float] | None = None,
        end_s: float = 60.0,
        phases: Sequence[str] | None = None,
        max_faults: int | None = None,
        targets: Sequence[str] | None = None,
        groupings: Sequence[str] | None = None,
        only: Sequence[str] | None = None,
        keep: Collection[int] | None = None,
        roles: Sequence[str] = ROLE_TARGETS,
        clocks: bool = False,
        maintenance: Sequence[str] = (),
        mix_maintenance: bool = False,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"nemesis mode {mode!r} is not one of {', '.join(MODES)}")
        drawn = aims(kinds, phases=phases, targets=targets, groupings=groupings, only=only,
                     roles=roles, clocks=clocks, maintenance=maintenance,
                     mix_maintenance=mix_maintenance)  # fmt: skip
        # Three streams, so that what each fault is (kind, grouping, target,
        # seed, duration) is the same sequence in a replay even when timing
        # decides whether a phase or the timer started it.
        self.rng = random.Random(rng.getrandbits(64))
        self.timing = random.Random(rng.getrandbits(64))
        self.phase_rng = random.Random(rng.getrandbits(64))
        self.maintenance = tuple(maintenance)
        mix = MIX in kinds
        self.kinds = list(drawn.kinds)
        self.clock_share = drawn.clock_share
        self.maintenance_share = drawn.maintenance_share
        # Shrinking: the numbers (1, 2, ...) of the faults to apply; the others
        # are drawn all the same and skipped, so each kept fault is the one
        # the full schedule had (same kind, target, seed, duration).
        self.keep = frozenset(keep) if keep is not None else None
        self.skipped = 0
        self.mode = mode
        self.roles = drawn.roles
        self.groupings = drawn.groupings
        self.targets = drawn.targets
        self.gap_ns = int(gap_s * NS_PER_S)
        self.duration_s = duration_s or (MIX_DURATION_S if mix else (2.0, 6.0))
        self.end_ns = int(end_s * NS_PER_S)
        self.phases = list(drawn.phases)
        if max_faults is None and mix:
            max_faults = max(1, int(end_s / MIN_CYCLE_S))
        self.max_faults = max_faults
        self.faults = 0  # faults started so far
        self.active: Op | None = None  # the fault waiting for its heal
        self.heal_at_ns = 0
        self.in_flight = False
        self.next_ns: int | None = None  # when the next periodic fault is due
        self.wanted = self.phase_rng.choice(self.phases) if self.phases else None
        self.trigger: Observation | None = None
        self.open_pending: set[str] = set()  # groups with pending written, stable not switched
        # ... and the revision and time of the write that opened the window
        self.pending_since: dict[str, tuple[Any, int]] = {}
        self.switched_at: dict[str, int] = {}  # group -> revision of its last stable switch
        self.windows: deque[int] = deque(maxlen=WINDOWS_KEPT)  # recent pending-to-switch, ns
        self.armed: tuple[int, Observation] | None = None  # a pending-open fault: (due, pending)

    def idle(self) -> str:
        """Why the schedule started no fault, once it is done ("" when it
        started one): a run without faults says so rather than pass quietly."""
        if self.faults - self.skipped > 0 or not self.kinds:
            return ""
        if self.faults:
            return f"nemesis: no fault started ({self.skipped} drawn, none of them kept)"
        if self.mode == "phase":
            return (f"nemesis: no fault started: no window of the phases it waits for "
                    f"({', '.join(self.phases)}) opened")  # fmt: skip
        return "nemesis: no fault started before the main phase ended"

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
        if now >= self.end_ns or (self.max_faults is not None and self.faults >= self.max_faults):
            return None
        if self.next_ns is None:
            self.next_ns = now + self._gap()
        if self.mode != "periodic":
            trigger = self._due_trigger(now)
            if trigger is not None:
                return self._start(self._fault(trigger), now)
        if now >= self.next_ns:
            if self.mode != "phase":
                return self._start(self._fault(None), now)
            if self.armed is None:  # an armed pending-open fault is a window still open
                self._give_up_waiting(now)
        return PENDING

    def _give_up_waiting(self, now: int) -> None:
        """Phase mode, when a timer fault would have been due: wait for another
        window instead. Without this one window that stays shut ended the
        run's faults: in the simulator stable switches a median 0.1 s after
        pending, within the 0.1-1 s arming delay pending-open then had, so a full-mix
        phase run (seed 18) drew pending-open at 8.5 s and no fault after."""
        self.wanted = self.phase_rng.choice(self.phases) if self.phases else None
        self.next_ns = now + self._gap()

    def _start(self, fault: Op, now: int) -> Result:
        if self.keep is None or self.faults in self.keep:
            return self._emit(fault, now)
        # Skipped: the streams move as if it had been applied and healed at once.
        self.skipped += 1
        if self.phases:
            self.wanted = self.phase_rng.choice(self.phases)
        self.next_ns = now + self._gap()
        return PENDING

    def _due_trigger(self, now: int) -> dict[str, Any] | None:
        """The trigger of a fault to start now, if a wanted window is open."""
        if self.armed is not None:
            due, pending = self.armed
            group = str(pending.data.get("group"))
            if group not in self.open_pending or now - due > STALE_NS:
                self.armed = None  # stable switched first, or we were too slow
            elif now >= due:
                self.armed = None
                # The trigger is the armed delay running out, not the pending write:
                # reaction is measured from then (the delay is chosen, not a lag).
                waited_s = (due - pending.time_ns) / NS_PER_S
                data = {**pending.data, "stage": "pending-open", "armed_s": round(waited_s, 6)}
                for key in ("wall", "seen_wall"):
                    if isinstance(data.get(key), int | float):
                        data[key] = data[key] + waited_s
                return data
        trigger, self.trigger = self.trigger, None
        if trigger is not None and now - trigger.time_ns <= STALE_NS:
            return trigger.data
        return None

    def _emit(self, op: Op, now: int) -> Op:
        self.in_flight = True
        return Op(f=op.f, value=op.value, time_ns=now)

    def _fault(self, trigger: dict[str, Any] | None) -> Op:
        self.faults += 1
        if self.clock_share and self.rng.random() < self.clock_share:
            kind = "clock"
        elif self.maintenance_share and self.rng.random() < self.maintenance_share:
            kind = "compact-kill"
        else:
            kind = self.rng.choice(self.kinds)
        value: dict[str, Any] = {"kind": kind, "seed": self.rng.getrandbits(32)}
        if kind == "partition":
            value["grouping"] = self.rng.choice(self.groupings)
            if value["grouping"] == "isolate":
                value["target"] = self.rng.choice(self.roles)
        elif kind == "slow":
            value["target"] = "joining"
        else:
            value["target"] = self.rng.choice(self.targets)
        if kind == "clock":
            value.update(self._clock())
        elif kind == "compact-kill":
            value["action"] = self.rng.choice(self.maintenance)
            value["back"] = self.rng.randint(0, MAINTENANCE_BACK)
            value["delay_ms"] = round(self.rng.random() * MAINTENANCE_DELAY_MS, 1)
        elif kind == "drop-replies":
            low, high = DROP_PROBABILITY
            value["probability"] = round(low + self.rng.random() * (high - low), 2)
        low, high = self.duration_s
        value["duration_s"] = round(low + self.rng.random() * (high - low), 3)
        if trigger is not None:
            value["trigger"] = {k: trigger.get(k) for k in
                                ("group", "stage", "node", "joining", "peers", "wall",
                                 "seen_wall")}  # fmt: skip
            if "armed_s" in trigger:
                value["trigger"]["armed_s"] = trigger["armed_s"]
            value["group"] = trigger.get("group")
        return Op(f=kind, value=value)

    def _clock(self) -> dict[str, Any]:
        mode = self.rng.choice(CLOCK_MODES)
        sign = self.rng.choice((-1, 1))
        if mode == "drift":
            return {"mode": mode, "rate": round(2.0 ** (sign * (0.3 + 0.7 * self.rng.random())), 3)}
        delta = round(sign * LEASE_S * (1 + 3 * self.rng.random()), 3)
        if mode == "strobe":
            period = round(0.05 + 0.45 * self.rng.random(), 3)
            return {"mode": mode, "delta_s": abs(delta), "period_s": period}
        return {"mode": mode, "delta_s": delta}

    @staticmethod
    def _heal(fault: Op) -> Op:
        return Op(f=HEAL_OF[fault.f], value={"kind": fault.f})

    def update(self, ctx: Context, event: Event) -> None:
        if isinstance(event, Observation):
            self._observe(event)
            return
        if not isinstance(event, Completion):
            return
        self.in_flight = False
        if event.op.f in HEAL_OF:
            self.next_ns = event.time_ns + self._gap()
            value = event.value if isinstance(event.value, dict) else {}
            if event.type == "info" and "unresolved" in value:
                return  # nothing was applied: nothing to heal
            # Heal whatever happened: a fault that failed half-way is undone too.
            self.active = event.op
            self.heal_at_ns = event.time_ns + int(event.op.value["duration_s"] * NS_PER_S)
            if self.phases:
                # After timed faults too: a phase the run never reaches (no
                # rebalance in it) must not keep every later fault timed.
                self.wanted = self.phase_rng.choice(self.phases)
        else:
            self.active = None
            self.next_ns = event.time_ns + self._gap()

    def _arming_delay(self, r: float) -> float:
        """pending-open's delay after pending, for the draw `r` in [0, 1): a
        share of how long this cluster's recent windows stayed open, so the
        fault lands inside one whether a rebalance takes seconds (Docker) or
        a tenth of one (the simulator, where 0.1-1 s missed every window).
        The first pending of a run has the prior to go on: a fixed 0.1-1 s
        there missed the run's first window every time."""
        low, high = PENDING_OPEN_SHARE
        typical = (
            statistics.median(self.windows) / NS_PER_S if self.windows else PENDING_OPEN_PRIOR_S
        )
        return min(PENDING_OPEN_MAX_S, typical * (low + r * (high - low)))

    def _observe(self, event: Observation) -> None:
        if event.kind != "phase":
            return
        stage, group = event.data.get("stage"), str(event.data.get("group"))
        rev = event.data.get("revision")
        if stage in ("pending", "switched") and isinstance(rev, int):
            # Every metastore replica logs the write: a copy of one at or
            # before the group's last switch (a slower node's tail) would
            # reopen a closed window.
            if rev <= self.switched_at.get(group, 0):
                return
            if stage == "switched":
                self.switched_at[group] = rev
        if stage == "pending":
            self.open_pending.add(group)
            # A window opens at the first copy of a pending write; a newer
            # write (a pending rewritten, or written again after a cancel,
            # which no observation marks) opens it afresh.
            since = self.pending_since.get(group)
            if since is None or since[0] != rev:
                self.pending_since[group] = (rev, event.time_ns)
        elif stage == "switched":
            self.open_pending.discard(group)
            opened = self.pending_since.pop(group, None)
            if opened is not None:
                self.windows.append(event.time_ns - opened[1])
        if self.active is not None or self.in_flight:
            return
        if stage == "pending" and self.wanted == "pending-open" and self.armed is None:
            delay = self._arming_delay(self.phase_rng.random())
            self.armed = (event.time_ns + int(delay * NS_PER_S), event)
        if stage == self.wanted:
            self.trigger = event
