"""Checksummed record framing for ember's write-ahead log segments.

Theory of operation
-------------------
A segment file is a sequence of records; each record is

    magic (4 bytes, b"EMBR") | length (u32 big-endian) | crc32 (u32 big-endian) | payload

where `crc32` covers the four length bytes and the payload, so a garbled
length is caught as surely as a garbled payload. A record is written with one
`write` and made durable by the caller's fsync; a batch of Raft writes for
every group is one record, so a record is the unit of atomicity.

Reading a segment back, the first record that fails (short header, bad magic,
length past the end of the file, bad checksum) is either

- a *torn tail*: the process or machine died while writing the last record
  (nothing after it was ever acknowledged, because acknowledgement follows
  the fsync of the whole record). Recognised by there being no valid record
  anywhere after the failure. The caller truncates it with a warning.
- *corruption in the middle*: some valid record follows the bad one, so the
  bad bytes once held acknowledged data. Nothing can repair that safely, so
  `StorageCorruption` names the file and byte offset and the node refuses to
  start.

The search for a later valid record only runs on the failure path, and jumps
between occurrences of the magic, so it stays cheap.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

MAGIC = b"EMBR"
_HEADER = struct.Struct(">4sII")
HEADER_SIZE = _HEADER.size
# A record larger than this is taken as a garbled length, not a real record.
MAX_RECORD_BYTES = 1 << 31


class StorageCorruption(Exception):  # noqa: N818 - the name the design and callers use
    """Acknowledged data on disk is damaged; the node must not start on it."""

    def __init__(self, path: Path, offset: int, reason: str) -> None:
        self.path = path
        self.offset = offset
        self.reason = reason
        super().__init__(
            f"{path}: corrupt record at byte offset {offset}: {reason}; refusing to start"
        )


def _checksum(length_bytes: bytes, payload: bytes | memoryview) -> int:
    return zlib.crc32(payload, zlib.crc32(length_bytes))


def frame(payload: bytes) -> bytes:
    """Return `payload` wrapped in a record header (magic, length, checksum)."""
    length_bytes = struct.pack(">I", len(payload))
    return _HEADER.pack(MAGIC, len(payload), _checksum(length_bytes, payload)) + payload


def _check_at(buf: bytes, offset: int) -> str | None:
    """Why the record at `offset` is invalid, or None if it is valid."""
    if len(buf) - offset < HEADER_SIZE:
        return f"short header ({len(buf) - offset} of {HEADER_SIZE} bytes)"
    magic, length, crc = _HEADER.unpack_from(buf, offset)
    if magic != MAGIC:
        return f"bad magic {magic!r}"
    end = offset + HEADER_SIZE + length
    if length > MAX_RECORD_BYTES or end > len(buf):
        return f"length {length} runs past the end of the file ({len(buf)} bytes)"
    payload = memoryview(buf)[offset + HEADER_SIZE : end]
    if _checksum(buf[offset + 4 : offset + 8], payload) != crc:
        return "checksum mismatch"
    return None


def _has_valid_record_after(buf: bytes, offset: int) -> int | None:
    """Offset of the first valid record starting after `offset`, if any."""
    pos = buf.find(MAGIC, offset + 1)
    while pos != -1:
        if _check_at(buf, pos) is None:
            return pos
        pos = buf.find(MAGIC, pos + 1)
    return None


@dataclass(frozen=True, slots=True)
class TornTail:
    """Where the valid records of a segment end, and why the rest is dropped."""

    offset: int
    dropped_bytes: int
    reason: str


@dataclass(slots=True)
class SegmentScan:
    """The records of one segment, and its torn tail if it has one."""

    records: list[tuple[int, bytes]]
    torn: TornTail | None


def scan(path: Path, buf: bytes, *, tail_allowed: bool) -> SegmentScan:
    """Split `buf` (the contents of `path`) into (offset, payload) records.

    Raises StorageCorruption for a bad record that valid data follows, or for
    any bad record when `tail_allowed` is false (a segment that a later one
    superseded was fsynced whole, so it cannot have a torn tail).
    """
    records: list[tuple[int, bytes]] = []
    offset = 0
    while offset < len(buf):
        reason = _check_at(buf, offset)
        if reason is not None:
            later = _has_valid_record_after(buf, offset)
            if later is not None:
                raise StorageCorruption(
                    path,
                    offset,
                    f"{reason}, yet a valid record starts at byte offset {later}, "
                    "so this is damage to acknowledged data, not a torn tail",
                )
            if not tail_allowed:
                raise StorageCorruption(path, offset, reason)
            return SegmentScan(records, TornTail(offset, len(buf) - offset, reason))
        _, length, _ = _HEADER.unpack_from(buf, offset)
        start = offset + HEADER_SIZE
        records.append((offset, buf[start : start + length]))
        offset = start + length
    return SegmentScan(records, None)
