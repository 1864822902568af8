"""Transport on loopback: multiplexing, reconnects, bounded queues, bad frames, shutdown."""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import struct
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import msgspec
import pytest

from ember.net import Hello, Transport, TransportConfig, encode_frame
from ember.net.framing import PROTOCOL_VERSION
from ember.raft.messages import AppendEntries, Entry, Message, RequestVote

FAST = TransportConfig(backoff_base_s=0.01, backoff_max_s=0.1, stable_after_s=0.2)


def run(coro: Coroutine[Any, Any, None]) -> None:
    """Run a test coroutine with an overall time limit."""

    async def bounded() -> None:
        await asyncio.wait_for(coro, 30)

    asyncio.run(bounded())


class Inbox:
    """Collects delivered messages; lets a test await a count instead of sleeping."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self._changed = asyncio.Event()

    def __call__(self, msg: Message) -> None:
        self.messages.append(msg)
        self._changed.set()

    async def wait_for(self, count: int) -> None:
        while len(self.messages) < count:
            self._changed.clear()
            await asyncio.wait_for(self._changed.wait(), 10)


def append(src: str, dst: str, n: int, group: str = "g0") -> AppendEntries:
    return AppendEntries(group=group, src=src, dst=dst, term=1, prev_index=n, prev_term=1)


def free_address() -> tuple[str, int]:
    """A loopback port nothing listens on (picked by the kernel, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return ("127.0.0.1", sock.getsockname()[1])


async def started(
    node: str,
    inbox: Callable[[Message], None],
    addr: tuple[str, int] = ("127.0.0.1", 0),
    config: TransportConfig = FAST,
) -> Transport:
    transport = Transport(node, addr, {}, inbox, rng=random.Random(node), config=config)
    await transport.start()
    return transport


async def until(predicate: Callable[[], bool], poll: Callable[[], Awaitable[None]]) -> None:
    while not predicate():
        await poll()


def test_many_groups_share_one_connection_both_ways() -> None:
    """Messages of 50 groups flow both ways over a single connection, in order."""

    async def scenario() -> None:
        in1, in2 = Inbox(), Inbox()
        t1, t2 = await started("n1", in1), await started("n2", in2)
        t1.add_peer("n2", t2.address)
        t2.add_peer("n1", t1.address)
        sent = [append("n1", "n2", i, group=f"g{i % 50}") for i in range(500)]
        for msg in sent:
            assert t1.send(msg)
        replies = [
            RequestVote(group=f"g{i}", src="n2", dst="n1", term=2, last_index=i, last_term=1)
            for i in range(100)
        ]
        for reply in replies:
            t2.send(reply)
        await in2.wait_for(500)
        await in1.wait_for(100)
        assert in2.messages == sent
        assert in1.messages == replies
        assert t1.stats()["n2"].connects == 1
        assert t2.stats()["n1"].connects == 1
        await t1.close()
        await t2.close()

    run(scenario())


def test_messages_sent_before_start_are_delivered_after() -> None:
    """Peers given at construction queue messages until the transport starts."""

    async def scenario() -> None:
        in2 = Inbox()
        t2 = await started("n2", in2)
        t1 = Transport("n1", ("127.0.0.1", 0), {"n2": t2.address}, Inbox(), rng=random.Random(1))
        assert t1.send(append("n1", "n2", 1))
        await t1.start()
        t2.add_peer("n1", t1.address)
        await in2.wait_for(1)
        await t1.close()
        await t2.close()

    run(scenario())


def test_reconnects_after_the_peer_restarts() -> None:
    """After the acceptor restarts on its port, the dialer reconnects and delivers."""

    async def scenario() -> None:
        in1, in2 = Inbox(), Inbox()
        t1, t2 = await started("n1", in1), await started("n2", in2)
        addr = t2.address
        t1.add_peer("n2", addr)
        t2.add_peer("n1", t1.address)
        t1.send(append("n1", "n2", 1))
        await in2.wait_for(1)
        await t2.close()
        t1.send(append("n1", "n2", 2))  # queued while n2 is down
        in2b = Inbox()
        t2b = await started("n2", in2b, addr)
        t2b.add_peer("n1", t1.address)
        await in2b.wait_for(1)
        t1.send(append("n1", "n2", 3))
        await in2b.wait_for(2)
        assert [m.prev_index for m in in2b.messages] == [2, 3]  # type: ignore[union-attr]
        assert t1.stats()["n2"].connects == 2
        t2b.send(append("n2", "n1", 9))
        await in1.wait_for(1)
        await t1.close()
        await t2b.close()

    run(scenario())


def test_restarted_dialer_replaces_the_old_connection() -> None:
    """When the dialing node restarts, the acceptor serves its new connection."""

    async def scenario() -> None:
        in1, in2 = Inbox(), Inbox()
        t1, t2 = await started("n1", in1), await started("n2", in2)
        t1.add_peer("n2", t2.address)
        t2.add_peer("n1", t1.address)
        t1.send(append("n1", "n2", 1))
        await in2.wait_for(1)
        await t1.close()
        in1b = Inbox()
        t1b = await started("n1", in1b)
        t1b.add_peer("n2", t2.address)
        t1b.send(append("n1", "n2", 2))
        await in2.wait_for(2)
        t2.send(append("n2", "n1", 3))
        await in1b.wait_for(1)
        await t1b.close()
        await t2.close()

    run(scenario())


@pytest.mark.parametrize("node", ["n1", "n3"])
def test_partition_keeps_the_queue_bounded_and_counts_drops(node: str) -> None:
    """With the peer down the queue holds the newest 100; the rest are counted drops."""

    async def scenario() -> None:
        addr = free_address()
        config = TransportConfig(max_queue_msgs=100, backoff_base_s=0.01, backoff_max_s=0.05)
        inbox, peer_inbox = Inbox(), Inbox()
        t = await started(node, inbox, config=config)
        t.add_peer("n2", addr)
        for i in range(1000):
            assert t.send(append(node, "n2", i))
        stats = t.stats()["n2"]
        assert (stats.queued, stats.dropped_overflow) == (100, 900)
        peer = await started("n2", peer_inbox, addr)
        peer.add_peer(node, t.address)
        await peer_inbox.wait_for(100)
        assert [m.prev_index for m in peer_inbox.messages] == list(range(900, 1000))  # type: ignore[union-attr]
        await t.close()
        await peer.close()

    run(scenario())


def test_queue_bytes_bound_drops_oldest() -> None:
    """The byte bound holds even when the message bound is far away."""

    async def scenario() -> None:
        config = TransportConfig(max_queue_bytes=10_000, backoff_base_s=0.01)
        t = await started("n1", Inbox(), config=config)
        t.add_peer("n2", free_address())
        big = (Entry(term=1, index=1, data=b"x" * 1000),)
        for i in range(100):
            t.send(
                AppendEntries(
                    group="g", src="n1", dst="n2", term=1, prev_index=i, prev_term=1, entries=big
                )
            )
        stats = t.stats()["n2"]
        assert stats.queued_bytes <= 10_000
        assert stats.dropped_overflow == 100 - stats.queued > 0
        await t.close()

    run(scenario())


def test_oversized_message_is_dropped_at_send() -> None:
    """A message above the frame limit is refused and counted, not queued."""

    async def scenario() -> None:
        t = await started("n1", Inbox(), config=TransportConfig(max_frame_bytes=200))
        t.add_peer("n2", free_address())
        big = (Entry(term=1, index=1, data=b"x" * 500),)
        msg = AppendEntries(
            group="g", src="n1", dst="n2", term=1, prev_index=0, prev_term=0, entries=big
        )
        assert not t.send(msg)
        assert t.stats()["n2"].dropped_oversize == 1
        assert t.stats()["n2"].queued == 0
        assert not t.send(append("n1", "n9", 1))
        assert t.dropped_unknown == 1
        await t.close()

    run(scenario())


async def raw_link(
    victim: Transport, src: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Open a hand-made connection to `victim` and complete the handshake as `src`."""
    reader, writer = await asyncio.open_connection(*victim.address)
    writer.write(encode_frame(Hello(version=PROTOCOL_VERSION, src=src, dst=victim.node_id)))
    (length,) = struct.unpack(">I", await reader.readexactly(4))
    reply = msgspec.msgpack.decode(await reader.readexactly(length), type=Hello)
    assert reply.src == victim.node_id
    return reader, writer


BAD_FRAMES = {
    "oversized": struct.pack(">I", 1 << 30),
    "garbage": struct.pack(">I", 5) + b"\xc1\xc1\xc1\xc1\xc1",
    "wrong-sender": encode_frame(append("n0", "n2", 1)),
}


@pytest.mark.parametrize("kind", sorted(BAD_FRAMES))
def test_bad_frame_closes_only_that_connection(kind: str, caplog: pytest.LogCaptureFixture) -> None:
    """A bad frame closes its connection with a logged error; the node keeps serving."""

    async def scenario() -> None:
        in2 = Inbox()
        t2 = await started("n2", in2, config=TransportConfig(max_frame_bytes=1 << 20))
        t2.add_peer("n1", free_address())
        reader, writer = await raw_link(t2, "n1")
        writer.write(BAD_FRAMES[kind])
        assert await reader.read() == b""  # the victim closed the connection
        writer.close()
        assert t2.stats()["n1"].bad_frames == 1
        assert "closing link with n1" in caplog.text
        # A well-behaved connection from the same peer still works.
        reader, writer = await raw_link(t2, "n1")
        writer.write(encode_frame(append("n1", "n2", 7)))
        await in2.wait_for(1)
        writer.close()
        await t2.close()

    with caplog.at_level(logging.ERROR):
        run(scenario())


@pytest.mark.parametrize(
    ("hello", "reason"),
    [
        (b"\x00\x00\x00\x03abc", "undecodable handshake"),
        (b"\x01\x00\x00\x00", "exceeds the limit of 4096"),
        (encode_frame(Hello(version=PROTOCOL_VERSION, src="n7", dst="n2")), "from n7"),
        (encode_frame(Hello(version=PROTOCOL_VERSION, src="n3", dst="n2")), "from n3"),
    ],
    ids=["garbage", "huge", "unknown-peer", "peer-that-should-not-dial"],
)
def test_bad_handshake_is_rejected(
    hello: bytes, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A garbage, oversized or unexpected handshake is refused with a logged reason."""

    async def scenario() -> None:
        t2 = await started("n2", Inbox())
        t2.add_peer("n3", free_address())
        reader, writer = await asyncio.open_connection(*t2.address)
        writer.write(hello)
        assert await reader.read() == b""
        writer.close()
        assert "rejecting connection" in caplog.text
        assert reason in caplog.text
        await t2.close()

    with caplog.at_level(logging.ERROR):
        run(scenario())


def test_silent_connection_is_dropped_with_its_reason(caplog: pytest.LogCaptureFixture) -> None:
    """A connection that never says hello (its peer paused, or cut off by a
    partition) is dropped after the handshake timeout, logged as a warning
    that names the timeout: an empty reason once read as an unexplained error."""

    async def scenario() -> None:
        t2 = await started("n2", Inbox(), config=TransportConfig(handshake_timeout_s=0.2))
        t2.add_peer("n1", free_address())
        reader, writer = await asyncio.open_connection(*t2.address)
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
        await t2.close()

    with caplog.at_level(logging.WARNING):
        run(scenario())
    [record] = [r for r in caplog.records if "rejecting connection" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert record.getMessage().endswith(": no handshake within 0.2 s")


def test_failing_handler_does_not_break_the_link(caplog: pytest.LogCaptureFixture) -> None:
    """An exception in on_message is logged; later messages still arrive."""

    async def scenario() -> None:
        inbox = Inbox()

        def flaky(msg: Message) -> None:
            if isinstance(msg, AppendEntries) and msg.prev_index == 0:
                raise RuntimeError("boom")
            inbox(msg)

        t1, t2 = await started("n1", Inbox()), await started("n2", flaky)
        t1.add_peer("n2", t2.address)
        t2.add_peer("n1", t1.address)
        t1.send(append("n1", "n2", 0))
        t1.send(append("n1", "n2", 1))
        await inbox.wait_for(1)
        assert "on_message failed" in caplog.text
        await t1.close()
        await t2.close()

    run(scenario())


def test_close_ends_every_task_and_the_listener() -> None:
    """After close() no task of the transport is left and the port refuses connections."""

    async def scenario() -> None:
        before = asyncio.all_tasks()
        in1, in2 = Inbox(), Inbox()
        t1, t2 = await started("n1", in1), await started("n2", in2)
        t1.add_peer("n2", t2.address)
        t1.add_peer("n3", free_address())  # a dial loop stuck in backoff
        t2.add_peer("n1", t1.address)
        t1.send(append("n1", "n2", 1))
        await in2.wait_for(1)
        addr = t2.address
        await t1.close()
        await t2.close()
        assert asyncio.all_tasks() == before
        with pytest.raises(OSError):
            await asyncio.open_connection(*addr)

    run(scenario())


def test_backoff_is_seeded_jittered_and_capped() -> None:
    """Same seed, same delays; each within [cap/2, cap] of its doubling step."""
    config = TransportConfig(backoff_base_s=0.1, backoff_max_s=1.0)

    def delays(seed: int) -> list[float]:
        t = Transport("n1", ("127.0.0.1", 0), {}, Inbox(), rng=random.Random(seed), config=config)
        return [t._backoff(attempt) for attempt in range(1, 10)]

    assert delays(7) == delays(7) != delays(8)
    for attempt, delay in enumerate(delays(7), start=1):
        cap = min(1.0, 0.1 * 2 ** (attempt - 1))
        assert cap / 2 <= delay <= cap
