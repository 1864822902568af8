"""What faults a run landed where: the fault kind x protocol phase x role table.

A cell is (kind, phase, role) for one APPLIED fault (its completion `ok`):

- kind: `partition`, `kill`, `pause`, `slow` or `clock`;
- phase: the stage whose start fired it (`catching-up`, `joint`, `stable`,
  `done`, `pending`, `pending-open`), or `timer` for a timed fault;
- role: whom it was aimed at: a kill or pause's target (`group-leader`,
  `meta-leader`, `placement-driver`, `primary`, `joining`, `random`); a
  partition isolating a role names it (`isolate-leader` is the group
  leader, `isolate-joining` the joining peer), other partitions are `none`;
  a slow catch-up always aims at the `joining` peer. A fault aimed at the
  joining peer when there was none (a timed fault, a `done` stage, a change
  that only removes) lands on a random node and says so (`resolved: random
  node`): its cell is `random`, as the fault did. So `joining` cells exist
  only for the phases whose trigger can carry joining peers
  (`JOINING_PHASES`).

A fault that completed `info` (unresolved, nothing applied) hits no cell:
the table says what happened, never what was planned. `faultline explore`
keeps the table across runs (`explore/coverage.json` in the store) and
steers new seeds toward its empty cells (`harness.explore`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import msgspec

from nemesis.generator import EXTRA_KINDS, MIX_TARGETS, PHASES, PRIMITIVES
from nemesis.targets import RANDOM_NODE, ROLE_TARGETS

Cell = tuple[str, str, str]
TIMER = "timer"
PHASE_CELLS = (*PHASES, TIMER)
NONE = "none"
# The roles each kind can be aimed at (what the mix nemesis can draw).
ROLES_OF: dict[str, tuple[str, ...]] = {
    "kill": MIX_TARGETS,
    "pause": MIX_TARGETS,
    "partition": (*ROLE_TARGETS, "joining", NONE),
    "slow": ("joining",),
    "clock": MIX_TARGETS,
    "compact-kill": MIX_TARGETS,
    "drop-replies": MIX_TARGETS,
}
_ISOLATES = {"isolate-leader": "group-leader", "isolate-joining": "joining"}
# The phases whose trigger names joining peers (nemesis.phase): a change's
# stages and a rebalance's pending window, when they add a node.
JOINING_PHASES = ("catching-up", "joint", "stable", "pending", "pending-open")


def landing(role: str, phase: str) -> tuple[str, ...]:
    """The cell roles a fault aimed at `role` can land in at `phase`: one aimed
    at the joining peer lands on a random node when the trigger names none."""
    if role != "joining":
        return (role,)
    return ("joining", "random") if phase in JOINING_PHASES else ("random",)


def universe() -> list[Cell]:
    """Every cell the mix nemesis can reach, in a stable order."""
    cells = (
        (kind, phase, landed)
        for kind in (*PRIMITIVES, *EXTRA_KINDS)
        for phase in PHASE_CELLS
        for role in ROLES_OF[kind]
        for landed in landing(role, phase)
    )
    return list(dict.fromkeys(cells))


def cell_of(value: Mapping[str, Any]) -> Cell | None:
    """The cell of one applied fault's completion value; None if it is no fault."""
    kind = value.get("kind")
    if kind not in ROLES_OF:
        return None
    trigger = value.get("trigger")
    phase = str(trigger.get("stage")) if isinstance(trigger, dict) else TIMER
    if phase not in PHASE_CELLS:
        phase = TIMER
    if value.get("resolved") == RANDOM_NODE:
        role = "random"  # aimed at a joining peer there was none of, or at random
    elif kind == "partition":
        grouping = str(value.get("grouping"))
        role = str(value.get("target")) if grouping == "isolate" else _ISOLATES.get(grouping, NONE)
    elif kind == "slow":
        role = "joining"
    else:
        role = role_of(str(value.get("target")))
    return (str(kind), phase, role)


def role_of(target: str) -> str:
    """The cell role of a kill's or pause's target: a primitive's `leader` is
    the group leader, as `mix`'s `group-leader` is (nemesis.targets)."""
    return "group-leader" if target == "leader" else target


def cells_of_history(path: Path) -> list[Cell]:
    """The cells of a history's applied faults, in the order they were applied."""
    cells: list[Cell] = []
    with path.open("rb") as fh:
        for line in fh:
            if b'"process":"nemesis"' not in line or b'"type":"ok"' not in line:
                continue
            try:
                op = msgspec.json.decode(line)
            except msgspec.DecodeError:
                continue  # a torn last line: the checkers say so; coverage skips it
            value = op.get("value")
            cell = cell_of(value) if isinstance(value, dict) else None
            if cell is not None:
                cells.append(cell)
    return cells


class Coverage:
    """Hit counts per cell, kept across runs (`explore/coverage.json`)."""

    def __init__(self, hits: Mapping[Cell, int] | None = None) -> None:
        self.hits: dict[Cell, int] = dict.fromkeys(universe(), 0)
        for cell, n in (hits or {}).items():
            self.hits[cell] = self.hits.get(cell, 0) + n

    def add(self, cells: Iterable[Cell]) -> int:
        """Count a run's cells; returns how many were hit for the first time."""
        new = 0
        for cell in cells:
            new += self.hits.get(cell, 0) == 0
            self.hits[cell] = self.hits.get(cell, 0) + 1
        return new

    @property
    def hit(self) -> int:
        return sum(1 for n in self.hits.values() if n)

    @property
    def total(self) -> int:
        return len(self.hits)

    def hit_among(self, cells: Iterable[Cell]) -> int:
        """How many of `cells` have been hit (cells a plan can reach, say)."""
        cells = list(cells)
        return len(cells) - len(self.unhit_among(cells))

    def unhit_among(self, cells: Iterable[Cell]) -> list[Cell]:
        """`cells` no run has hit yet, in their order."""
        return [c for c in cells if not self.hits.get(c, 0)]

    def missing(self) -> Iterator[Cell]:
        return (c for c, n in self.hits.items() if n == 0)

    def dump(self) -> bytes:
        rows = [{"kind": k, "phase": p, "role": r, "hits": n} for (k, p, r), n in self.hits.items()]
        return msgspec.json.encode({"cells": rows, "hit": self.hit, "total": self.total})

    @classmethod
    def load(cls, path: Path) -> Coverage:
        """The table at `path`, or an empty one if there is none yet."""
        if not path.is_file():
            return cls()
        try:
            doc = msgspec.json.decode(path.read_bytes())
            rows = doc["cells"]
            return cls({(r["kind"], r["phase"], r["role"]): int(r["hits"]) for r in rows})
        except (msgspec.DecodeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: not a coverage table ({exc})") from None

    def table(self) -> list[tuple[str, str, int, int]]:
        """Per (kind, phase): cells hit and cells there are, for a compact summary
        (a cell outside the universe, from an older table, joins its kind and phase)."""
        counts: dict[tuple[str, str], list[int]] = {}
        for (kind, phase, _), n in self.hits.items():
            counts.setdefault((kind, phase), []).append(n)
        return [(k, p, sum(1 for n in ns if n), len(ns)) for (k, p), ns in counts.items()]
