"""Child process of the kill -9 test: append, commit, then report acknowledgements.

Usage: python -m tests.storage.crash_child DATA_DIR SEED

Each loop stages writes for a few groups, commits (one fsync), and only then
prints `ack GROUP INDEX` for each group's new last index: a line on stdout is
a promise that the entry is durable. Every few commits a group compacts its
log behind a snapshot so crashes also land during snapshot writes and segment
rotations (the segment size is tiny on purpose).
"""

from __future__ import annotations

import random
import sys

from ember.raft.messages import ConfState, Entry, HardState, Snapshot, SnapshotMeta
from ember.storage import NodeStorage

GROUPS = tuple(f"g{i}" for i in range(5))
SEGMENT_BYTES = 16 << 10


def payload(group: str, index: int) -> bytes:
    """The data every entry must hold: derived from its group and index alone."""
    return f"{group}/{index}/".encode() * (1 + index % 7)


def main() -> None:
    data_dir, seed = sys.argv[1], int(sys.argv[2])
    rng = random.Random(seed)
    store = NodeStorage(data_dir, segment_bytes=SEGMENT_BYTES)
    print("ready", flush=True)
    commits = 0
    while True:
        touched = rng.sample(GROUPS, rng.randint(1, 3))
        for group in touched:
            g = store.group(group)
            first = g.last_index + 1
            batch = [
                Entry(term=1, index=i, data=payload(group, i))
                for i in range(first, first + rng.randint(1, 8))
            ]
            g.save(batch, HardState(term=1, vote="n1", commit=batch[-1].index))
            if rng.random() < 0.05:
                at = batch[-1].index - rng.randint(0, len(batch) - 1)
                meta = SnapshotMeta(index=at, term=1, conf=ConfState(peers=("n1",)))
                g.save(snapshot=Snapshot(meta=meta, data=payload(group, at)))
        store.commit()
        commits += 1
        lines = "".join(f"ack {g} {store.group(g).last_index}\n" for g in touched)
        sys.stdout.write(lines)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
