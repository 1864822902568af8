"""ember's wall clock: every time-of-day read ember makes goes through `wall()`.

Theory of operation. A clock fault moves one node's wall clock (a bump, a
strobe, a drift: nemesis/clock.py). The nemesis writes the offset to a
file on the node, in libfaketime's format (`+1.234s`, `-5.000s`, `+0`),
renaming a scratch file over it. A node started with `clock_offset_file`
follows that file from its own loop (`follow_offset_file`: a stat every
OFFSET_POLL_S, a read when its inode or mtime changed) and adds the offset
to the wall-clock reads ember makes: the lease expiry written into keys,
the placement driver's clock, the audit log's `wall`. The monotonic clock
is never moved, as a `date -s` or an NTP step would leave it.

Why not libfaketime, which the harness used before: to see a changed offset
at once it must run with FAKETIME_NO_CACHE, and then it reads the file on
every clock read of any kind, in every thread of the process. On a Docker
node that was 40-70% of a busy node's CPU (py-spy), nodes at 60-95% CPU in
a mix run against 5-14% without clock faults, and a quarter of the client
operations. A stat every 10 ms costs nothing by comparison, and an offset
is seen within 10 ms of being written (a drift's steps are 10 ms apart).
What this does not move: wall time read inside libraries (log timestamps,
HTTP Date headers), which ember's logic never reads.

The offset is module state: one process is one node. The simulator runs many
nodes in one process and moves their wall clocks by patching `time.time`
per node (ember/sim/hostos.py); it never gives a node an offset file, so
`wall()` there is the patched `time.time()`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from pathlib import Path

OFFSET_POLL_S = 0.01
log = logging.getLogger(__name__)
_offset_s = 0.0


def wall() -> float:
    """Seconds since the epoch by this node's wall clock (the fault's offset added)."""
    return time.time() + _offset_s


def offset() -> float:
    """The clock fault's offset `wall()` adds now (0 without a fault)."""
    return _offset_s


def parse_offset(text: str) -> float:
    """An offset in libfaketime's relative format (`+1.5s`, `-2s`, `+0`) in
    seconds; ValueError for anything else."""
    body = text.strip()
    if not body or body[0] not in "+-":
        raise ValueError(f"clock offset {text!r} is not +N[s] or -N[s]")
    seconds = float(body.removesuffix("s"))
    if not math.isfinite(seconds):  # float() takes "+inf" and "+nan"
        raise ValueError(f"clock offset {text!r} is not a finite number of seconds")
    return seconds


def read_offset(path: Path) -> float:
    """The offset the file holds now: 0 when there is no file (no fault yet);
    the previous offset, logged, when its text is not an offset."""
    global _offset_s
    try:
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        _offset_s = 0.0
        return _offset_s
    except (OSError, UnicodeDecodeError) as err:
        log.warning("clock offset file %s unreadable (%s): offset stays %+.3fs", path, err,
                    _offset_s)  # fmt: skip
        return _offset_s
    try:
        _offset_s = parse_offset(text)
    except ValueError as err:
        log.warning("%s: %s; offset stays %+.3fs", path, err, _offset_s)
    return _offset_s


def _stamp(path: Path) -> tuple[int, int, int] | None:
    """What tells a rewritten file: None when it cannot be stat'ed. Any OSError
    is caught: one escaping would end the follower and freeze the offset."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


async def follow_offset_file(path: Path) -> None:
    """Keep `wall()`'s offset equal to the file's until cancelled."""
    seen = _stamp(path)
    read_offset(path)
    while True:
        await asyncio.sleep(OFFSET_POLL_S)
        now = _stamp(path)
        if now != seen:
            seen = now
            read_offset(path)
