"""Each node's wall-clock offset from the harness's, measured as Jepsen does.

Why: on SSH hosts the nodes' clocks are their own (no shared monotonic
clock, unlike the simulator and Docker), so an audit event's `wall` is
placed on the harness's clock only by knowing how far the node's clock is
off. `measure` reads the node's clock (`date +%s.%N`) over the open SSH
connection and takes the midpoint of the harness's wall clock just before
and after as the instant it was read: the offset is exact to within half
the round trip, which is recorded with it. Of `TRIES` reads it keeps the
one with the shortest round trip (as NTP filters its samples): on a loaded
machine one read can take 200 ms, most of it on one side of the midpoint.

`OffsetRecorder` measures every node as the workload starts and again after
each restart op (a node that was killed and started, or the final heal),
in a thread so clients are not held up, and rewrites timeline.json with
the list under `clock_offsets` after each round. Each reading also has the
node's kernel boot id: nodes share the harness's monotonic clock only when
every one runs on the harness's own kernel (`same_kernel`; Docker on this
machine, not a remote Docker host), which is what `shared_monotonic` in
timeline.json then says. checkers.audit.place_events
uses the measurement nearest each event (docs/events.md, "Placed walls").
Docker runs record them too, though their events are placed by the shared
monotonic clock: there the offsets are ~0, which the Docker timeline test
checks.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import msgspec

from ember.audit import kernel_boot_id

READ_CLOCK = "date +%s.%N"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
READ_BOOT_ID = f"cat {BOOT_ID}"
TIMEOUT_S = 5.0
TRIES = 3
# The ops after which a node's process is new (nemesis.generator.HEAL_OF['kill'], the last heal).
RESTART_FS = frozenset({"start", "heal-all"})


class Runs(Protocol):
    """What `measure` needs of harness.control.Control."""

    def run(self, name: str, command: str, *, timeout_s: float = ..., check: bool = ...) -> Any: ...


def measure(control: Runs, node: str, why: str) -> dict[str, Any]:
    """The node's clock minus the harness's at the round trip's midpoint, from the
    quickest of TRIES reads, with the node's kernel boot id (read apart, so the
    timed round trip runs `date` alone)."""
    best = min((_read(control, node, why) for _ in range(TRIES)), key=lambda r: r["rtt_s"])
    return {**best, "boot_id": control.run(node, READ_BOOT_ID, timeout_s=TIMEOUT_S).stdout.strip()}


def local_boot_id() -> str:
    """The harness's kernel boot id ('' where the kernel has none to read): the
    one ember writes on its events, simulated kernel included."""
    return kernel_boot_id()


def _read(control: Runs, node: str, why: str) -> dict[str, Any]:
    before = time.time()
    out = control.run(node, READ_CLOCK, timeout_s=TIMEOUT_S).stdout
    after = time.time()
    try:
        node_wall = float(out.strip())
    except ValueError:
        raise ValueError(f"{node}: `{READ_CLOCK}` printed {out.strip()[:80]!r}") from None
    middle = (before + after) / 2
    return {"node": node, "harness_wall": round(middle, 6),
            "offset_s": round(node_wall - middle, 6), "rtt_s": round(after - before, 6),
            "why": why}  # fmt: skip


class OffsetRecorder:
    """Measures every node (module doc) and keeps timeline.json up to date."""

    def __init__(self, control: Runs, nodes: Sequence[str], timeline: Path,
                 anchor: dict[str, Any]) -> None:  # fmt: skip
        self.control, self.nodes, self.timeline = control, list(nodes), timeline
        self.anchor = anchor
        self.readings: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def measure_all(self, why: str) -> None:
        """One reading of every node, then timeline.json rewritten; a node that
        cannot be read is noted (its events keep their walls), never fatal."""
        got = []
        for node in self.nodes:
            try:
                got.append(measure(self.control, node, why))
            except Exception as exc:  # a node down mid-run: the next round reads it
                with self._lock:
                    self.errors.append(f"{node} ({why}): {exc}")
        with self._lock:
            self.readings.extend(got)
        self.write()

    def after(self, f: str, type_: str) -> None:
        """Called on each completed op: a restart op gets a round in a thread."""
        if f in RESTART_FS and type_ in ("ok", "info"):
            thread = threading.Thread(target=self.measure_all, args=(f"after {f}",), daemon=True)
            self._threads.append(thread)
            thread.start()

    def same_kernel(self) -> bool:
        """Whether every node measured runs on the harness's own kernel (its boot
        id): only then do they share the harness's monotonic clock."""
        mine = local_boot_id()
        with self._lock:
            ids = {r.get("boot_id") for r in self.readings}
            measured = {r["node"] for r in self.readings}
        return bool(mine) and ids == {mine} and measured == set(self.nodes)

    def write(self) -> None:
        """timeline.json: the anchor and every reading so far."""
        with self._lock:
            doc = {**self.anchor, "clock_offsets": self.readings}
            tmp = self.timeline.with_suffix(".tmp")
            tmp.write_bytes(msgspec.json.encode(doc) + b"\n")
            tmp.replace(self.timeline)

    def join(self, timeout_s: float = 2 * TIMEOUT_S) -> None:
        """Waits for the rounds still running (the run is ending)."""
        for thread in self._threads:
            thread.join(timeout_s)
