"""Settings, counters and the connection protocol of the transport's peer links."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from dataclasses import dataclass

from ember.net.framing import (
    DEFAULT_MAX_FRAME_BYTES,
    MAX_HELLO_BYTES,
    FrameError,
    FrameSplitter,
    Hello,
    decode_hello,
)


@dataclass(slots=True)
class PeerStats:
    """Counters of one peer's link."""

    queued: int = 0
    queued_bytes: int = 0
    sent: int = 0
    received: int = 0
    dropped_overflow: int = 0
    dropped_oversize: int = 0
    connects: int = 0
    bad_frames: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class TransportConfig:
    """Bounds and timings; the defaults suit a LAN cluster."""

    max_queue_msgs: int = 4096
    max_queue_bytes: int = 32 << 20
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    backoff_base_s: float = 0.05
    # Well under one election timeout: a peer that comes up late (a joining
    # replica) must be reachable before a catch-up wait expires.
    backoff_max_s: float = 0.5
    stable_after_s: float = 1.0
    connect_timeout_s: float = 2.0
    handshake_timeout_s: float = 2.0
    user_timeout_ms: int = 10_000


def tune_socket(transport: asyncio.BaseTransport, user_timeout_ms: int) -> None:
    """Set no-delay, and make the kernel drop a link whose peer vanished."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return
    # Raft messages are small and latency-bound: no Nagle delay.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    if hasattr(socket, "TCP_USER_TIMEOUT"):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, user_timeout_ms)
    if hasattr(socket, "TCP_KEEPIDLE"):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, max(1, user_timeout_ms // 2000))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)


class Link(asyncio.Protocol):
    """One connection to a peer, as an asyncio protocol: a handshake, then frames.

    The first frame each side receives is the peer's `Hello` (`hello`
    resolves with it, under the small handshake limit). Bytes after it are
    held until `open` says where the bodies go; from then on every complete
    frame is handed over in the same callback that read it, with no task in
    between: a read costs no task wake-up, which for a node's many small
    Raft messages is most of the receive path. `ended` resolves once the
    link is over, with the reason (None for a clean end): the connection
    was lost, the peer closed it mid-frame, or a frame was bad (then this
    side closes it). `writable` is False while the socket's buffer is full
    (asyncio's pause_writing); `on_writable` is called when it drains.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, max_frame_bytes: int) -> None:
        self.transport: asyncio.Transport | None = None
        self.hello: asyncio.Future[Hello] = loop.create_future()
        self.ended: asyncio.Future[BaseException | None] = loop.create_future()
        self.lost: asyncio.Future[None] = loop.create_future()  # the socket is closed
        self.writable = True
        self.on_writable: Callable[[], None] | None = None
        self._splitter = FrameSplitter(MAX_HELLO_BYTES)
        self._max_frame_bytes = max_frame_bytes
        self._held = bytearray()  # bytes after the handshake, before `open`
        self._on_body: Callable[[bytes], None] | None = None

    def open(self, on_body: Callable[[bytes], None]) -> None:
        """Hand every frame after the handshake (held ones first) to `on_body`.

        `on_body` raising FrameError ends the link with it; anything else
        it raises is the caller's to catch.
        """
        self._on_body = on_body
        self._splitter.limit = self._max_frame_bytes
        held, self._held = bytes(self._held), bytearray()
        self._receive(held)

    def end(self, reason: BaseException | None) -> None:
        """Close the connection (flushing what was written) and record why."""
        if not self.ended.done():
            self.ended.set_result(reason)
        if self.transport is not None:
            self.transport.close()

    async def close(self) -> None:
        """End the link and wait (a bounded time) until its socket is closed."""
        self.end(None)
        if self.transport is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.lost), 1.0)

    def write(self, data: bytes) -> None:
        """Send `data` (asyncio buffers it; watch `writable`)."""
        assert self.transport is not None
        self.transport.write(data)

    # -- asyncio's callbacks --------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.ended.done():
            return
        if self._on_body is not None:
            self._receive(data)
            return
        if self.hello.done():
            self._held += data
            return
        try:
            body = self._splitter.first(data)
            if body is not None:
                self.hello.set_result(decode_hello(body))
        except FrameError as exc:
            self._refuse_hello(exc)
            self.end(exc)

    def _receive(self, data: bytes) -> None:
        assert self._on_body is not None
        try:
            for body in self._splitter.feed(data):
                self._on_body(body)
                if self.ended.done():
                    return
        except FrameError as exc:
            self.end(exc)

    def eof_received(self) -> bool:
        return False  # the transport closes; connection_lost says how it ended

    def connection_lost(self, exc: Exception | None) -> None:
        self.writable = False
        if exc is None and (self._splitter.pending or self._held):
            exc = asyncio.IncompleteReadError(b"", None)  # the peer stopped mid-frame
        self._refuse_hello(exc or ConnectionResetError("connection closed before the handshake"))
        if not self.ended.done():
            self.ended.set_result(exc)
        if not self.lost.done():
            self.lost.set_result(None)

    def _refuse_hello(self, exc: BaseException) -> None:
        if not self.hello.done():
            self.hello.set_exception(exc)
            self.hello.exception()  # whoever awaits it sees it; nobody may

    def pause_writing(self) -> None:
        self.writable = False

    def resume_writing(self) -> None:
        self.writable = True
        if self.on_writable is not None:
            self.on_writable()
