"""Settings, counters and socket handling of the transport's peer links."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from dataclasses import dataclass

from ember.net.framing import DEFAULT_MAX_FRAME_BYTES


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


def tune_socket(writer: asyncio.StreamWriter, user_timeout_ms: int) -> None:
    """Set no-delay, and make the kernel drop a link whose peer vanished."""
    sock = writer.get_extra_info("socket")
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


async def close_writer(writer: asyncio.StreamWriter) -> None:
    """Close a stream, waiting a bounded time for the close to finish."""
    writer.close()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(writer.wait_closed(), 1.0)
