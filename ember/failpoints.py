"""Failpoints: named hooks the node runtime consults, switched over the admin API.

Theory of operation
-------------------
A `Failpoints` registry knows a fixed set of names (`KNOWN`). Each is off
until enabled with parameters; the runtime asks at the named spot
(`hit(name, peer=...)`) and gets back the active `Failpoint` or None. Every
parameter is optional:

- `delay_ms`: how long to hold the action (appends, a snapshot install).
- `probability`: chance in [0, 1] that a hit fires (default 1); drawn from
  the node's seeded `random.Random`, so a seeded run replays.
- `peer`: fire only for messages to/from this peer (default: any peer).
- `one_shot`: disable after the first hit that fires.
- `point`: for `crash`, the named point where the process exits.

A toggle (enable/disable, and a one-shot firing) is reported to the
`on_toggle` callback, which the node turns into a `failpoint` audit event.
Bad parameters raise `FailpointError` naming what is wrong; the API turns it
into a 400.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

# The crash points the runtime checks, in the order one batch passes them.
CRASH_POINTS = (
    "before-persist",  # a Ready taken, nothing written
    "after-persist",  # fsynced, no message sent, nothing applied
    "after-apply",  # applied and answered
    "snapshot-install",  # an InstallSnapshot about to be persisted
)

KNOWN: dict[str, str] = {
    "raft.append.delay": "hold AppendEntries to `peer` (any if unset) for `delay_ms`",
    "raft.append.drop": "drop AppendEntries to `peer` with `probability`",
    "raft.message.drop": "drop every outgoing Raft message to `peer` with `probability`",
    "snapshot.install.slow": "hold an incoming InstallSnapshot for `delay_ms` before stepping it",
    "http.drop-reply": "serve a client's request (/kv, /meta, the zone admin routes) and, "
    "with `probability`, close its connection instead of sending a success answer",
    "rebalance.cancel-without-revision-guard": "planted: write a cancel without checking "
    "that pending is the revision it names",
    "rebalance.ignore-last-seen": "planted: a primary acts on requests older than its last seen",
    "kv.ack-before-commit": "planted: a KV leader answers writes once appended locally, "
    "before they commit, and reads from its uncommitted log",
    "kv.apply-diverge": "planted: a follower applies each KV put with another value than "
    "its leader did (same log, different state)",
    "raft.skip-catchup": "planted: a leader appends the joint entry without waiting for "
    "new peers to catch up",
    "raft.ignore-vote-lease": "planted: a voter that heard from its leader within the "
    "election timeout still adopts a candidate's term and may grant its vote",
    "raft.skip-check-quorum": "planted: a leader that lost its quorum never steps down",
    "raft.step-down-on-joint": "planted: a leader outside the new peers steps down when the "
    "joint entry commits instead of the stable one",
    "placement.trust-own-clock": "planted: an active placement driver neither reads nor "
    "renews its lease while its own wall clock says the lease is still valid",
    "rebalance.primary-ignores-lease": "planted: a primary acts on (and keeps its jobs) "
    "after its lease ran out or was taken over",
    "metastore.ignore-sessions": "planted: a metastore write's client session is dropped "
    "where it is received, so a write sent again after an unknown outcome applies again",
    "metastore.compare-create-revision": "planted: a metastore transaction received here "
    "compares `create_revision` wherever it asked for `mod_revision`",
    "crash": "exit the process at once (like kill -9) at `point`: " + ", ".join(CRASH_POINTS),
}

# The failpoints that plant a defect (their description says so). The others
# are faults: a harness heals them with the rest before its quiet period.
PLANTED = frozenset(name for name, doc in KNOWN.items() if doc.startswith("planted:"))


class FailpointError(ValueError):
    """A failpoint name or parameter is invalid."""


@dataclass(slots=True, kw_only=True)
class Failpoint:
    """One enabled failpoint and its parameters."""

    name: str
    delay_ms: float = 0.0
    probability: float = 1.0
    peer: str | None = None
    one_shot: bool = False
    point: str | None = None
    hits: int = 0

    def to_json(self) -> dict[str, Any]:
        """The failpoint as a JSON object."""
        return asdict(self)


_PARAMS = {"delay_ms", "probability", "peer", "one_shot", "point"}


def _check_params(name: str, params: dict[str, Any]) -> Failpoint:
    if name not in KNOWN:
        raise FailpointError(f"unknown failpoint {name!r}; known: {', '.join(sorted(KNOWN))}")
    if not isinstance(params, dict):
        raise FailpointError("failpoint parameters must be a JSON object")
    extra = sorted(set(params) - _PARAMS)
    if extra:
        raise FailpointError(f"unknown parameter(s) {', '.join(extra)}; known: {sorted(_PARAMS)}")
    delay = params.get("delay_ms", 0.0)
    prob = params.get("probability", 1.0)
    peer = params.get("peer")
    one_shot = params.get("one_shot", False)
    point = params.get("point")
    if isinstance(delay, bool) or not isinstance(delay, int | float) or not 0 <= delay <= 600_000:
        raise FailpointError("delay_ms must be a number in [0, 600000]")
    if isinstance(prob, bool) or not isinstance(prob, int | float) or not 0 <= prob <= 1:
        raise FailpointError("probability must be a number in [0, 1]")
    if peer is not None and not isinstance(peer, str):
        raise FailpointError("peer must be a node id string")
    if not isinstance(one_shot, bool):
        raise FailpointError("one_shot must be true or false")
    if name == "crash" and point not in CRASH_POINTS:
        raise FailpointError(f"crash needs point, one of {', '.join(CRASH_POINTS)}")
    if name != "crash" and point is not None:
        raise FailpointError("point applies only to the crash failpoint")
    return Failpoint(
        name=name,
        delay_ms=float(delay),
        probability=float(prob),
        peer=peer,
        one_shot=one_shot,
        point=point,
    )


class Failpoints:
    """The registry of a node's failpoints."""

    def __init__(
        self,
        rng: random.Random,
        on_toggle: Callable[[str, bool, dict[str, Any]], None] | None = None,
    ) -> None:
        self._rng = rng
        self._active: dict[str, Failpoint] = {}
        self._on_toggle = on_toggle

    def enable(self, name: str, params: dict[str, Any] | None = None) -> Failpoint:
        """Switch `name` on (replacing earlier parameters); FailpointError if invalid."""
        fp = _check_params(name, params or {})
        self._active[name] = fp
        self._toggled(fp, True)
        return fp

    def disable(self, name: str) -> bool:
        """Switch `name` off; returns whether it was on. FailpointError if unknown."""
        if name not in KNOWN:
            raise FailpointError(f"unknown failpoint {name!r}; known: {', '.join(sorted(KNOWN))}")
        fp = self._active.pop(name, None)
        if fp is not None:
            self._toggled(fp, False)
        return fp is not None

    def list(self) -> dict[str, Any]:
        """Every known failpoint with its description and, if on, its parameters."""
        return {
            name: {
                "description": desc,
                "enabled": name in self._active,
                "params": self._active[name].to_json() if name in self._active else None,
            }
            for name, desc in sorted(KNOWN.items())
        }

    @property
    def any_enabled(self) -> bool:
        """Cheap check for the hot path: is anything switched on?"""
        return bool(self._active)

    def hit(
        self, name: str, *, peer: str | None = None, point: str | None = None
    ) -> Failpoint | None:
        """The failpoint if it is on and fires for this `peer`/`point`, else None."""
        fp = self._active.get(name)
        if fp is None:
            return None
        if fp.peer is not None and peer is not None and fp.peer != peer:
            return None
        if fp.point is not None and fp.point != point:
            return None
        if fp.probability < 1.0 and self._rng.random() >= fp.probability:
            return None
        fp.hits += 1
        if fp.one_shot:
            del self._active[name]
            self._toggled(fp, False)
        return fp

    def _toggled(self, fp: Failpoint, enabled: bool) -> None:
        if self._on_toggle is not None:
            self._on_toggle(fp.name, enabled, fp.to_json())
