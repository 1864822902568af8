"""Segment files of the write-ahead log: names, record schema, and replay.

Replay is read-only: it rebuilds every group's state from one segment and
reports a torn tail without repairing it, so both the store (which then
truncates the tail) and offline inspection (`python -m ember.storage`) use it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import msgspec

from ember.raft.messages import GroupId
from ember.storage.group_log import GroupLog, GroupOps
from ember.storage.records import HEADER_SIZE, StorageCorruption, TornTail, scan

SEGMENT_PREFIX = "wal-"
SEGMENT_SUFFIX = ".log"


class Record(msgspec.Struct, frozen=True, kw_only=True):
    """One record: a segment's base image (first) or one commit's batch."""

    seq: int
    base: bool
    groups: tuple[GroupOps, ...]


encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Record)


def segment_name(generation: int) -> str:
    """File name of the segment of a generation."""
    return f"{SEGMENT_PREFIX}{generation:016d}{SEGMENT_SUFFIX}"


def list_segments(path: Path) -> list[tuple[int, Path]]:
    """(generation, path) of every segment in a store directory, oldest first."""
    found = []
    for entry in os.scandir(path):
        name = entry.name
        if name.startswith(SEGMENT_PREFIX) and name.endswith(SEGMENT_SUFFIX):
            digits = name[len(SEGMENT_PREFIX) : -len(SEGMENT_SUFFIX)]
            if digits.isdigit():
                found.append((int(digits), Path(entry.path)))
    return sorted(found)


@dataclass(slots=True)
class Replayed:
    """Every group's state after the last whole record of a segment."""

    groups: dict[GroupId, GroupLog]
    seq: int
    base_size: int  # bytes of the base record, framed
    size: int  # bytes of whole records, i.e. where the next record goes
    torn: TornTail | None


def replay_segment(path: Path) -> Replayed:
    """Rebuild the groups from a segment; StorageCorruption if it is damaged."""
    buf = path.read_bytes()
    result = scan(path, buf, tail_allowed=True)
    if not result.records:
        raise StorageCorruption(path, 0, "segment has no valid base record")
    groups: dict[GroupId, GroupLog] = {}
    seq = 0
    for position, (offset, payload) in enumerate(result.records):
        try:
            record = _decoder.decode(payload)
        except msgspec.DecodeError as exc:
            raise StorageCorruption(path, offset, f"undecodable record: {exc}") from exc
        if record.base != (position == 0):
            raise StorageCorruption(path, offset, "base record out of place")
        if position > 0 and record.seq != seq + 1:
            raise StorageCorruption(path, offset, f"sequence {record.seq} follows {seq}")
        seq = record.seq
        for ops in record.groups:
            _replay_ops(groups, path, offset, ops)
    size = result.torn.offset if result.torn is not None else len(buf)
    base_size = HEADER_SIZE + len(result.records[0][1])
    return Replayed(groups, seq, base_size, size, result.torn)


def _replay_ops(groups: dict[GroupId, GroupLog], path: Path, offset: int, ops: GroupOps) -> None:
    if ops.drop:
        groups.pop(ops.group, None)
        return
    state = groups.setdefault(ops.group, GroupLog())
    try:
        state.check(ops)
    except ValueError as exc:
        raise StorageCorruption(path, offset, f"inconsistent record: {exc}") from exc
    state.apply(ops)
