"""pipeline.extract.collector_paused: no cyclic collection while one run is
derived, and the collector as it was afterwards, whatever the run did."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from pipeline.extract import collector_paused


@pytest.fixture(autouse=True)
def _collector_on() -> Iterator[None]:
    gc.enable()
    yield
    gc.enable()


def test_the_collector_is_off_inside_and_on_again_after() -> None:
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_run_that_raises_leaves_the_collector_on() -> None:
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("a run no reader foresaw")
    assert gc.isenabled()


def test_a_collector_turned_off_by_the_caller_stays_off() -> None:
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()
