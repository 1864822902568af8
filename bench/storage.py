"""Benchmark durable-log candidates for ember's storage: appends/s and fsyncs/s.

Usage: python bench/storage.py [--seconds S] [--repeats N] [--dir DIR]
                              [--candidates ember,sqlite,lmdb] [--no-sync]

Each candidate makes every batch durable before the next (one fsync per
batch, as one Raft Ready per node). A batch of B entries is spread over
`--groups` groups the way a node batches many groups' Readies, and carries a
hard-state write per touched group. Cells run for `--seconds` each; the table
reports entries appended per second and durable commits (fsyncs) per second
for batch sizes 1, 16 and 128. `--no-sync` turns fsync off in every
candidate to show CPU cost per commit, which matters on a 2-core node where
the same cores run Raft, the transport and the state machine.

Candidates:
- ember:  ember.storage.NodeStorage, our checksummed write-ahead log
- sqlite: SQLite 3 in WAL mode with synchronous=FULL, one transaction per batch
- lmdb:   LMDB with sync on, one write transaction per batch (needs `lmdb`)
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import msgspec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ember.raft.messages import Entry, HardState  # noqa: E402 - after the path fix above
from ember.storage import NodeStorage  # noqa: E402

BATCH_SIZES = (1, 16, 128)
ENTRY_BYTES = 128
_enc = msgspec.msgpack.Encoder()


class Candidate(Protocol):
    def write(self, batch: dict[str, list[Entry]], hard: dict[str, HardState]) -> None: ...
    def close(self) -> None: ...


class EmberCandidate:
    def __init__(self, path: Path, sync: bool) -> None:
        self.store = NodeStorage(path)
        if not sync:
            # CPU-cost mode only: NodeStorage has no unsafe option, so the
            # bench swaps the syscall out for this process.
            os.fdatasync = lambda fd: None

    def write(self, batch: dict[str, list[Entry]], hard: dict[str, HardState]) -> None:
        for group, entries in batch.items():
            self.store.group(group).save(entries, hard[group])
        self.store.commit()

    def close(self) -> None:
        self.store.close()


class SqliteCandidate:
    def __init__(self, path: Path, sync: bool) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(path / "raft.db", isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(f"PRAGMA synchronous={'FULL' if sync else 'OFF'}")
        self.db.execute(
            "CREATE TABLE log (grp TEXT, idx INTEGER, term INTEGER, body BLOB,"
            " PRIMARY KEY (grp, idx)) WITHOUT ROWID"
        )
        self.db.execute("CREATE TABLE hard (grp TEXT PRIMARY KEY, body BLOB) WITHOUT ROWID")

    def write(self, batch: dict[str, list[Entry]], hard: dict[str, HardState]) -> None:
        db = self.db
        db.execute("BEGIN")
        for group, entries in batch.items():
            # Raft truncation: an entry at an existing index replaces the tail.
            db.execute("DELETE FROM log WHERE grp = ? AND idx >= ?", (group, entries[0].index))
            db.executemany(
                "INSERT INTO log VALUES (?, ?, ?, ?)",
                [(group, e.index, e.term, _enc.encode(e)) for e in entries],
            )
            db.execute(
                "INSERT OR REPLACE INTO hard VALUES (?, ?)", (group, _enc.encode(hard[group]))
            )
        db.execute("COMMIT")

    def close(self) -> None:
        self.db.close()


class LmdbCandidate:
    def __init__(self, path: Path, sync: bool) -> None:
        import lmdb  # type: ignore[import-not-found, unused-ignore]  # optional, untyped

        self.env: Any = lmdb.open(str(path), map_size=4 << 30, sync=sync, metasync=sync)

    def write(self, batch: dict[str, list[Entry]], hard: dict[str, HardState]) -> None:
        with self.env.begin(write=True) as txn:
            for group, entries in batch.items():
                prefix = group.encode() + b"/"
                for e in entries:
                    txn.put(prefix + e.index.to_bytes(8, "big"), _enc.encode(e))
                txn.put(b"hard/" + group.encode(), _enc.encode(hard[group]))

    def close(self) -> None:
        self.env.close()


CANDIDATES: dict[str, Callable[[Path, bool], Candidate]] = {
    "ember": EmberCandidate,
    "sqlite": SqliteCandidate,
    "lmdb": LmdbCandidate,
}


def run_cell(
    make: Callable[[Path, bool], Candidate],
    path: Path,
    batch_size: int,
    groups: int,
    seconds: float,
    sync: bool = True,
) -> tuple[float, float]:
    """Append batches for `seconds`; return (entries/s, fsyncs/s)."""
    store = make(path, sync)
    next_index = dict.fromkeys((f"g{i}" for i in range(groups)), 1)
    names = list(next_index)
    body = b"x" * ENTRY_BYTES
    appended = commits = 0
    start = time.perf_counter()
    try:
        while time.perf_counter() - start < seconds:
            batch: dict[str, list[Entry]] = {}
            for n in range(batch_size):
                group = names[(commits + n) % groups]
                index = next_index[group]
                next_index[group] = index + 1
                batch.setdefault(group, []).append(Entry(term=1, index=index, data=body))
            hard = {g: HardState(term=1, vote="n1", commit=next_index[g] - 1) for g in batch}
            store.write(batch, hard)
            appended += batch_size
            commits += 1
    finally:
        store.close()
    elapsed = time.perf_counter() - start
    return appended / elapsed, commits / elapsed


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="time per cell")
    parser.add_argument("--repeats", type=int, default=3, help="runs per cell (median kept)")
    parser.add_argument("--groups", type=int, default=8, help="groups a batch spreads over")
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: tmp)")
    parser.add_argument("--candidates", default="ember,sqlite,lmdb")
    parser.add_argument(
        "--no-sync",
        action="store_true",
        help="measure CPU cost per commit with fsync off (NOT durable; run separately)",
    )
    args = parser.parse_args(argv)
    unknown = set(args.candidates.split(",")) - set(CANDIDATES)
    if unknown:
        parser.error(f"unknown candidate(s) {sorted(unknown)}; choose from {sorted(CANDIDATES)}")
    if args.seconds <= 0 or args.groups <= 0 or args.repeats <= 0:
        parser.error("--seconds, --groups and --repeats must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run every candidate at every batch size and print one table of medians."""
    args = parse_args(argv)
    names = args.candidates.split(",")
    root = Path(tempfile.mkdtemp(prefix="ember-bench-", dir=args.dir))
    print(
        f"dir={root} entry={ENTRY_BYTES}B groups={args.groups} "
        f"seconds/cell={args.seconds} repeats={args.repeats} (median shown)"
    )
    sync_column = "commits/s (fsync OFF: CPU cost only)" if args.no_sync else "fsyncs/s"
    print(f"{'candidate':<10}{'batch':>6}{'appends/s':>12}  {sync_column}")
    try:
        for batch_size in BATCH_SIZES:
            cells: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
            # Interleave candidates so a burst of load from elsewhere on the
            # machine hits them all alike rather than one.
            for repeat in range(args.repeats):
                for name in list(cells):
                    path = root / f"{name}-{batch_size}-{repeat}"
                    try:
                        cells[name].append(
                            run_cell(
                                CANDIDATES[name],
                                path,
                                batch_size,
                                args.groups,
                                args.seconds,
                                sync=not args.no_sync,
                            )
                        )
                    except ImportError as exc:
                        print(f"{name:<10} skipped: {exc}")
                        del cells[name]
                        names.remove(name)
                    shutil.rmtree(path, ignore_errors=True)
            for name, results in cells.items():
                appends = statistics.median(r[0] for r in results)
                fsyncs = statistics.median(r[1] for r in results)
                print(f"{name:<10}{batch_size:>6}{appends:>12,.0f}  {fsyncs:>9,.0f}", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
