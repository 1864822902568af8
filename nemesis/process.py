"""Process faults: kill -9, stop, start, pause (SIGSTOP) and resume (SIGCONT).

Theory of operation: a `ProcessSpec` says how to find the process on a node
(a pidfile, or a `pgrep -f` pattern) and, optionally, how to start it. Each
fault first resolves the target pids on every node (`exec pgrep` replaces
the shell, so the pattern never matches the shell that searches for it),
then signals exactly those pids, so the record names the pids it hit. A
node where the process is not running is left alone and says so in the
record. `kill_now` and `pause_now` (pidfile specs) look up and signal in
one script, one SSH round trip instead of two: a phase-triggered fault must
land inside a window that may last only tens of milliseconds. The script
prints the pid it signalled, which the record names. Paused pids are
appended to /run/faultline/paused on the node, so `heal_all` can resume
them even after the harness that paused them died.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from harness.control import Control
from nemesis.fault import PAUSED_FILE, STATE_DIR, Fault, Runner, apply, apply_with_output


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessSpec:
    """How to find (and start) the process under test on a node."""

    pidfile: str | None = None
    pattern: str | None = None
    start_command: str | None = None
    log_path: str = "/var/log/faultline/process.log"

    def __post_init__(self) -> None:
        if (self.pidfile is None) == (self.pattern is None):
            raise ValueError("a ProcessSpec needs exactly one of pidfile or pattern")

    def find_command(self) -> str:
        """Prints the live pids, one a line (nothing when not running)."""
        if self.pattern is not None:
            return f"exec pgrep -f -- {shlex.quote(self.pattern)}"
        pidfile = shlex.quote(str(self.pidfile))
        return f'p=$(cat {pidfile} 2>/dev/null) && kill -0 "$p" 2>/dev/null && echo "$p" || true'

    def start_commands(self) -> list[str]:
        """Start the process detached, in its own session, recording its pid."""
        if self.start_command is None or self.pidfile is None:
            raise ValueError("starting a process needs both start_command and pidfile")
        pidfile, log = shlex.quote(self.pidfile), shlex.quote(self.log_path)
        run = shlex.quote(f"exec {self.start_command}")
        return [
            f"mkdir -p $(dirname {pidfile}) $(dirname {log})",
            # Already running: leave it be, so start is idempotent (and heals).
            f'if p=$(cat {pidfile} 2>/dev/null) && kill -0 "$p" 2>/dev/null; then exit 0; fi',
            f"setsid nohup sh -c {run} >>{log} 2>&1 </dev/null & echo $! > {pidfile}",
        ]


def find_pids(control: Control, names: Sequence[str], spec: ProcessSpec) -> dict[str, list[int]]:
    """The live pids of the process on each node."""
    results = control.run_many(dict.fromkeys(names, spec.find_command()), check=False)
    pids: dict[str, list[int]] = {}
    for node, result in results.items():
        # pgrep exits 1 when nothing matches; anything else is a real error.
        if result.exit_status not in (0, 1):
            raise RuntimeError(f"cannot look for the process on {node}: {result.stderr.strip()}")
        pids[node] = [int(w) for w in result.stdout.split() if w.isdigit()]
    return pids


def _signal(
    control: Control, names: Sequence[str], spec: ProcessSpec, signal: str
) -> tuple[dict[str, list[int]], dict[str, list[str]]]:
    pids = find_pids(control, names, spec)
    commands = {
        node: [f"kill -{signal} {' '.join(map(str, ps))}"] for node, ps in pids.items() if ps
    }
    return pids, commands


def _restart(spec: ProcessSpec, nodes: Sequence[str]) -> dict[str, list[str]]:
    if spec.start_command is None or spec.pidfile is None:
        return {}
    return {node: spec.start_commands() for node in nodes}


def _live_pid(spec: ProcessSpec) -> str:
    """Sets $p to the pidfile's live pid, or ends the script (nothing to signal)."""
    pidfile = shlex.quote(str(spec.pidfile))
    return f'p=$(cat {pidfile} 2>/dev/null) && kill -0 "$p" 2>/dev/null || exit 0'


def _signal_at_once(
    control: Runner,
    names: Sequence[str],
    spec: ProcessSpec,
    kind: str,
    steps: Sequence[str],
    heal: dict[str, list[str]],
) -> Fault:
    """Look up and signal in one script per node; the record names the pids printed."""
    if spec.pidfile is None:
        raise ValueError("signalling in one round trip needs a pidfile spec")
    commands = {node: [_live_pid(spec), *steps, 'echo "$p"'] for node in names}
    fault, results = apply_with_output(control, kind, commands, heal, {"nodes": list(names)})
    pids = {n: [int(w) for w in r.stdout.split() if w.isdigit()] for n, r in results.items()}
    return Fault(kind=kind, detail={**fault.detail, "pids": pids}, commands=fault.commands,
                 heal_commands=fault.heal_commands)  # fmt: skip


def kill_now(control: Runner, names: Sequence[str], spec: ProcessSpec) -> Fault:
    """`kill` in one round trip (pidfile specs only)."""
    return _signal_at_once(control, names, spec, "kill", ['kill -9 "$p"'],
                           _restart(spec, list(names)))  # fmt: skip


def pause_now(control: Runner, names: Sequence[str], spec: ProcessSpec) -> Fault:
    """`pause` in one round trip (pidfile specs only); heals by SIGCONT."""
    # Remember first, then stop (as `pause`); the pidfile still names the
    # paused pid when the heal runs.
    remember = f'mkdir -p {STATE_DIR} && echo "$p" >> {PAUSED_FILE}'
    heal = {node: [_live_pid(spec), 'kill -CONT "$p"', _forget_var()] for node in names}
    return _signal_at_once(control, names, spec, "pause", [remember, 'kill -STOP "$p"'], heal)


def kill(control: Control, names: Sequence[str], spec: ProcessSpec) -> Fault:
    """SIGKILL the process on `names`; heals by starting it again (if it can)."""
    pids, commands = _signal(control, names, spec, "9")
    detail = {"nodes": list(names), "pids": pids}
    return apply(control, "kill", commands, _restart(spec, list(commands)), detail)


def stop(control: Control, names: Sequence[str], spec: ProcessSpec, wait_s: float = 10) -> Fault:
    """SIGTERM the process and wait up to `wait_s` for it to exit; heals by starting it."""
    pids, commands = _signal(control, names, spec, "TERM")
    tries = max(1, int(wait_s * 10))
    for node, cmds in commands.items():
        plist = " ".join(map(str, pids[node]))
        cmds.append(
            f"for i in $(seq {tries}); do kill -0 {plist} 2>/dev/null || exit 0; sleep 0.1; done;"
            f" echo 'still running after {wait_s:g}s: {plist}' >&2; exit 1"
        )
    detail = {"nodes": list(names), "pids": pids}
    return apply(control, "stop", commands, _restart(spec, list(commands)), detail)


def start(control: Control, names: Sequence[str], spec: ProcessSpec) -> Fault:
    """Start the process on `names` where it is not running; heals by nothing."""
    commands = {node: spec.start_commands() for node in names}
    return apply(control, "start", commands, {}, {"nodes": list(names)})


def pause(control: Control, names: Sequence[str], spec: ProcessSpec) -> Fault:
    """SIGSTOP the process on `names`; heals by SIGCONT."""
    pids, commands = _signal(control, names, spec, "STOP")
    heal: dict[str, list[str]] = {}
    for node, cmds in commands.items():
        plist = " ".join(map(str, pids[node]))
        # Remember first, then stop: a crash in between leaves a pid that
        # heal_all SIGCONTs harmlessly, never a stopped pid nobody knows of.
        cmds.insert(0, f"mkdir -p {STATE_DIR} && printf '%s\\n' {plist} >> {PAUSED_FILE}")
        heal[node] = [f"kill -CONT {plist} 2>/dev/null || true", _forget(pids[node])]
    return apply(control, "pause", commands, heal, {"nodes": list(names), "pids": pids})


def _forget_var() -> str:
    """Drop "$p" from the paused file."""
    return (
        f'if [ -f {PAUSED_FILE} ]; then grep -vx "$p" {PAUSED_FILE} > {PAUSED_FILE}.new'
        f" || true; mv {PAUSED_FILE}.new {PAUSED_FILE}; fi"
    )


def _forget(pids: Sequence[int]) -> str:
    pattern = "|".join(str(p) for p in pids)
    return (
        f"if [ -f {PAUSED_FILE} ]; then grep -vxE '{pattern}' {PAUSED_FILE} > {PAUSED_FILE}.new"
        f" || true; mv {PAUSED_FILE}.new {PAUSED_FILE}; fi"
    )


def resume(control: Control, names: Sequence[str], spec: ProcessSpec) -> Fault:
    """SIGCONT the process on `names` (whoever paused it)."""
    pids, commands = _signal(control, names, spec, "CONT")
    for node, cmds in commands.items():
        cmds.append(_forget(pids[node]))
    return apply(control, "resume", commands, {}, {"nodes": list(names), "pids": pids})
