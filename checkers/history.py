"""The history format of DESIGN.md, as types.

A history is a sequence of `Event`s (one JSON object per line of
`history.jsonl`). Checkers work on `Operation`s: an invoke paired with its
completion (`ok`, `fail` or `info`), or an invoke left open at the end of the
history, which counts as `info`.

The types are the shared contract; parsing, validation and pairing follow
them below.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
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


class RawEvent(msgspec.Struct, gc=False):
    """A line of history.jsonl typed as `Event` types it, `value` kept as its
    JSON text (b"" when absent): for readers that only pass the value on, at
    a bulk reader's speed. A line this refuses, `Event` refuses too, so a
    reader can take `Event`'s words for a bad line from a second decoding
    (tests/checkers/test_history.py keeps the two alike). gc=False: it holds
    no containers, and a history decodes millions."""

    index: int
    time: int
    process: Process
    type: EventType
    f: str
    key: str | None = None
    value: msgspec.Raw = msgspec.Raw(b"")
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


# --- parsing, validation and pairing --------------------------------------
#
# Theory of operation: `load_history` streams history.jsonl one line at a
# time through a msgspec decoder typed as `Event`, so a malformed line fails
# with the decoder's own description of the field at fault, and hands each
# event to a `HistoryValidator`. The validator is a per-process state machine:
#
#   idle --invoke--> open --ok/fail--> idle
#                    open --info-----> crashed   (a client never invokes again)
#
# plus two global rules: `index` strictly increases and `time` never goes
# back. Any violation raises `HistoryError` naming the line, so no checker
# ever sees a history that breaks the format. The nemesis process (a string
# process id) may invoke again after `info`: its faults end with `info` by
# Jepsen convention and it is never replaced by a fresh process.


class HistoryError(ValueError):
    """A history line that cannot be decoded or breaks the format's rules."""


_DECODER = msgspec.json.Decoder(Event)


class HistoryValidator:
    """Checks events one at a time against the history format's rules."""

    def __init__(self, source: str = "history") -> None:
        self._source = source
        self._open: dict[Process, tuple[Event, int]] = {}
        self._crashed: dict[Process, int] = {}
        self._last: Event | None = None

    def _fail(self, lineno: int, message: str) -> HistoryError:
        return HistoryError(f"{self._source}: line {lineno}: {message}")

    def feed(self, event: Event, lineno: int) -> None:
        """Accepts `event` (found at `lineno`) or raises HistoryError."""
        last = self._last
        if last is not None:
            if event.index <= last.index:
                raise self._fail(
                    lineno, f"index {event.index} does not increase (previous was {last.index})"
                )
            if event.time < last.time:
                raise self._fail(lineno, f"time {event.time} goes back (previous was {last.time})")
        self._last = event
        proc = event.process
        if event.type == "invoke":
            if proc in self._open:
                prior = self._open[proc][1]
                raise self._fail(
                    lineno,
                    f"process {proc!r} invokes again before its invoke on line {prior} completed",
                )
            if proc in self._crashed and isinstance(proc, int):
                raise self._fail(
                    lineno,
                    f"process {proc!r} invokes after its info on line {self._crashed[proc]}",
                )
            self._open[proc] = (event, lineno)
            return
        opened = self._open.pop(proc, None)
        if opened is None:
            raise self._fail(lineno, f"{event.type} from process {proc!r} without an open invoke")
        if opened[0].f != event.f:
            raise self._fail(
                lineno, f"completion f={event.f!r} does not match invoke f={opened[0].f!r}"
            )
        if event.type == "info":
            self._crashed[proc] = lineno


def iter_history(path: str | os.PathLike[str], notes: list[str] | None = None) -> Iterator[Event]:
    """Streams the validated events of a history.jsonl file.

    Raises HistoryError naming the line of the first malformed or invalid
    event, and OSError if the file cannot be read. Blank lines are skipped.
    A last line that is cut short (no newline, and not a whole event: the
    writer died mid-write) is skipped, with a note appended to `notes`; a
    history whose readers pass no `notes` is refused on it as before.
    """
    source = os.fspath(path)
    validator = HistoryValidator(source)
    with open(source, "rb") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                event = _DECODER.decode(line)
            except msgspec.DecodeError as exc:  # ValidationError is a subclass
                # Only the file's last line can lack its newline.
                if notes is not None and not line.endswith(b"\n"):
                    notes.append(
                        f"{source}: line {lineno} is torn (the writer stopped mid-line: {exc}); "
                        f"checked the {lineno - 1} lines before it"
                    )
                    return
                raise HistoryError(f"{source}: line {lineno}: {exc}") from None
            validator.feed(event, lineno)
            yield event


def load_history(path: str | os.PathLike[str], notes: list[str] | None = None) -> list[Event]:
    """Reads and validates a whole history.jsonl file (see `iter_history`)."""
    return list(iter_history(path, notes))


def validate(events: Iterable[Event], source: str = "history") -> None:
    """Validates in-memory events; line numbers are 1-based positions."""
    validator = HistoryValidator(source)
    for lineno, event in enumerate(events, start=1):
        validator.feed(event, lineno)


def pair(events: Iterable[Event]) -> list[Operation]:
    """Pairs invokes with completions into Operations, in invoke order.

    Expects a validated history. An invoke never completed becomes an `info`
    operation with no completion index or time. Fields the completion carries
    (node, error, revision, group) win over the invoke's.
    """
    open_: dict[Process, Event] = {}
    slots: list[Operation | Event] = []
    where: dict[Process, int] = {}
    for ev in events:
        if ev.type == "invoke":
            open_[ev.process] = ev
            where[ev.process] = len(slots)
            slots.append(ev)
            continue
        inv = open_.pop(ev.process)
        slots[where.pop(ev.process)] = _operation(inv, ev)
    return [s if isinstance(s, Operation) else _operation(s, None) for s in slots]


def _operation(inv: Event, done: Event | None) -> Operation:
    def pick(a: Any, b: Any) -> Any:
        return a if a is not None else b

    if done is None:
        return Operation(
            process=inv.process, f=inv.f, type="info", invoke_index=inv.index,
            invoke_time=inv.time, complete_index=None, complete_time=None, key=inv.key,
            value=inv.value, node=inv.node, error=inv.error, revision=inv.revision,
            group=inv.group,
        )  # fmt: skip
    return Operation(
        process=inv.process, f=inv.f, type=done.type, invoke_index=inv.index,
        invoke_time=inv.time, complete_index=done.index, complete_time=done.time,
        key=pick(inv.key, done.key), value=inv.value, result=done.value,
        node=pick(done.node, inv.node), error=done.error,
        revision=pick(done.revision, inv.revision), group=pick(done.group, inv.group),
    )  # fmt: skip
