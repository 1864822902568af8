"""Clock faults on real nodes: one process's wall clock moved through libfaketime.

Theory of operation: containers share the host's kernel clock, so a clock
fault has to be injected per process. A run whose nemesis names `clock`
starts ember under libfaketime (`faketime_prefix`: Debian's library,
LD_PRELOADed, reading its offset from `FAKETIME_FILE` on every call, the
monotonic clock left alone as `date -s` or an NTP step would leave it).
The fault rewrites that file on the target node: a `bump` writes one
offset; a `strobe` runs a small shell loop that flips the offset ahead and
behind every period (its pid in `STROBE_PID`). Healing kills the loop and
writes `+0`; `HEAL_CLOCK` does it whoever set it, so `heal_all` resets
every node's clock too.

A `drift` (a rate) is not applied here: libfaketime measures a rate from
the process's start, so switching one on mid-run would first jump the
clock by the whole run's worth. It completes `info`, not applied, with
that reason; the simulator applies drifts exactly.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from nemesis.fault import STATE_DIR, Fault, Runner, apply

FAKETIME_FILE = f"{STATE_DIR}/faketime"
STROBE_PID = f"{STATE_DIR}/clock-strobe.pid"
LIBFAKETIME = "/usr/lib/*/faketime/libfaketime.so.1"  # Debian's multiarch path
HEAL_CLOCK = (
    f"if [ -f {STROBE_PID} ]; then kill $(cat {STROBE_PID}) 2>/dev/null; rm -f {STROBE_PID}; fi; "
    f"if [ -f {FAKETIME_FILE} ]; then echo +0 > {FAKETIME_FILE}; fi"
)


class ClockFaultUnsupportedError(ValueError):
    """The fault's mode cannot be applied to a real process (see the module doc)."""


def faketime_prefix() -> str:
    """What goes before ember's command so the nemesis can move its wall clock
    (an `env` command: ProcessSpec execs it). Until a fault writes the file,
    libfaketime finds none and leaves the clock alone."""
    return (
        f"env LD_PRELOAD=$(echo {LIBFAKETIME}) FAKETIME_TIMESTAMP_FILE={FAKETIME_FILE} "
        "FAKETIME_NO_CACHE=1 FAKETIME_DONT_FAKE_MONOTONIC=1 "
    )


def _offset(seconds: float) -> str:
    return f"{seconds:+.3f}s"


def clock_fault(control: Runner, node: str, value: Mapping[str, Any]) -> Fault:
    """Move `node`'s ember clock as the op's value says (bump or strobe)."""
    mode = value.get("mode")
    write = f"> {FAKETIME_FILE}"
    if mode == "bump":
        delta = float(value["delta_s"])
        commands = [f"mkdir -p {STATE_DIR}", HEAL_CLOCK, f"echo {_offset(delta)} {write}"]
        detail: dict[str, Any] = {"node": node, "mode": mode, "delta_s": delta}
    elif mode == "strobe":
        amp, period = abs(float(value["delta_s"])), float(value["period_s"])
        loop = (f"while :; do echo {_offset(amp)} {write}; sleep {period:g}; "
                f"echo {_offset(-amp)} {write}; sleep {period:g}; done")  # fmt: skip
        commands = [
            f"mkdir -p {STATE_DIR}",
            HEAL_CLOCK,
            f"setsid nohup sh -c {shlex.quote(loop)} >/dev/null 2>&1 </dev/null & "
            f"echo $! > {STROBE_PID}",
        ]
        detail = {"node": node, "mode": mode, "delta_s": amp, "period_s": period}
    else:
        raise ClockFaultUnsupportedError(
            f"clock {mode} is not applied on real nodes: libfaketime counts a rate from the "
            "process's start, so switching it on mid-run would jump the clock"
        )
    return apply(control, "clock", {node: commands}, {node: [HEAL_CLOCK]}, detail)
