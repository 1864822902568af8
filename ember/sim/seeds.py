"""Root seed -> named sub-seeds, derived in a fixed order.

Theory of operation (after TigerBeetle's VOPR): one root seed feeds a
`random.Random` that draws one 64-bit sub-seed per subsystem in a fixed
order -- network, clock, nemesis, workload, then `node-<id>` for every node
in the universe, in order. Subsystems added later (client reads) draw from
a second generator seeded by the root, so neither the earlier sub-seeds nor
the node count changes them. Each subsystem owns its own `random.Random`, so a
change in how much randomness one subsystem consumes never shifts another's
choices, and adding nodes at the end never changes the earlier sub-seeds.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

SUBSYSTEMS: tuple[str, ...] = ("network", "clock", "nemesis", "workload")
LATE_SUBSYSTEMS: tuple[str, ...] = ("reads",)


class Seeds:
    """The root seed and every sub-seed derived from it."""

    def __init__(self, root: int, node_ids: Sequence[str]) -> None:
        if root < 0:
            raise ValueError(f"seed must be a non-negative integer, got {root}")
        self.root = root
        draw = random.Random(root)
        names = [*SUBSYSTEMS, *(f"node-{node_id}" for node_id in node_ids)]
        self._sub: dict[str, int] = {name: draw.getrandbits(64) for name in names}
        late = random.Random(f"{root}/late")
        self._sub |= {name: late.getrandbits(64) for name in LATE_SUBSYSTEMS}

    def sub(self, name: str) -> int:
        """The sub-seed of subsystem `name` (e.g. "network", "node-n3")."""
        try:
            return self._sub[name]
        except KeyError:
            raise KeyError(f"no sub-seed named {name!r}; known: {sorted(self._sub)}") from None

    def rng(self, name: str) -> random.Random:
        """A fresh generator seeded with the sub-seed of `name`."""
        return random.Random(self.sub(name))

    def describe(self) -> list[tuple[str, int]]:
        """Every (name, sub-seed) in derivation order, for printing first."""
        return list(self._sub.items())
