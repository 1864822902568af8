"""The history format of DESIGN.md, as types.

A history is a sequence of `Event`s (one JSON object per line of
`history.jsonl`). Checkers work on `Operation`s: an invoke paired with its
completion (`ok`, `fail` or `info`), or an invoke left open at the end of the
history, which counts as `info`.

Parsing, validation and pairing live beside these types (owned by the
history module's implementer); this part is the shared contract.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

EventType = Literal["invoke", "ok", "fail", "info"]
Process = int | str  # an int for clients, "nemesis" for faults


class Event(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One line of history.jsonl."""

    index: int
    time: int  # ns since the run started, monotonic
    process: Process
    type: EventType
    f: str
    key: str | None = None
    value: Any = None
    node: str | None = None
    error: str | None = None
    revision: int | None = None
    group: str | None = None


class Operation(msgspec.Struct, kw_only=True, frozen=True):
    """An invocation and its outcome.

    `type` is the completion's type; an invoke never completed is `info` with
    `complete_index`/`complete_time` None. `value` is the invoke's value;
    `result` the completion's (e.g. what a read returned).
    """

    process: Process
    f: str
    type: EventType
    invoke_index: int
    invoke_time: int
    complete_index: int | None
    complete_time: int | None
    key: str | None = None
    value: Any = None
    result: Any = None
    node: str | None = None
    error: str | None = None
    revision: int | None = None
    group: str | None = None
