"""Budgets end in "unknown" with what was explored; large histories use a pool."""

from __future__ import annotations

import time

import msgspec
import pytest

from checkers.linearizability import MODELS, check
from checkers.linearizability.synth import SynthSpec, synthesize


def _hard_history() -> list:
    """One hot register, many clients, tiny value domain, many unknown ops."""
    spec = SynthSpec(model="cas-register", ops=6000, clients=40, values=3, info_rate=0.3, seed=7)
    return synthesize(spec, MODELS["cas-register"])


def test_time_limit_yields_unknown_with_progress() -> None:
    """A check out of time says "unknown", why, and how far it got."""
    ops = _hard_history()
    start = time.monotonic()
    result = check(ops, "cas-register", time_limit_s=0.01, workers=1)
    assert time.monotonic() - start < 10
    assert result.valid == "unknown"
    part = result.partition_results[0]
    assert part.reason == "time limit reached"
    assert 0 < part.events_done < part.events_total
    assert part.states_explored > 0


def test_memory_limit_yields_unknown() -> None:
    """A check over its RSS limit stops with "memory limit reached"."""
    result = check(_hard_history(), "cas-register", memory_limit_mb=1, workers=1)
    assert result.valid == "unknown"
    assert result.partition_results[0].reason == "memory limit reached"


def test_enough_budget_decides_the_same_history() -> None:
    """The history the budget tests cut short is linearizable given time."""
    assert check(_hard_history(), "cas-register", time_limit_s=120, workers=1).valid is True


@pytest.mark.slow
def test_pool_gives_the_same_verdicts_and_stops_at_a_failure() -> None:
    """With many keys and ops, partitions run in worker processes with the
    same verdicts, and a failing key is reported."""
    spec = SynthSpec(model="kv", ops=20_000, keys=200, clients=20, info_rate=0.01, seed=3)
    ops = synthesize(spec, MODELS["kv"])
    assert check(ops, "kv", workers=2).valid is True
    i = next(i for i, op in enumerate(ops) if op.f == "get" and op.known and op.key == "5")
    ops[i] = msgspec.structs.replace(ops[i], output="never written")
    result = check(ops, "kv", workers=2)
    assert result.valid is False
    assert result.failure is not None
    assert result.failure.key == "5"
    assert result.failure.unplaceable[0].op.id == ops[i].id


def test_pool_tasks_stay_small_and_the_spool_is_removed(monkeypatch, tmp_path) -> None:
    """Every task sent down the pool's pipe pickles far below the pipe's
    buffer, however many ops its chunk holds: Pool.terminate() can lose a race
    with its task handler, which then blocks for ever on a large write (a CI
    run hung there). The chunks' spool directory is gone after the check."""
    import importlib
    import multiprocessing.pool
    import pickle
    import tempfile

    check_module = importlib.import_module("checkers.linearizability.check")

    sizes: list[int] = []
    imap = multiprocessing.pool.Pool.imap_unordered

    def recording_imap(self, func, iterable, chunksize=1):
        tasks = list(iterable)
        sizes.extend(len(pickle.dumps(t)) for t in tasks)
        return imap(self, func, tasks, chunksize)

    monkeypatch.setattr(multiprocessing.pool.Pool, "imap_unordered", recording_imap)
    monkeypatch.setattr(check_module, "_POOL_MIN_OPS", 1_000)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    spec = SynthSpec(model="kv", ops=6_000, keys=4, clients=10, seed=3)
    result = check(synthesize(spec, MODELS["kv"]), "kv", workers=2)
    assert result.valid is True
    assert sizes, "the check did not use the pool"
    assert max(sizes) < 4096
    assert list(tmp_path.iterdir()) == []
