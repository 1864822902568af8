"""The record every fault primitive returns, and how it heals itself.

Theory of operation: a primitive works out, per node, the exact shell
commands that inject the fault and the commands that undo it, runs the
first set (in parallel across nodes, in order within a node, stopping at
the first failure), and returns a `Fault` holding both. The commands are
what the history's nemesis event records (`as_value()`), so a report shows
precisely what was done to which node; `heal()` runs the undo commands and
returns the record of that. Undo commands are idempotent: healing twice,
or healing a fault that half-applied, is safe.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from harness.control import CommandResult
from nemesis import journal

CHAIN = "FAULTLINE"  # our iptables chain: healing never touches other rules
QDISC_HANDLE = "fa17"  # our root qdisc's handle: healing deletes only ours
STATE_DIR = "/run/faultline"
PAUSED_FILE = f"{STATE_DIR}/paused"  # pids we SIGSTOPped, one a line

Commands = Mapping[str, Sequence[str]]


class Runner(Protocol):
    """What runs scripts on nodes: `harness.control.Control`, or `nemesis.shell.Shell`."""

    def run_many(
        self, commands: Mapping[str, str], *, timeout_s: float = ..., check: bool = ...
    ) -> dict[str, CommandResult]:
        """Run `commands[node]` on each node at once."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Fault:
    """A fault as applied: what ran on each node and what undoes it."""

    kind: str
    detail: Mapping[str, Any] = field(default_factory=dict)
    commands: Commands = field(default_factory=dict)
    heal_commands: Commands = field(default_factory=dict)

    def as_value(self) -> dict[str, Any]:
        """JSON-ready description for a nemesis event's `value`."""
        return {
            "kind": self.kind,
            **self.detail,
            "commands": {n: list(c) for n, c in self.commands.items()},
        }

    def heal(self, control: Runner, *, timeout_s: float = 60.0) -> Fault:
        """Undo this fault; returns the record of the undo."""
        run_scripts(control, self.heal_commands, timeout_s=timeout_s)
        journal.note_healed(self.kind, self.heal_commands)
        return Fault(
            kind=f"heal-{self.kind}", detail=dict(self.detail), commands=self.heal_commands
        )


def script(commands: Sequence[str]) -> str:
    """One shell invocation running `commands` in order, stopping at a failure."""
    return "sh -ec " + shlex.quote("\n".join(commands))


def run_scripts(
    control: Runner, commands: Commands, *, timeout_s: float = 60.0
) -> dict[str, CommandResult]:
    """Run each node's command list (as one script) on all nodes at once."""
    todo = {node: script(cmds) for node, cmds in commands.items() if cmds}
    return control.run_many(todo, timeout_s=timeout_s)


def apply(
    control: Runner,
    kind: str,
    commands: Commands,
    heal_commands: Commands,
    detail: Mapping[str, Any] | None = None,
    *,
    timeout_s: float = 60.0,
) -> Fault:
    """Run `commands`; if any node fails, heal every node, then re-raise."""
    return apply_with_output(control, kind, commands, heal_commands, detail,
                             timeout_s=timeout_s)[0]  # fmt: skip


def apply_with_output(
    control: Runner,
    kind: str,
    commands: Commands,
    heal_commands: Commands,
    detail: Mapping[str, Any] | None = None,
    *,
    timeout_s: float = 60.0,
) -> tuple[Fault, dict[str, CommandResult]]:
    """`apply`, also returning what each node's script printed."""
    fault = Fault(
        kind=kind,
        detail=dict(detail or {}),
        commands={n: tuple(c) for n, c in commands.items()},
        heal_commands={n: tuple(c) for n, c in heal_commands.items()},
    )
    # Written down (fsync'd) before it runs: a harness killed mid-fault
    # leaves a journal that says what to undo (nemesis.journal).
    journal.note_fault(kind, fault.heal_commands, fault.commands)
    try:
        results = run_scripts(control, fault.commands, timeout_s=timeout_s)
    except BaseException:
        # A half-applied fault must not outlive the error that stopped it.
        fault.heal(control, timeout_s=timeout_s)
        raise
    return fault, results
