"""managed_cluster: the backend always comes down, whatever ends the body."""

import signal

import pytest

from harness.backends.base import NodeHandle, NoopBackend
from harness.backends.lifecycle import Terminated, managed_cluster


class RecordingBackend(NoopBackend):
    """A node-less backend that records its calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def up(self) -> list[NodeHandle]:
        self.calls.append("up")
        return []

    def down(self) -> None:
        self.calls.append("down")


def test_backend_comes_down_after_an_error_in_the_body() -> None:
    """An exception inside the block still brings the backend down, and propagates."""
    backend = RecordingBackend()
    with pytest.raises(ZeroDivisionError), managed_cluster(backend):
        _ = 1 / 0
    assert backend.calls == ["up", "down"]


def test_sigterm_unwinds_and_restores_the_handlers() -> None:
    """SIGTERM inside the block raises Terminated, runs down, and restores both handlers."""
    backend = RecordingBackend()
    before = signal.getsignal(signal.SIGTERM)
    before_int = signal.getsignal(signal.SIGINT)
    with pytest.raises(Terminated), managed_cluster(backend):
        signal.raise_signal(signal.SIGTERM)
    assert backend.calls == ["up", "down"]
    assert signal.getsignal(signal.SIGTERM) is before
    assert signal.getsignal(signal.SIGINT) is before_int
