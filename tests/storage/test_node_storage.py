"""NodeStorage: durability across reopen, one fsync per commit, torn tails, corruption."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ember.raft.messages import ConfState, Entry, HardState, Snapshot, SnapshotMeta
from ember.storage import NodeStorage, PersistedState, StorageCorruption

GROUPS = ("g1", "g2", "g3")


def entry(index: int, term: int = 1) -> Entry:
    return Entry(term=term, index=index, data=f"value-{index}-{term}".encode())


def snap(index: int, term: int) -> Snapshot:
    meta = SnapshotMeta(index=index, term=term, conf=ConfState(peers=("n1", "n2", "n3")))
    return Snapshot(meta=meta, data=f"state@{index}".encode())


def states(store: NodeStorage) -> dict[str, PersistedState]:
    return {g: store.group(g).load() for g in store.groups()}


def segment(path: Path) -> Path:
    (found,) = sorted(path.glob("wal-*.log"))
    return found


def test_committed_writes_survive_reopen(tmp_path: Path) -> None:
    """Entries, hard state and snapshot committed before close load back equal."""
    with NodeStorage(tmp_path) as store:
        g = store.group("g1")
        g.save([entry(i) for i in range(1, 6)], HardState(term=1, vote="n2", commit=3))
        g.save(snapshot=snap(2, 1))
        store.commit()
        before = g.load()
    with NodeStorage(tmp_path) as store:
        after = store.group("g1").load()
    assert after == before
    assert [e.index for e in after.entries] == [3, 4, 5]
    assert after.hard_state == HardState(term=1, vote="n2", commit=3)


def test_uncommitted_writes_are_not_durable(tmp_path: Path) -> None:
    """Writes staged but never committed are gone after reopen."""
    with NodeStorage(tmp_path) as store:
        store.group("g1").save([entry(1)])
        store.commit()
        store.group("g1").save([entry(2)])
    with NodeStorage(tmp_path) as store:
        assert [e.index for e in store.group("g1").load().entries] == [1]


def test_one_fsync_per_commit_across_groups(tmp_path: Path) -> None:
    """A commit covering many groups costs one record and one fsync."""
    with NodeStorage(tmp_path) as store:
        fsyncs = store.stats.fsyncs
        for g in GROUPS:
            store.group(g).save([entry(1)], HardState(term=1))
        assert store.commit() == len(GROUPS)
        assert store.stats.fsyncs == fsyncs + 1
        assert store.commit() == 0
        assert store.stats.fsyncs == fsyncs + 1


def test_removed_group_is_forgotten(tmp_path: Path) -> None:
    """remove_group drops a group's state durably."""
    with NodeStorage(tmp_path) as store:
        store.group("g1").save([entry(1)])
        store.group("g2").save([entry(1)])
        store.commit()
        store.remove_group("g1")
        store.commit()
    with NodeStorage(tmp_path) as store:
        assert store.groups() == ["g2"]


def test_second_open_of_the_same_directory_is_refused(tmp_path: Path) -> None:
    """Two processes (or handles) never write one store at once."""
    with NodeStorage(tmp_path), pytest.raises(BlockingIOError, match="already open"):
        NodeStorage(tmp_path)


def test_rotation_keeps_state_and_bounds_disk_use(tmp_path: Path) -> None:
    """Rewriting the log into a new segment keeps the state; old segments go."""
    with NodeStorage(tmp_path, segment_bytes=2048) as store:
        for i in range(1, 400):
            store.group(GROUPS[i % 3]).save([entry(i // 3 + 1)] if i % 3 else [], HardState(term=i))
            if i % 100 == 0:
                g = store.group("g2")  # the group that receives entries when i % 3 == 1
                g.save(snapshot=snap(g.last_index - 5, 1))
            store.commit()
        assert store.stats.rotations > 3
        before = states(store)
    assert len(list(tmp_path.glob("wal-*"))) == 1
    assert segment(tmp_path).stat().st_size < 8 * 2048
    with NodeStorage(tmp_path) as store:
        assert states(store) == before


def test_leftover_temporary_segment_is_ignored(tmp_path: Path) -> None:
    """A rotation that died before its rename leaves the old segment in charge."""
    with NodeStorage(tmp_path) as store:
        store.group("g1").save([entry(1)])
        store.commit()
    (tmp_path / "wal-0000000000000099.log.tmp").write_bytes(b"half a base record")
    with NodeStorage(tmp_path) as store:
        assert [e.index for e in store.group("g1").load().entries] == [1]
    assert not list(tmp_path.glob("*.tmp"))


# -- torn tails and corruption -------------------------------------------------


def write_commits(path: Path, count: int) -> tuple[list[int], list[dict[str, PersistedState]]]:
    """Commit `count` batches; return the file size and the state after each."""
    sizes, history = [], []
    with NodeStorage(path) as store:
        sizes.append(segment(path).stat().st_size)
        history.append(states(store))
        for i in range(1, count + 1):
            for g in GROUPS[: 1 + i % 3]:
                nxt = store.group(g).last_index + 1
                store.group(g).save([entry(nxt), entry(nxt + 1)], HardState(term=1, commit=i))
            store.commit()
            sizes.append(segment(path).stat().st_size)
            history.append(states(store))
    return sizes, history


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut_fraction=st.floats(min_value=0.0, max_value=1.0))
def test_truncation_anywhere_recovers_the_last_whole_commit(
    tmp_path_factory: pytest.TempPathFactory, cut_fraction: float
) -> None:
    """Cutting the segment at any byte after its base yields the last complete commit."""
    path = tmp_path_factory.mktemp("torn")
    sizes, history = write_commits(path, 6)
    cut = sizes[0] + round(cut_fraction * (sizes[-1] - sizes[0]))
    os.truncate(segment(path), cut)
    whole = max(i for i, size in enumerate(sizes) if size <= cut)
    with NodeStorage(path) as store:
        assert states(store) == history[whole]
        assert store.stats.torn_bytes_dropped == cut - sizes[whole]
    assert segment(path).stat().st_size == sizes[whole]


def test_garbled_last_record_is_dropped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A flipped byte in the last record drops that record and logs a warning."""
    sizes, history = write_commits(tmp_path, 5)
    seg = segment(tmp_path)
    data = bytearray(seg.read_bytes())
    data[sizes[-2] + (sizes[-1] - sizes[-2]) // 2] ^= 0x40
    seg.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING), NodeStorage(tmp_path) as store:
        assert states(store) == history[-2]
    assert f"torn tail at byte offset {sizes[-2]}" in caplog.text
    assert str(seg) in caplog.text


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(record=st.integers(min_value=0, max_value=4), where=st.floats(0.0, 0.999))
def test_corruption_before_the_tail_refuses_to_start(
    tmp_path_factory: pytest.TempPathFactory, record: int, where: float
) -> None:
    """A flipped byte in any record but the last raises naming the file and offset."""
    path = tmp_path_factory.mktemp("corrupt")
    sizes, _ = write_commits(path, 6)
    start = 0 if record == 0 else sizes[record - 1]
    end = sizes[record]
    seg = segment(path)
    data = bytearray(seg.read_bytes())
    data[start + int(where * (end - start))] ^= 0x01
    seg.write_bytes(bytes(data))
    with pytest.raises(StorageCorruption) as raised:
        NodeStorage(path)
    assert raised.value.offset == start
    assert f"{seg}: corrupt record at byte offset {start}" in str(raised.value)
    # Refusing to start must not have "repaired" anything.
    assert seg.read_bytes() == bytes(data)


# -- model-based: random Raft writes, commits and reopens ----------------------

write = st.tuples(
    st.sampled_from(GROUPS),
    st.sampled_from(["append", "overwrite", "hard_state", "compact", "install", "commit"]),
    st.integers(1, 4),
)


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.one_of(write, st.just(("", "reopen", 0))), max_size=40))
def test_reopen_always_loads_the_last_committed_state(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, str, int]]
) -> None:
    """After any mix of writes, commits and reopens, reopen loads what was committed."""
    path = tmp_path_factory.mktemp("model")
    store = NodeStorage(path, segment_bytes=1024)
    committed = states(store)
    term = 1
    try:
        for group, action, n in steps:
            g = store.group(group)
            last, first = g.last_index, g.load().snapshot
            floor = first.meta.index if first else 0
            if action == "append":
                g.save([entry(i, term) for i in range(last + 1, last + 1 + n)])
            elif action == "overwrite" and last > floor:
                term += 1
                start = max(floor + 1, last - n + 1)
                g.save([entry(i, term) for i in range(start, start + n)])
            elif action == "hard_state":
                g.save(hard_state=HardState(term=term, vote=group, commit=last))
            elif action == "compact" and last > floor:
                at = max(floor + 1, last - n)
                g.save(snapshot=snap(at, g.load().entries[at - floor - 1].term))
            elif action == "install":
                term += 1
                g.save(snapshot=snap(last + n, term))
            elif action == "commit":
                store.commit()
                committed = states(store)
            elif action == "reopen":
                store.close()
                store = NodeStorage(path, segment_bytes=1024)
                assert states(store) == committed
    finally:
        store.close()


def test_commit_returns_only_after_the_record_is_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each commit writes its whole record and fdatasyncs it before returning."""
    calls: list[str] = []
    real_write, real_sync = os.write, os.fdatasync

    def write(fd: int, data: bytes) -> int:
        calls.append("write")
        return real_write(fd, data)

    def fdatasync(fd: int) -> None:
        calls.append("sync")
        real_sync(fd)

    with NodeStorage(tmp_path) as store:
        monkeypatch.setattr(os, "write", write)
        monkeypatch.setattr(os, "fdatasync", fdatasync)
        for i in range(1, 4):
            store.group("g1").save([entry(i)])
            store.commit()
            assert calls[-2:] == ["write", "sync"]
            calls.append("acked")
    assert calls == ["write", "sync", "acked"] * 3


def test_failed_sync_poisons_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After an fsync error every call refuses; reopening recovers from disk."""
    with NodeStorage(tmp_path) as store:
        store.group("g1").save([entry(1)])
        store.commit()

        def failing(fd: int) -> None:
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(os, "fdatasync", failing)
        store.group("g1").save([entry(2)])
        with pytest.raises(OSError):
            store.commit()
        monkeypatch.undo()
        with pytest.raises(RuntimeError, match="unusable after an I/O error"):
            store.group("g1").save([entry(3)])
    with NodeStorage(tmp_path) as store:
        assert store.group("g1").last_index in (1, 2)


def test_superseded_segment_left_by_a_crash_is_deleted(tmp_path: Path) -> None:
    """If a crash kept the old segment beside its replacement, the newest wins."""
    with NodeStorage(tmp_path, segment_bytes=1) as store:
        store.group("g1").save([entry(1)])
        store.commit()
        old = segment(tmp_path)
        stale = old.read_bytes()
        rotations = store.stats.rotations
        while store.stats.rotations == rotations:
            store.group("g1").save([entry(store.group("g1").last_index + 1)])
            store.commit()
        before = states(store)
    assert not old.exists()
    old.write_bytes(stale)
    with NodeStorage(tmp_path) as store:
        assert states(store) == before
    assert not old.exists()


def test_save_during_commit_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A save() racing a commit() in another thread raises instead of slipping in."""
    with NodeStorage(tmp_path) as store:
        seen: list[BaseException] = []
        real_sync = os.fdatasync

        def sync_and_race(fd: int) -> None:
            try:
                store.group("g1").save([entry(2)])
            except RuntimeError as exc:
                seen.append(exc)
            real_sync(fd)

        monkeypatch.setattr(os, "fdatasync", sync_and_race)
        store.group("g1").save([entry(1)])
        store.commit()
        assert len(seen) == 1
        assert "while commit() runs" in str(seen[0])
        assert store.group("g1").last_index == 1
