"""harness.log: what the harness's own code logged during one run, kept in its run dir.

The simulator has always written one (its log router sends the harness's
records there and each node's to that node's ember.log); Docker and SSH runs
write the same file, so a line such as the metastore workload's "sent 1
more time(s) after an unknown outcome" is evidence on every backend. Only
the project's own loggers are kept, at INFO and above: a library's chatter
(paramiko's per-connection lines) is not the run's.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

FILE_NAME = "harness.log"
OWN_PACKAGES = frozenset({"harness", "workloads", "nemesis", "checkers", "ember"})
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _ours(record: logging.LogRecord) -> bool:
    return record.name.split(".", 1)[0] in OWN_PACKAGES


@contextlib.contextmanager
def harness_log(path: Path) -> Iterator[None]:
    """Append the project's INFO-and-above records to `path` while the block runs."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setLevel(logging.INFO)
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.addFilter(_ours)
    root = logging.getLogger()
    saved = root.level
    root.addHandler(handler)
    if root.getEffectiveLevel() > logging.INFO:
        root.setLevel(logging.INFO)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(saved)
        handler.close()
