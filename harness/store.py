"""The run store of DESIGN.md.

    store/<test-name>/<start-time>-<seed>/
      test.json  history.jsonl  results.json  report.html
      nodes/<node>/{ember.log,events.jsonl}
    store/latest -> the newest run

Everything that reads or writes runs (runner, checkers' CLI, reports,
pipeline) goes through `RunDir` so the layout is spelled out once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ROOT = Path("store")
_TIME_FORMAT = "%Y%m%dT%H%M%S"


@dataclass(frozen=True)
class RunDir:
    """One run's directory and the names of its files."""

    path: Path

    @property
    def plan(self) -> Path:
        return self.path / "test.json"

    @property
    def history(self) -> Path:
        return self.path / "history.jsonl"

    @property
    def results(self) -> Path:
        return self.path / "results.json"

    @property
    def report(self) -> Path:
        return self.path / "report.html"

    @property
    def nodes(self) -> Path:
        return self.path / "nodes"

    @property
    def timeline(self) -> Path:
        """timeline.json: the Unix time of the history's zero, as the harness read it."""
        return self.path / "timeline.json"

    def node_dir(self, node: str) -> Path:
        return self.nodes / node

    def events(self, node: str) -> Path:
        return self.node_dir(node) / "events.jsonl"

    def log(self, node: str) -> Path:
        return self.node_dir(node) / "ember.log"

    @property
    def test_name(self) -> str:
        return self.path.parent.name

    @property
    def started(self) -> str:
        return self.path.name.split("-", 1)[0]

    def node_names(self) -> list[str]:
        if not self.nodes.is_dir():
            return []
        return sorted(p.name for p in self.nodes.iterdir() if p.is_dir())


def new_run(root: Path, test_name: str, seed: int, started: float | None = None) -> RunDir:
    """Creates a fresh run directory and points `latest` at it."""
    stamp = time.strftime(_TIME_FORMAT, time.gmtime(time.time() if started is None else started))
    base = root / _safe(test_name)
    path = base / f"{stamp}-{seed}"
    suffix = 1
    while path.exists():  # two runs of one seed in the same second
        path = base / f"{stamp}-{seed}.{suffix}"
        suffix += 1
    path.mkdir(parents=True)
    (path / "nodes").mkdir()
    _point_latest(root, path)
    return RunDir(path)


def _safe(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "-_." else "-" for c in name).strip(".")
    if not cleaned:
        raise ValueError(f"test name {name!r} has no usable characters")
    return cleaned


def _point_latest(root: Path, path: Path) -> None:
    # Replace atomically so a reader never sees a missing `latest`.
    link = root / "latest"
    tmp = root / f".latest-{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(path.relative_to(root))
    tmp.replace(link)


def iter_runs(root: Path) -> Iterator[RunDir]:
    """Every run directory under `root` (those holding a test.json or history.jsonl)."""
    if not root.is_dir():
        return
    for test in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()):
        for run in sorted(p for p in test.iterdir() if p.is_dir()):
            if (run / "test.json").exists() or (run / "history.jsonl").exists():
                yield RunDir(run)
