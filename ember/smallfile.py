"""Small state files in a node's data dir, replaced whole.

A node keeps a few small records beside its Raft store (the primary's last
seen revisions, the replicas step 5 stopped, the last assignment revision
it reported). Written in place, a `kill -9` between the truncate and the
write leaves an empty file, and the node then cannot start (the soak found
exactly that). Here a record is written to a temporary file and renamed
over the old one, so a reader sees the old record or the new one, never a
torn one. `durable=True` also fsyncs it first, for records that must
survive a machine crash, not only a process kill.
"""

from __future__ import annotations

import os
from pathlib import Path


def replace_text(path: Path, text: str, *, durable: bool = False) -> None:
    """Atomically replace `path`'s content with `text`."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        if durable:
            fh.flush()
            os.fsync(fh.fileno())
    os.replace(tmp, path)
