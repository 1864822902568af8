"""In-memory TCP for the simulator: listeners, connections, latency, partitions, delays.

Theory of operation
-------------------
Every simulated host has an address on a loopback-range network (so a
connect that ever escaped the simulation would reach nothing but this
machine). A connection is two `WireTransport` ends; bytes written on one
end arrive at the other's protocol after the link's latency, in order (a
direction never delivers before its previous delivery), on the receiving
process's context, so a paused receiver takes them when it resumes.

Faults act as iptables and netem do on a real cluster:

- `cut(src, dst)` drops what src sends to dst. Bytes already in flight on
  a cut direction wait (TCP retransmits) and go through in order when the
  cut heals; if the cut outlasts `user_timeout_s`, both ends are reset, as
  TCP_USER_TIMEOUT does. A connect across a cut waits for the heal (SYNs
  are dropped): the caller's connect timeout decides.
- `delay(src, dst, ms, jitter_ms)` adds a seeded delay to that direction.
- A process that dies resets its connections (the peer sees
  ConnectionResetError) and its listeners vanish: connects are refused.

Hosts talk to themselves without faults. The harness's host is never cut:
on Docker it reaches the nodes over the bridge, which partitions leave alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import math
import socket
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ember.sim.procs import DIALER, current_proc

if TYPE_CHECKING:
    import random

    from ember.sim.loop import SimLoop
    from ember.sim.procs import Proc

NETWORK_PREFIX = "127.77.0."
HARNESS_HOST = NETWORK_PREFIX + "254"
LATENCY_S = (0.0002, 0.0015)  # one way, uniform
USER_TIMEOUT_S = 10.0
DELIVERY_GRID_S = 0.0005
FIRST_EPHEMERAL_PORT = 40_000


class _Link:
    """One direction of one connection: the in-order delivery state."""

    __slots__ = ("held", "last_at", "reset_timer")

    def __init__(self) -> None:
        self.last_at = 0.0
        self.held: deque[tuple[str, bytes]] = deque()  # waiting out a cut
        self.reset_timer: asyncio.TimerHandle | None = None


class WireTransport(asyncio.Transport):
    """One end of a simulated TCP connection."""

    def __init__(self, wire: Wire, proc: Proc, local: tuple[str, int], remote: tuple[str, int]):
        super().__init__()
        self._wire = wire
        self.proc = proc
        self.local, self.remote = local, remote
        self.peer: WireTransport | None = None
        self.out = _Link()  # what this end sends
        self._protocol: asyncio.BaseProtocol | None = None
        self._closing = False
        self._lost = False
        self._reading = True
        self._unread: deque[tuple[str, bytes]] = deque()

    # asyncio.Transport ---------------------------------------------------

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": self.remote, "sockname": self.local}.get(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        assert self._protocol is not None
        return self._protocol

    def is_closing(self) -> bool:
        return self._closing

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or not data:
            return
        self._wire.send(self, "data", bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        if not self._closing:
            self._wire.send(self, "fin", b"")

    def close(self) -> None:
        if not self._closing:
            self._shut("fin")

    def abort(self) -> None:
        if not self._lost:
            self._shut("rst")

    def _shut(self, kind: str) -> None:
        """Send FIN (close) or RST (abort); this end's protocol hears of it next."""
        self._closing = True
        self._wire.send(self, kind, b"")
        self._wire.loop.call_soon(self._connection_lost, None, context=self.proc.ctx)

    def pause_reading(self) -> None:
        self._reading = False

    def resume_reading(self) -> None:
        if self._reading:
            return
        self._reading = True
        self._drain()

    def is_reading(self) -> bool:
        return self._reading

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        """The wire never pushes back: writes are queued without bound."""

    def get_write_buffer_size(self) -> int:
        return 0

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return (0, 0)

    # the wire's side -----------------------------------------------------

    def _receive(self, kind: str, data: bytes) -> None:
        if self._lost or self._protocol is None:
            return
        if not self._reading or self._unread:  # held, or behind what is: keep the order
            self._unread.append((kind, data))
            return
        self._take(kind, data)

    def _drain(self) -> None:
        """What arrived while this end was not reading, in order."""
        while self._unread and self._reading and not self._lost:
            self._take(*self._unread.popleft())

    def _take(self, kind: str, data: bytes) -> None:
        assert self._protocol is not None
        if kind == "data":
            self._protocol.data_received(data)  # type: ignore[attr-defined]
        elif kind == "fin":
            keep_open = self._protocol.eof_received()  # type: ignore[attr-defined]
            if not keep_open:
                self._lose_soon(None)
        else:
            self._lose_soon(ConnectionResetError(errno.ECONNRESET, "Connection reset"))

    def _lose_soon(self, exc: Exception | None) -> None:
        """Closing now; the protocol hears of it on the loop's next round, as
        from asyncio's transports (which schedule connection_lost): a task the
        last data woke runs first. Told at once, aiohttp's request handler
        woke to a connection already torn down and died on its asserts."""
        self._closing = True
        self._wire.loop.call_soon(self._connection_lost, exc, context=self.proc.ctx)

    def _connection_lost(self, exc: Exception | None) -> None:
        if self._lost:
            return
        self._lost = True
        self._closing = True
        self._wire.forget(self)
        if self._protocol is not None:
            self._protocol.connection_lost(exc)


@dataclass(eq=False)
class _Listener:
    proc: Proc
    address: tuple[str, int]
    factory: Callable[[], asyncio.BaseProtocol]
    wire: Wire
    closed: bool = False
    sockets: tuple[()] = ()

    def close(self) -> None:
        self.closed = True
        if self.wire.listeners.get(self.address) is self:
            del self.wire.listeners[self.address]

    async def wait_closed(self) -> None:
        return None

    def is_serving(self) -> bool:
        return not self.closed

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self.wire.loop

    async def start_serving(self) -> None:
        return None

    async def serve_forever(self) -> None:
        await asyncio.Future()


@dataclass(eq=False)
class Wire:
    """Every host, listener, connection and network fault of one simulation."""

    loop: SimLoop
    rng: random.Random
    harness_host: str = HARNESS_HOST
    names: dict[str, str] = field(default_factory=dict)  # host name -> address
    listeners: dict[tuple[str, int], _Listener] = field(default_factory=dict)
    cuts: set[tuple[str, str]] = field(default_factory=set)  # (src address, dst address)
    delays: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)
    open: dict[int, WireTransport] = field(default_factory=dict)
    _ports: dict[str, int] = field(default_factory=dict)
    # Sockets aiohttp connected through `sock_connect`, until `create_connection` takes them.
    _sockets: weakref.WeakKeyDictionary[Any, tuple[str, int]] = field(
        default_factory=weakref.WeakKeyDictionary
    )
    heals: asyncio.Event | None = None
    sent_bytes: int = 0

    # -- hosts -----------------------------------------------------------

    def add_host(self, name: str, index: int) -> str:
        """Give host `name` an address (and a name that resolves to it)."""
        address = f"{NETWORK_PREFIX}{index}"
        self.names[name] = address
        return address

    def getaddrinfo(self, host: Any, port: Any) -> list[tuple[Any, ...]]:
        name = host.decode() if isinstance(host, bytes) else str(host)
        address = self.names.get(name, name)
        if not address.startswith(NETWORK_PREFIX):
            raise socket.gaierror(socket.EAI_NONAME, f"{name}: not a simulated host")
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, port))]

    # -- faults ----------------------------------------------------------

    def cut(self, src: str, dst: str) -> None:
        """Drop what `src` sends to `dst` (addresses or names)."""
        self.cuts.add((self._address(src), self._address(dst)))

    def delay(self, src: str, dst: str, ms: float, jitter_ms: float) -> None:
        """Add `ms` +- `jitter_ms` to what `src` sends to `dst`."""
        self.delays[(self._address(src), self._address(dst))] = (ms / 1000, jitter_ms / 1000)

    def heal(self) -> None:
        """Remove every cut and delay; what waited goes through in order."""
        self.cuts.clear()
        self.delays.clear()
        for end in list(self.open.values()):
            self._flush_held(end)
        if self.heals is not None:
            self.heals.set()
            self.heals = None

    def heal_cuts(self) -> None:
        """Remove the cuts only (a partition's heal; delays stay)."""
        delays = dict(self.delays)
        self.heal()
        self.delays.update(delays)

    def heal_delays(self) -> None:
        """Remove the delays only."""
        self.delays.clear()

    def _address(self, host: str) -> str:
        return self.names.get(host, host)

    def _blocked(self, src: str, dst: str) -> bool:
        return (src, dst) in self.cuts

    # -- listening and connecting ----------------------------------------

    def listen(
        self, factory: Callable[[], asyncio.BaseProtocol], host: Any, port: int
    ) -> _Listener:
        proc = current_proc()
        if proc is None:
            raise OSError(errno.EADDRNOTAVAIL, "listen outside a simulated process")
        if host not in (None, "", "0.0.0.0", proc.host) and self._address(str(host)) != proc.host:
            raise OSError(errno.EADDRNOTAVAIL, f"{host} is not {proc.name}'s address")
        address = (proc.host, port or self._ephemeral(proc.host))
        held = self.listeners.get(address)
        if held is not None and held.proc.alive and not held.closed:
            raise OSError(errno.EADDRINUSE, f"address {address[0]}:{address[1]} already in use")
        listener = _Listener(proc, address, factory, self)
        self.listeners[address] = listener
        return listener

    def _ephemeral(self, host: str) -> int:
        port = self._ports.get(host, FIRST_EPHEMERAL_PORT)
        self._ports[host] = port + 1
        return port

    async def connect_socket(self, sock: Any, address: tuple[str, int]) -> None:
        await self._reach(address)
        self._sockets[sock] = address

    async def _reach(self, address: tuple[str, int]) -> tuple[Proc, _Listener]:
        """Wait out a cut like a SYN would, then find the listener or refuse."""
        proc = current_proc()
        if proc is None:
            raise OSError(errno.ENETUNREACH, "connect outside a simulated process")
        dst = self._address(address[0])
        if not dst.startswith(NETWORK_PREFIX):
            raise OSError(errno.ENETUNREACH, f"{dst} is not on the simulated network")
        while self._blocked(proc.host, dst) or self._blocked(dst, proc.host):
            if self.heals is None:
                self.heals = asyncio.Event()
            await self.heals.wait()
        await asyncio.sleep(2 * self._latency(proc.host, dst))
        listener = self.listeners.get((dst, int(address[1])))
        if listener is None or listener.closed or not listener.proc.alive:
            raise ConnectionRefusedError(errno.ECONNREFUSED, f"connect to {dst}:{address[1]}")
        return proc, listener

    async def create_connection(
        self,
        factory: Callable[[], asyncio.BaseProtocol],
        host: str | None,
        port: int | None,
        sock: Any,
    ) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        if sock is not None:
            address = self._sockets.pop(sock, None)
            sock.close()  # a real socket aiohttp made; the wire carries the bytes
            if address is None:
                raise OSError(errno.ENOTCONN, "socket was not connected through the wire")
        else:
            address = (str(host), int(port or 0))
        proc, listener = await self._reach(address)
        if listener.closed or not listener.proc.alive:
            raise ConnectionRefusedError(errno.ECONNREFUSED, f"connect to {address}")
        client = WireTransport(self, proc, (proc.host, self._ephemeral(proc.host)),
                               listener.address)  # fmt: skip
        server = WireTransport(self, listener.proc, listener.address, client.local)
        client.peer, server.peer = server, client
        self.open[id(client)] = client
        self.open[id(server)] = server
        protocol = factory()
        # Which process dialed: what a killed process leaves unclosed is the
        # kill's doing, not a leak (`SimLoop`'s exception handler). On the
        # protocol itself, as aiohttp's reports of an unclosed connection come
        # from the collector, which has cleared every weak reference to it by then.
        with contextlib.suppress(AttributeError):  # a protocol with slots only
            setattr(protocol, DIALER, proc)
        client.set_protocol(protocol)
        protocol.connection_made(client)
        self.loop.call_soon(self._accept, listener, server, context=listener.proc.ctx)
        return client, protocol

    def _accept(self, listener: _Listener, end: WireTransport) -> None:
        if end._lost:
            return
        protocol = listener.factory()
        end.set_protocol(protocol)
        protocol.connection_made(end)
        # Reading starts on the loop's next round, as asyncio's transports do:
        # after what connection_made scheduled (aiohttp's request handler task).
        self.loop.call_soon(end._drain, context=listener.proc.ctx)

    # -- carrying bytes --------------------------------------------------

    def _latency(self, src: str, dst: str) -> float:
        if src == dst:
            return 0.00005
        base = self.rng.uniform(*LATENCY_S)
        extra = self.delays.get((src, dst))
        if extra is not None:
            base += max(0.0, self.rng.uniform(extra[0] - extra[1], extra[0] + extra[1]))
        return base

    def send(self, end: WireTransport, kind: str, data: bytes) -> None:
        peer = end.peer
        if peer is None:
            return
        self.sent_bytes += len(data)
        link = end.out
        if link.held or self._blocked(end.local[0], peer.local[0]):
            link.held.append((kind, data))
            if link.reset_timer is None:
                link.reset_timer = self.loop.call_later(
                    USER_TIMEOUT_S, self._timed_out, end, context=end.proc.ctx
                )
            return
        self._schedule(end, peer, kind, data)

    def _schedule(self, end: WireTransport, peer: WireTransport, kind: str, data: bytes) -> None:
        link = end.out
        at = max(self.loop.time() + self._latency(end.local[0], peer.local[0]), link.last_at)
        # Arrivals land on a DELIVERY_GRID_S grid, so what a node receives in
        # one grid step is handled in one wake-up of its loop, as a busy node's
        # socket reads batch them on a real network.
        at = math.ceil(at / DELIVERY_GRID_S) * DELIVERY_GRID_S
        link.last_at = at
        self.loop.call_at(at, self._deliver, peer, kind, data, context=peer.proc.ctx)

    def _deliver(self, peer: WireTransport, kind: str, data: bytes) -> None:
        if peer._protocol is None:  # not accepted yet (its process is paused)
            peer._unread.append((kind, data))
            return
        peer._receive(kind, data)

    def _flush_held(self, end: WireTransport) -> None:
        link, peer = end.out, end.peer
        if peer is None or not link.held:
            return
        if self._blocked(end.local[0], peer.local[0]):
            return
        if link.reset_timer is not None:
            link.reset_timer.cancel()
            link.reset_timer = None
        while link.held:
            kind, data = link.held.popleft()
            self._schedule(end, peer, kind, data)

    def _timed_out(self, end: WireTransport) -> None:
        """The cut outlasted TCP_USER_TIMEOUT: both ends give up on the connection."""
        end.out.reset_timer = None
        if not end.out.held:
            return
        end.out.held.clear()
        err = TimeoutError(errno.ETIMEDOUT, "Connection timed out")
        peer = end.peer
        end._closing = True
        end._connection_lost(err)
        if peer is not None and peer.proc.alive:
            # The peer's own retransmits time out too; it learns no sooner than we did.
            self.loop.call_soon(peer._connection_lost, err, context=peer.proc.ctx)

    def forget(self, end: WireTransport) -> None:
        self.open.pop(id(end), None)

    def process_died(self, proc: Proc) -> None:
        """A killed process: its listeners vanish, its peers get a reset."""
        for address, listener in list(self.listeners.items()):
            if listener.proc is proc:
                del self.listeners[address]
        for end in list(self.open.values()):
            if end.proc is not proc:
                continue
            # A dead process writes nothing more: what its `finally` blocks
            # write as the kill closes them must not follow the reset.
            end._lost = end._closing = True
            self.forget(end)
            if end.peer is not None:
                end.out.held.clear()
                self.send(end, "rst", b"")
