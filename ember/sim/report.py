"""What `python -m ember.sim` prints: header first, progress, summary last."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from ember.sim.clock import NS_PER_S
from ember.sim.invariants import SAFETY_PROPERTIES
from ember.sim.runner import LIVENESS, SimResult

if TYPE_CHECKING:
    from ember.sim.simulation import Simulation

console = Console(highlight=False)


def print_header(sim: Simulation) -> None:
    """The seed first (so even a hung run can be replayed), then sub-seeds."""
    cfg = sim.config
    console.print(f"seed {cfg.seed}")
    subs = " ".join(f"{name}={value:#x}" for name, value in sim.seeds.describe())
    console.print(f"sub-seeds {subs}", soft_wrap=True)
    console.print(
        f"nodes {cfg.nodes} voters + {len(cfg.node_ids) - cfg.nodes} spares, "
        f"{cfg.sim_seconds}s faults + up to {cfg.heal_seconds}s heal, "
        f"bug={cfg.bug or 'none'}, faults={','.join(cfg.faults) or 'none'}, "
        f"{len(sim.schedule)} faults scheduled",
        soft_wrap=True,
    )


@contextlib.contextmanager
def progress_printer(
    sim: Simulation, *, enabled: bool = True
) -> Iterator[Callable[[Simulation], None] | None]:
    """A live status line (simulated time, commits, changes, faults)."""
    if not enabled:
        yield None
        return
    started = time.perf_counter()
    with console.status("starting") as status:

        def hook(s: Simulation) -> None:
            wl = s.workload.stats
            wall = time.perf_counter() - started
            phase = "heal" if s.healed else "faults"
            status.update(
                f"{phase} t={s.clock.now_ns / NS_PER_S:6.2f}s sim ({wall:5.1f}s wall) "
                f"acked {wl.acked}/{wl.proposed} changes {len(s.workload.changes)} "
                f"faults {sum(s.nemesis.counts.values())}"
            )

        yield hook


def print_summary(result: SimResult) -> None:
    """The verdict table and, on a violation, the replay command."""
    cfg, st = result.config, result.stats
    console.print(
        f"seed {cfg.seed}: simulated {result.sim_ns / NS_PER_S:.3f}s "
        f"in {st['wall_seconds']}s wall, "
        f"{result.events} events, trace {result.trace_hash[:16]}"
    )
    console.print(
        f"ops proposed {st['proposed']}: acked {st['acked']}, failed {st['failed']}, "
        f"unknown {st['unknown']}, rejected {st['rejected']}"
    )
    changes = ", ".join(f"{k} {v}" for k, v in st["changes"].items()) or "none ended"
    console.print(f"changes submitted {st['changes_submitted']}: {changes}")
    faults = ", ".join(f"{k} {v}" for k, v in st["faults"].items()) or "none"
    console.print(f"faults injected: {faults}; crashes {st['crashes']}; max term {st['max_term']}")
    net = st["network"]
    console.print(
        f"network: sent {net['sent']}, lost {net['lost']}, duplicated {net['duplicated']}, "
        f"reordered {net['reordered']}, blocked {net['blocked']}"
    )
    table = Table("invariant", "checks", "verdict")
    failed = {v.prop for v in result.violations}
    for prop in (*SAFETY_PROPERTIES, LIVENESS):
        checks = result.checks.get(prop)
        if prop == LIVENESS:
            conv = st["converged_after_heal_s"]
            checks_text = "-" if conv is None else f"converged {conv}s after heal"
        else:
            checks_text = str(checks)
        verdict = (
            "[red]VIOLATED[/red]"
            if prop in failed
            else (
                "[yellow]not reached[/yellow]"
                if prop == LIVENESS and result.kind == "safety"
                else "ok"
            )
        )
        table.add_row(prop, checks_text, verdict)
    console.print(table)
    if result.valid:
        console.print(f"[green]valid[/green] (seed {cfg.seed})")
        return
    console.print(f"[red]INVALID ({result.kind})[/red]: {result.violations[0]}", soft_wrap=True)
    if result.trace_tail:
        console.print("last events:")
        for line in result.trace_tail[-15:]:
            console.print("  " + line, markup=False, soft_wrap=True)
    console.print(f"replay: {cfg.replay_command()}", soft_wrap=True)
