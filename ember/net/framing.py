"""Wire framing for ember's node-to-node connections.

A frame is a 4-byte big-endian length followed by that many bytes of
msgpack (msgspec). The first frame each side sends is a `Hello`; every later
frame is one `Message` of the Raft core's union, whose own tag says which
kind it is and whose `group` field says which Raft group it belongs to, so
one connection carries every group. A length above the receiver's limit, or
bytes that do not decode, is a `FrameError`: the connection that carried it
is closed, the node carries on.
"""

from __future__ import annotations

import struct

import msgspec

from ember.raft.messages import Message, NodeId

PROTOCOL_VERSION = 1
DEFAULT_MAX_FRAME_BYTES = 64 << 20
# Before the peer has said who it is, read no more than a Hello needs.
MAX_HELLO_BYTES = 4096
_LENGTH = struct.Struct(">I")


class FrameError(Exception):
    """A peer sent a frame this node will not read; close its connection."""


class Hello(msgspec.Struct, frozen=True, kw_only=True):
    """The handshake: who is talking to whom, in which protocol version."""

    version: int
    src: NodeId
    dst: NodeId


_encoder = msgspec.msgpack.Encoder()
_message_decoder = msgspec.msgpack.Decoder(Message)
_hello_decoder = msgspec.msgpack.Decoder(Hello)


def encode_frame(obj: Message | Hello) -> bytes:
    """Length prefix plus msgpack body of one message or handshake."""
    body = _encoder.encode(obj)
    return _LENGTH.pack(len(body)) + body


class FrameSplitter:
    """Splits a byte stream into frame bodies, many per read.

    A link hands it whatever one socket read returned and gets back every
    complete frame in it. `limit` may change between calls: a link takes
    the handshake with `first` under the small handshake limit, then raises
    the limit for the messages that follow (maybe in the same read).
    """

    __slots__ = ("_buf", "limit")

    def __init__(self, max_frame_bytes: int) -> None:
        self._buf = bytearray()
        self.limit = max_frame_bytes

    @property
    def pending(self) -> int:
        """Bytes held of a frame not yet complete (0 between frames)."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[bytes]:
        """Add `data`; return the bodies of the frames it completed.

        Raises FrameError for a length above the limit (checked as soon as
        the length arrives, before its body is buffered).
        """
        return self._split(data, None)

    def first(self, data: bytes) -> bytes | None:
        """Add `data`; return the first complete frame's body (later bytes stay held)."""
        bodies = self._split(data, 1)
        return bodies[0] if bodies else None

    def _split(self, data: bytes, most: int | None) -> list[bytes]:
        buf = self._buf
        buf += data
        bodies: list[bytes] = []
        pos = 0
        size = _LENGTH.size
        end = len(buf)
        while end - pos >= size and (most is None or len(bodies) < most):
            (length,) = _LENGTH.unpack_from(buf, pos)
            if length > self.limit:
                raise FrameError(f"frame of {length} bytes exceeds the limit of {self.limit}")
            if end - pos - size < length:
                break
            bodies.append(bytes(buf[pos + size : pos + size + length]))
            pos += size + length
        if pos:
            del buf[:pos]
        return bodies


def decode_message(body: bytes) -> Message:
    """Decode a message frame body; FrameError if it is not a valid Message."""
    try:
        msg: Message = _message_decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise FrameError(f"undecodable message frame ({len(body)} bytes): {exc}") from exc
    return msg


def decode_hello(body: bytes) -> Hello:
    """Decode a handshake body; FrameError if it is not a valid Hello."""
    try:
        hello = _hello_decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise FrameError(f"undecodable handshake ({len(body)} bytes): {exc}") from exc
    if hello.version != PROTOCOL_VERSION:
        raise FrameError(f"protocol version {hello.version}, expected {PROTOCOL_VERSION}")
    return hello
