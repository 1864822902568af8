"""The read loop's FrameSplitter: any split of the stream gives back the same frames."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ember.net import FrameError, encode_frame
from ember.net.framing import FrameSplitter, decode_message
from ember.raft.messages import Message, RequestVoteResp
from tests.net.test_framing import messages


@given(msgs=st.lists(messages, max_size=8), cuts=st.lists(st.integers(0, 10_000), max_size=10))
def test_frames_come_back_whatever_the_reads_return(msgs: list[Message], cuts: list[int]) -> None:
    """Frames fed in arbitrary chunks come out whole, in order, and nothing is left over."""
    stream = b"".join(encode_frame(m) for m in msgs)
    bounds = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    splitter = FrameSplitter(1 << 20)
    out: list[Message] = []
    for a, b in itertools.pairwise(bounds):
        out.extend(decode_message(body) for body in splitter.feed(stream[a:b]))
    assert out == msgs
    assert splitter.pending == 0


def test_a_partial_frame_stays_pending() -> None:
    """A frame cut short is held (pending > 0), not returned half-read."""
    frame = encode_frame(RequestVoteResp(group="g", src="a", dst="b", term=1, granted=True))
    splitter = FrameSplitter(1 << 20)
    assert splitter.feed(frame + frame[:-1]) == [frame[4:]]
    assert splitter.pending == len(frame) - 1
    assert splitter.feed(frame[-1:]) == [frame[4:]]


def test_length_over_the_limit_raises_before_the_body_arrives() -> None:
    """Only the 4-byte header of an oversized frame is needed to refuse it."""
    with pytest.raises(FrameError, match="exceeds the limit of 100"):
        FrameSplitter(100).feed(struct.pack(">I", 101))
