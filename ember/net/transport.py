"""asyncio TCP transport between ember nodes: one connection per node pair.

Theory of operation
-------------------
- **One connection per pair.** Of two nodes, the one with the smaller id
  dials and the other accepts; the connection then carries messages both
  ways and for every Raft group (each `Message` names its group). Dialing
  from one side only means two nodes never race to open two connections.
- **Handshake.** The dialer's first frame is `Hello(src, dst)`; the acceptor
  checks that it is the `dst`, that `src` is a known peer that should dial it,
  and answers with its own `Hello`. An accepted connection from a peer that
  already has one replaces it: the peer restarted and the old one is dead.
- **Sending never blocks.** `send()` encodes the message and appends the
  frame to the destination's bounded queue, dropping the OLDEST frames when
  the queue is over its message or byte bound (counted in `dropped_overflow`):
  during a partition memory stays bounded, and when it heals the freshest
  messages go first. Raft tolerates the loss: it retries from its own state.
  A frame above the size limit is dropped at once (`dropped_oversize`).
  While a connection is up, the queues are flushed once per loop turn: the
  messages one Raft round sends to a peer leave in one write, and no task
  wakes for it (the socket buffers; a full buffer holds the queue back).
- **Receiving is a protocol, not a task.** Each connection is a `Link`
  (ember.net.links): frames are decoded and handed to `on_message` in the
  callback that read them, so a read costs no task wake-up.
- **Reconnect.** The dialer retries with jittered exponential backoff drawn
  from the seeded `random.Random` it was given; a connection that lived at
  least `stable_after_s` resets the backoff.
- **Bad input.** A frame over the size limit, one that does not decode, or a
  message not from the connection's peer closes that connection with a
  logged error; the node itself never stops for a peer's fault. An exception
  from `on_message` is logged and the connection carries on.
- **Dead peers.** TCP_USER_TIMEOUT and keepalive make the kernel drop a
  connection whose peer vanished (partition, power cut) within seconds,
  instead of the default quarter of an hour, so the dialer can reconnect.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from ember.net.framing import PROTOCOL_VERSION, FrameError, Hello, decode_message, encode_frame
from ember.net.links import Link, PeerStats, TransportConfig, tune_socket
from ember.raft.messages import Message, NodeId

log = logging.getLogger(__name__)

Address = tuple[str, int]
# Frames written to the socket per write call, at most (bytes).
_WRITE_CHUNK_BYTES = 1 << 20


@dataclass(slots=True)
class _Peer:
    id: NodeId
    addr: Address | None
    queue: deque[bytes] = field(default_factory=deque)
    stats: PeerStats = field(default_factory=PeerStats)
    link: Link | None = None  # the connection up now, once its handshake is done
    conn: asyncio.Task[None] | None = None
    dialer: asyncio.Task[None] | None = None


class Transport:
    """Sends Raft messages to peers and hands received ones to `on_message`."""

    def __init__(
        self,
        node_id: NodeId,
        listen_addr: Address,
        peers: dict[NodeId, Address],
        on_message: Callable[[Message], None],
        *,
        rng: random.Random,
        config: TransportConfig | None = None,
    ) -> None:
        self.node_id = node_id
        self.listen_addr = listen_addr
        self.on_message = on_message
        self.config = config or TransportConfig()
        self._rng = rng
        self._peers: dict[NodeId, _Peer] = {}
        self._server: asyncio.Server | None = None
        self._tasks: dict[asyncio.Task[None], None] = {}  # ordered, unlike a set of tasks
        self._closing = False
        self._dirty: dict[NodeId, _Peer] = {}  # peers with frames to flush, in send order
        self._flush_due = False
        self.dropped_unknown = 0
        for peer_id, addr in peers.items():
            self.add_peer(peer_id, addr)

    # -- lifecycle ----------------------------------------------------------

    async def start(self) -> None:
        """Listen, then start dialing the peers this node dials."""
        host, port = self.listen_addr
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._on_accept, host, port)
        for peer in self._peers.values():
            self._maybe_dial(peer)

    @property
    def address(self) -> Address:
        """The bound (host, port): the real port when listening on port 0."""
        if self._server is None:
            raise RuntimeError("transport not started")
        host, port = self._server.sockets[0].getsockname()[:2]
        return (host, port)

    async def close(self) -> None:
        """Stop listening, close every connection, end every task this started."""
        self._closing = True
        if self._server is not None:
            self._server.close()
        # Cancel before wait_closed: since Python 3.12 it waits for the
        # handlers of accepted connections, which only end when cancelled.
        while self._tasks:
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        self._peers.clear()

    def add_peer(self, peer_id: NodeId, addr: Address) -> None:
        """Know a peer (or its new address); dial it if this node is the dialer.

        Messages sent to a known peer before `start()` wait in its queue.
        """
        if peer_id == self.node_id:
            return
        peer = self._peers.get(peer_id)
        if peer is None:
            peer = self._peers[peer_id] = _Peer(peer_id, addr)
        peer.addr = addr
        self._maybe_dial(peer)

    def _maybe_dial(self, peer: _Peer) -> None:
        # The smaller id dials: one connection per pair, never two racing.
        if self._server is None or self._closing or peer.dialer is not None:
            return
        if self.node_id < peer.id:
            peer.dialer = self._spawn(self._dial_loop(peer), f"dial {peer.id}")

    def remove_peer(self, peer_id: NodeId) -> None:
        """Forget a peer: close its connection and drop its queue."""
        peer = self._peers.pop(peer_id, None)
        if peer is not None:
            for task in (peer.dialer, peer.conn):
                if task is not None:
                    task.cancel()

    def stats(self) -> dict[NodeId, PeerStats]:
        """Per-peer counters (a live view; copy to keep)."""
        for peer in self._peers.values():
            peer.stats.queued = len(peer.queue)
        return {peer_id: peer.stats for peer_id, peer in self._peers.items()}

    # -- sending ------------------------------------------------------------

    def send(self, msg: Message) -> bool:
        """Queue `msg` for its `dst` without blocking; False if dropped at once."""
        peer = self._peers.get(msg.dst)
        if peer is None:
            self.dropped_unknown += 1
            log.debug(
                "%s: dropping %s for unknown peer %s", self.node_id, type(msg).__name__, msg.dst
            )
            return False
        frame = encode_frame(msg)
        stats = peer.stats
        if len(frame) - 4 > self.config.max_frame_bytes:
            stats.dropped_oversize += 1
            log.error(
                "%s: dropping %s to %s: %d bytes exceeds the frame limit of %d",
                self.node_id,
                type(msg).__name__,
                msg.dst,
                len(frame) - 4,
                self.config.max_frame_bytes,
            )
            return False
        peer.queue.append(frame)
        stats.queued_bytes += len(frame)
        while (
            len(peer.queue) > self.config.max_queue_msgs
            or stats.queued_bytes > self.config.max_queue_bytes
        ):
            stats.queued_bytes -= len(peer.queue.popleft())
            stats.dropped_overflow += 1
        self._want_flush(peer)
        return True

    def _want_flush(self, peer: _Peer) -> None:
        # Once per loop turn, whoever sends: a round's messages to one peer share a write.
        if peer.link is None:
            return  # flushed when a connection comes up
        self._dirty[peer.id] = peer
        if not self._flush_due:
            self._flush_due = True
            asyncio.get_running_loop().call_soon(self._flush_dirty)

    def _flush_dirty(self) -> None:
        self._flush_due = False
        dirty, self._dirty = self._dirty, {}
        for peer in dirty.values():
            self._flush(peer)

    def _flush(self, peer: _Peer) -> None:
        link = peer.link
        while peer.queue and link is not None and link.writable and not link.ended.done():
            chunk: list[bytes] = []
            size = 0
            while peer.queue and size < _WRITE_CHUNK_BYTES:
                frame = peer.queue.popleft()
                chunk.append(frame)
                size += len(frame)
            peer.stats.queued_bytes -= size
            link.write(b"".join(chunk))
            peer.stats.sent += len(chunk)

    # -- receiving ----------------------------------------------------------

    def _on_frame(self, peer: _Peer, body: bytes) -> None:
        msg = decode_message(body)
        if msg.src != peer.id or msg.dst != self.node_id:
            raise FrameError(f"message from {msg.src} to {msg.dst} on the link from {peer.id}")
        peer.stats.received += 1
        try:
            self.on_message(msg)
        except Exception:
            log.exception("%s: on_message failed for %s", self.node_id, type(msg).__name__)

    # -- connections --------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task = asyncio.create_task(coro, name=f"{self.node_id}: {name}")
        self._tasks[task] = None
        task.add_done_callback(self._forget_task)
        return task

    def _forget_task(self, task: asyncio.Task[None]) -> None:
        self._tasks.pop(task, None)

    async def _serve(self, peer: _Peer, link: Link) -> None:
        """Run one established connection until it ends."""
        assert link.transport is not None
        tune_socket(link.transport, self.config.user_timeout_ms)
        peer.stats.connects += 1
        peer.link = link
        link.on_writable = lambda: self._flush(peer)
        try:
            link.open(lambda body: self._on_frame(peer, body))
            self._flush(peer)
            self._note_link_end(peer, await link.ended)
        finally:
            if peer.link is link:
                peer.link = None
            await link.close()

    def _note_link_end(self, peer: _Peer, exc: BaseException | None) -> None:
        if isinstance(exc, FrameError):
            peer.stats.bad_frames += 1
            log.error("%s: closing link with %s: %s", self.node_id, peer.id, exc)
        elif isinstance(exc, OSError | asyncio.IncompleteReadError):
            log.info("%s: link with %s lost: %r", self.node_id, peer.id, exc)
        elif exc is not None:
            log.error("%s: link with %s failed", self.node_id, peer.id, exc_info=exc)

    async def _dial_loop(self, peer: _Peer) -> None:
        attempt = 0
        while not self._closing and peer.addr is not None:
            try:
                link = await self._connect(peer)
            except (OSError, TimeoutError, FrameError, asyncio.IncompleteReadError) as exc:
                attempt += 1
                delay = self._backoff(attempt)
                log.debug(
                    "%s: dial %s failed (%r); retry in %.3fs", self.node_id, peer.id, exc, delay
                )
                await asyncio.sleep(delay)
                continue
            started = time.monotonic()
            await self._serve_current(peer, link)
            if time.monotonic() - started >= self.config.stable_after_s:
                attempt = 0
            else:
                attempt += 1
                await asyncio.sleep(self._backoff(attempt))

    async def _connect(self, peer: _Peer) -> Link:
        assert peer.addr is not None
        host, port = peer.addr
        loop = asyncio.get_running_loop()
        _, link = await asyncio.wait_for(
            loop.create_connection(lambda: Link(loop, self.config.max_frame_bytes), host, port),
            self.config.connect_timeout_s,
        )
        try:
            link.write(encode_frame(Hello(version=PROTOCOL_VERSION, src=self.node_id, dst=peer.id)))
            hello = await asyncio.wait_for(link.hello, self.config.handshake_timeout_s)
            if hello.src != peer.id or hello.dst != self.node_id:
                raise FrameError(f"handshake from {hello.src} to {hello.dst}, expected {peer.id}")
        except BaseException:
            link.end(None)
            raise
        return link

    def _backoff(self, attempt: int) -> float:
        cap = min(self.config.backoff_max_s, self.config.backoff_base_s * 2.0 ** (attempt - 1))
        # "Equal jitter": at least half the step, so retries spread without collapsing to 0.
        return cap * (0.5 + 0.5 * self._rng.random())

    def _on_accept(self) -> Link:
        # The listener's protocol factory: the handshake and the serving run in a task of ours.
        link = Link(asyncio.get_running_loop(), self.config.max_frame_bytes)
        self._spawn(self._serve_accepted(link), "accepted")
        return link

    async def _serve_accepted(self, link: Link) -> None:
        if self._closing:
            link.end(None)
            return
        try:
            peer = await self._accept_handshake(link)
        except BaseException:
            link.end(None)
            raise
        if peer is not None:
            await self._serve_current(peer, link)

    async def _accept_handshake(self, link: Link) -> _Peer | None:
        try:
            hello = await asyncio.wait_for(link.hello, self.config.handshake_timeout_s)
            peer = self._peers.get(hello.src)
            if hello.dst != self.node_id or peer is None or not hello.src < self.node_id:
                raise FrameError(f"unexpected handshake from {hello.src} to {hello.dst}")
            link.write(encode_frame(Hello(version=PROTOCOL_VERSION, src=self.node_id, dst=peer.id)))
        except FrameError as exc:  # a peer of another cluster or version, or garbage
            self._reject(link, logging.ERROR, str(exc))
            link.end(exc)
            return None
        except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
            # The network's doing (a partition, a paused or killed peer), not a bad peer.
            reason = (
                f"no handshake within {self.config.handshake_timeout_s:g} s"
                if isinstance(exc, TimeoutError)
                else f"closed during the handshake ({exc!r})"
            )
            self._reject(link, logging.WARNING, reason)
            link.end(exc)
            return None
        return peer

    def _reject(self, link: Link, level: int, reason: str) -> None:
        remote = link.transport.get_extra_info("peername") if link.transport else None
        log.log(level, "%s: rejecting connection from %s: %s", self.node_id, remote, reason)

    async def _serve_current(self, peer: _Peer, link: Link) -> None:
        """Serve a new connection as the peer's only one, replacing any older one."""
        old = peer.conn
        if old is not None and old is not asyncio.current_task():
            old.cancel()
            # wait() never raises the old task's outcome, yet lets our own cancel through.
            await asyncio.wait([old])
        me = asyncio.current_task()
        peer.conn = me
        try:
            await self._serve(peer, link)
        finally:
            if peer.conn is me:
                peer.conn = None
