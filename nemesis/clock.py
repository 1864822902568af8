"""Clock faults on real nodes: one ember process's wall clock moved.

Theory of operation: containers share the host's kernel clock, so a clock
fault has to be injected per process. A run whose nemesis may draw `clock`
gives every ember node `clock_offset_file = CLOCK_OFFSET_FILE`; the node
adds the offset that file holds to every wall-clock read it makes and
follows the file every 10 ms (ember/clock.py), the monotonic clock left
alone as `date -s` or an NTP step would leave it. The fault rewrites the
file on the target node: a `bump` writes one offset; a `strobe` runs a
small shell loop that flips the offset ahead and behind every period; a
`drift` runs a small Python loop that writes the offset a clock running at
`rate` has gained since the fault began, every `DRIFT_STEP_S` (so the clock
drifts in steps of at most 10 ms x |rate - 1|). The loop's pid is in
`STROBE_PID`. Every write goes to a scratch file that is then renamed over
the offset file, so the node never reads it half written. Healing kills the
loop and writes `+0`; `HEAL_CLOCK` does it whoever set it, so `heal_all`
resets every node's clock too. The format is libfaketime's (`+1.234s`):
ember ran under libfaketime before, which cost a busy Docker node most of
its CPU (ember/clock.py says why).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from nemesis.fault import STATE_DIR, Fault, Runner, apply

CLOCK_OFFSET_FILE = f"{STATE_DIR}/clock-offset"
STROBE_PID = f"{STATE_DIR}/clock-strobe.pid"
HEAL_CLOCK = (
    f"if [ -f {STROBE_PID} ]; then kill $(cat {STROBE_PID}) 2>/dev/null; rm -f {STROBE_PID}; fi; "
    f"if [ -f {CLOCK_OFFSET_FILE} ]; then echo +0 > {CLOCK_OFFSET_FILE}.tmp"
    f" && mv -f {CLOCK_OFFSET_FILE}.tmp {CLOCK_OFFSET_FILE}; fi"
)


DRIFT_STEP_S = 0.01
# The drift loop (python3 is in the image; the loop itself is not under
# the node's clock): argv is the offset file, the rate and the step.
_DRIFT_LOOP = (
    "import os, sys, time\n"
    "path, rate, step = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])\n"
    "start = time.monotonic()\n"
    "while True:\n"
    "    with open(path + '.tmp', 'w') as f:\n"
    "        f.write('%+.3fs\\n' % ((rate - 1) * (time.monotonic() - start)))\n"
    "    os.replace(path + '.tmp', path)\n"
    "    time.sleep(step)\n"
)


class ClockFaultUnsupportedError(ValueError):
    """The fault's mode is not one this module knows (see the module doc)."""


def _offset(seconds: float) -> str:
    return f"{seconds:+.3f}s"


def clock_fault(control: Runner, node: str, value: Mapping[str, Any]) -> Fault:
    """Move `node`'s ember clock as the op's value says (bump or strobe)."""
    mode = value.get("mode")
    if mode == "bump":
        delta = float(value["delta_s"])
        commands = [f"mkdir -p {STATE_DIR}", HEAL_CLOCK, _write(_offset(delta))]
        detail: dict[str, Any] = {"node": node, "mode": mode, "delta_s": delta}
    elif mode == "strobe":
        amp, period = abs(float(value["delta_s"])), float(value["period_s"])
        loop = (f"while :; do {_write(_offset(amp))}; sleep {period:g}; "
                f"{_write(_offset(-amp))}; sleep {period:g}; done")  # fmt: skip
        commands = [
            f"mkdir -p {STATE_DIR}",
            HEAL_CLOCK,
            _in_background(f"sh -c {shlex.quote(loop)}"),
        ]
        detail = {"node": node, "mode": mode, "delta_s": amp, "period_s": period}
    elif mode == "drift":
        rate = float(value["rate"])
        loop = (f"python3 -c {shlex.quote(_DRIFT_LOOP)} {CLOCK_OFFSET_FILE} {rate!r} "
                f"{DRIFT_STEP_S!r}")  # fmt: skip
        commands = [f"mkdir -p {STATE_DIR}", HEAL_CLOCK, _in_background(loop)]
        detail = {"node": node, "mode": mode, "rate": rate, "step_s": DRIFT_STEP_S}
    else:
        raise ClockFaultUnsupportedError(f"unknown clock fault mode {mode!r}")
    return apply(control, "clock", {node: commands}, {node: [HEAL_CLOCK]}, detail)


def _write(offset: str) -> str:
    """Replace the offset file whole (the node may read it at any moment)."""
    tmp = f"{CLOCK_OFFSET_FILE}.tmp"
    return f"echo {offset} > {tmp} && mv -f {tmp} {CLOCK_OFFSET_FILE}"


def _in_background(command: str) -> str:
    """Start a loop that outlives this shell; its pid goes where heals look."""
    return f"setsid nohup {command} >/dev/null 2>&1 </dev/null & echo $! > {STROBE_PID}"
