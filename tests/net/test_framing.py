"""Frames survive any split of the byte stream through a peer link; bad lengths and
bodies are FrameErrors."""

from __future__ import annotations

import asyncio
import itertools
import struct

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ember.net import FrameError, Hello, encode_frame
from ember.net.framing import PROTOCOL_VERSION, decode_hello, decode_message
from ember.net.links import Link
from ember.raft.messages import AppendEntries, Entry, Message, RequestVoteResp

entries = st.lists(
    st.builds(
        Entry, term=st.integers(0, 9), index=st.integers(1, 10**9), data=st.binary(max_size=300)
    ),
    max_size=4,
).map(tuple)
messages: st.SearchStrategy[Message] = st.one_of(
    st.builds(
        AppendEntries,
        group=st.text(max_size=8),
        src=st.just("n1"),
        dst=st.just("n2"),
        term=st.integers(0, 2**40),
        prev_index=st.integers(0, 2**40),
        prev_term=st.integers(0, 2**40),
        entries=entries,
        commit=st.integers(0, 2**40),
    ),
    st.builds(
        RequestVoteResp,
        group=st.text(max_size=8),
        src=st.just("n1"),
        dst=st.just("n2"),
        term=st.integers(0, 99),
        granted=st.booleans(),
    ),
)


async def read_all(chunks: list[bytes], max_frame_bytes: int) -> list[Message]:
    """Feed a peer's Hello and then `chunks` to a Link, as a socket's reads would."""
    link = Link(asyncio.get_running_loop(), max_frame_bytes)
    out: list[Message] = []
    opened = False
    hello = encode_frame(Hello(version=PROTOCOL_VERSION, src="n1", dst="n2"))
    for chunk in [hello[:3], hello[3:], *chunks]:
        link.data_received(chunk)
        if not opened and link.hello.done():
            link.open(lambda body: out.append(decode_message(body)))
            opened = True
    link.connection_lost(None)
    reason = await link.ended
    if reason is not None:
        raise reason
    return out


@given(msgs=st.lists(messages, max_size=8), cuts=st.lists(st.integers(0, 10_000), max_size=10))
def test_messages_decode_whatever_the_stream_splits(msgs: list[Message], cuts: list[int]) -> None:
    """Concatenated frames cut into arbitrary chunks decode back to the same messages."""
    stream = b"".join(encode_frame(m) for m in msgs)
    bounds = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    chunks = [stream[a:b] for a, b in itertools.pairwise(bounds)]
    assert asyncio.run(read_all(chunks, 1 << 20)) == msgs


def test_length_over_the_limit_is_a_frame_error() -> None:
    """A header announcing more than the limit raises before reading the body."""
    with pytest.raises(FrameError, match="exceeds the limit of 100"):
        asyncio.run(read_all([struct.pack(">I", 101)], 100))


def test_stream_ending_inside_a_frame_is_an_incomplete_read() -> None:
    """EOF in the middle of a frame is not mistaken for a clean end."""
    frame = encode_frame(RequestVoteResp(group="g", src="a", dst="b", term=1, granted=True))
    with pytest.raises(asyncio.IncompleteReadError):
        asyncio.run(read_all([frame[:-1]], 1 << 20))


def test_undecodable_bodies_are_frame_errors() -> None:
    """Bodies that are not a Message or a valid Hello raise FrameError naming the problem."""
    with pytest.raises(FrameError, match="undecodable message"):
        decode_message(b"\x93\x01\x02\x03")
    with pytest.raises(FrameError, match="undecodable handshake"):
        decode_hello(b"\xc1")
    with pytest.raises(FrameError, match="protocol version 99"):
        decode_hello(msgspec.msgpack.encode(Hello(version=99, src="a", dst="b")))
