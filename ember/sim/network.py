"""The simulated network: delay, loss, duplication, reordering, partitions.

Theory of operation: `send` decides, when a message leaves its sender, when
(and how many times) it will arrive: it may be lost (probability `loss`),
duplicated (`dup`, the copy gets its own delay), and delayed uniformly in
[min_delay_ms, max_delay_ms]. Without reordering each directed link is FIFO,
like the TCP connection the real transport uses: a message never arrives
before one sent earlier on the same link. With probability `reorder` a
message skips that rule and takes up to `reorder_spread` times the maximum
delay, so later messages overtake it. Partitions are a set of blocked
directed links, checked when a message arrives (as iptables drops incoming
packets), so a partition also drops what was already in flight; blocking a
link one way only gives one-way partitions.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ember.sim.clock import NS_PER_MS

Link = tuple[str, str]


@dataclass(frozen=True, slots=True, kw_only=True)
class NetworkConfig:
    """The network's fault knobs; the nemesis swaps them during a run."""

    min_delay_ms: float = 1.0
    max_delay_ms: float = 5.0
    loss: float = 0.0
    dup: float = 0.0
    reorder: float = 0.0
    reorder_spread: float = 10.0

    def __post_init__(self) -> None:
        for name in ("loss", "dup", "reorder"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"network {name} must be a probability in [0, 1], got {value}")
        if not 0.0 <= self.min_delay_ms <= self.max_delay_ms:
            raise ValueError(
                f"network delays need 0 <= min <= max, got {self.min_delay_ms}..{self.max_delay_ms}"
            )


@dataclass(slots=True)
class NetworkStats:
    """Counters for the summary and the tests."""

    sent: int = 0
    delivered: int = 0
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    blocked: int = 0


class Network:
    """Decides delivery times for messages and which links are cut."""

    def __init__(self, rng: random.Random, config: NetworkConfig | None = None) -> None:
        self.rng = rng
        self.config = config or NetworkConfig()
        self.blocked: set[Link] = set()
        self.stats = NetworkStats()
        self._last_arrival_ns: dict[Link, int] = {}

    def send(self, src: str, dst: str, now_ns: int) -> list[int]:
        """Arrival times (possibly none, possibly two) of a message sent now."""
        cfg = self.config
        self.stats.sent += 1
        if cfg.loss and self.rng.random() < cfg.loss:
            self.stats.lost += 1
            return []
        copies = 1
        if cfg.dup and self.rng.random() < cfg.dup:
            copies = 2
            self.stats.duplicated += 1
        return [self._arrival(src, dst, now_ns) for _ in range(copies)]

    def _arrival(self, src: str, dst: str, now_ns: int) -> int:
        cfg = self.config
        delay_ms = self.rng.uniform(cfg.min_delay_ms, cfg.max_delay_ms)
        if cfg.reorder and self.rng.random() < cfg.reorder:
            # Out-of-order: long delay, and the link's FIFO horizon is untouched.
            self.stats.reordered += 1
            spread = self.rng.uniform(1.0, cfg.reorder_spread)
            return now_ns + int(delay_ms * spread * NS_PER_MS)
        link = (src, dst)
        at = max(now_ns + int(delay_ms * NS_PER_MS), self._last_arrival_ns.get(link, 0))
        self._last_arrival_ns[link] = at
        return at

    def may_deliver(self, src: str, dst: str) -> bool:
        """Whether a message arriving now on src->dst gets through."""
        if (src, dst) in self.blocked:
            self.stats.blocked += 1
            return False
        self.stats.delivered += 1
        return True

    def partition(self, sides: Sequence[Iterable[str]]) -> None:
        """Cut every link (both ways) between nodes on different sides."""
        groups = [set(side) for side in sides]
        for i, a in enumerate(groups):
            for b in groups[i + 1 :]:
                for x in a:
                    for y in b:
                        self.blocked.add((x, y))
                        self.blocked.add((y, x))

    def block(self, src: str, dst: str) -> None:
        """Cut the one-way link src->dst (dst still reaches src)."""
        self.blocked.add((src, dst))

    def heal(self) -> None:
        """Restore every link and the fault-free knobs' delays."""
        self.blocked.clear()
