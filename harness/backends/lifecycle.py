"""A cluster whose faults and containers are cleaned up however the run ends.

Theory of operation: `managed_cluster(backend)` brings the backend up and
yields its nodes and a `Control`. On the way out, whether the body returned,
raised, or was interrupted by SIGINT (KeyboardInterrupt) or SIGTERM (turned
into `Terminated` here, since Python would otherwise die without unwinding),
it heals every fault and then brings the backend down. Healing runs, on the
nodes, the heal commands of every fault the run's journal still lists
(`nemesis.journal`: killed nodes restarted, failpoints switched off), then
`nemesis.heal.heal_all`; once the backend is down, a journal with nothing
left unhealed gets its `end` record, so no later `faultline clean` has
anything to do for this run. While cleaning up, further SIGINT/SIGTERM are ignored so an impatient
second Ctrl-C cannot leave the cleanup half done.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from harness.backends.base import Backend, NodeHandle
from harness.control import Control, ControlError
from nemesis import journal
from nemesis.heal import heal_all, heal_journaled


class Terminated(BaseException):
    """SIGTERM arrived; raised so that `finally` blocks run."""


def _on_sigterm(_signum: int, _frame: FrameType | None) -> None:
    raise Terminated("terminated by SIGTERM")


@contextmanager
def managed_cluster(
    backend: Backend, *, heal: bool = True, leave_running: bool = False
) -> Iterator[tuple[list[NodeHandle], Control]]:
    """Bring `backend` up; always heal faults and bring it down afterwards
    (unless `leave_running`: then the healed nodes stay up for inspection)."""
    in_main = threading.current_thread() is threading.main_thread()
    previous_int = signal.getsignal(signal.SIGINT)
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if in_main else None
    control: Control | None = None
    try:
        nodes = backend.up()
        control = Control(nodes)
        yield nodes, control
    finally:
        if in_main:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        record = journal.current()
        record = record if record is not None and record.is_open else None
        healed = control is None or not heal
        try:
            if control is not None:
                if heal:
                    healed = _heal(control, record)
                control.close()
            if not leave_running:
                backend.down()
                # Removed nodes carry no fault, healed or not.
                healed = healed or bool(getattr(backend, "removes_nodes", False))
            if record is not None:
                record.close(ended=healed)
        finally:
            if in_main:
                signal.signal(signal.SIGINT, previous_int)
                signal.signal(signal.SIGTERM, previous or signal.SIG_DFL)


def _heal(control: Control, record: journal.Journal | None) -> bool:
    """Heal the journal's faults, then every fault of ours; whether all went."""
    failures = []
    if record is not None and record.path is not None:
        failures = heal_journaled(control, record.path)
    try:
        heal_all(control)
    except ControlError as exc:  # a dead node has nothing left to heal
        failures.append(str(exc))
    for failure in failures:
        print(f"warning: healing failed: {failure}", file=sys.stderr)
    return not failures
