"""The fault journal: every fault written down, with its heal, before it is applied.

Theory of operation. A run that dies by SIGKILL cannot heal what it did, so
whatever it did must already be on disk. `Journal` appends one JSON line per
record to the run dir's `faults.jsonl`, flushed and fsync'd before it
returns. The records, in order:

- `start`: who owns the run (host, pid, process start time: `owner`), the
  backend, the Docker cluster's name (if any) and each node's SSH target,
  so a later `faultline clean` can reach the nodes without the run;
- `fault`: written *before* the fault's commands run; its `heal` holds the
  exact shell commands, per node, that undo it (idempotent, so healing a
  fault that never landed is safe); a fault that failed half-way is healed
  by `nemesis.fault.apply`, which then appends its `heal` like any other;
- `heal`: the fault `id` whose heal commands ran;
- `heal-all`: `nemesis.heal.HEAL_ALL` ran on every node (rules, qdiscs and
  paused pids are gone; killed nodes and failpoints are not its business);
- `end`: the run is over and left nothing behind (healed and, on Docker,
  removed); a journal without `end` belongs to a run that may have left
  something, which `faultline clean` reads as a to-do list.

The nemesis primitives reach the run's journal through `current()`, set for
the length of a run by `recording(journal)`: one per process, and none in
the simulator or in unit tests, where recording is a no-op. Matching a heal
to its fault goes by (kind, heal commands): the `Fault` record stays as it
is, and a fault re-created from another (`process._signal_at_once`) still
matches. `open_marker` / the store's `.running/` directory lets a new run
find journals whose owner died without scanning every run dir.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

FILE_NAME = "faults.jsonl"
RUNNING_DIR = ".running"  # in the store root: one marker per run with an open journal

Commands = Mapping[str, Sequence[str]]


def process_started(pid: int) -> str | None:
    """The start time of `pid` (clock ticks since boot, /proc), to tell a
    reused pid from its first owner; None where /proc cannot say."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22, counted after the command name, which may hold spaces.
    return stat.rpartition(")")[2].split()[19]


def owner() -> dict[str, Any]:
    """This process as an owner: host name, pid and start time."""
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "started": process_started(pid) or ""}


def owner_state(host: str, pid: int, started: str = "") -> str:
    """`alive`, `dead`, or `elsewhere` (another host's process: not ours to judge)."""
    if host != socket.gethostname():
        return "elsewhere"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "dead"
    except PermissionError:
        pass  # someone else's live process
    now = process_started(pid)
    if started and now is not None and now != started:
        return "dead"  # the pid was reused by a newer process
    return "alive"


def _key(kind: str, heal: Commands) -> tuple[str, tuple[tuple[str, tuple[str, ...]], ...]]:
    return kind, tuple(sorted((n, tuple(c)) for n, c in heal.items()))


class Journal:
    """Appends fsync'd records to `path` (see the module doc); thread-safe.

    Made without a path, it records nothing until `open`: a run makes its
    journal current before its cluster exists, and opens it in the run dir
    once that exists (`harness.runner`)."""

    def __init__(self, path: Path | None = None, *, running_dir: Path | None = None) -> None:
        self.path: Path | None = None
        self._lock = threading.Lock()
        self._next_id = 1
        self._open: dict[Any, list[int]] = {}
        self._file: Any = None
        self._marker: Path | None = None
        if path is not None:
            self.open(path, running_dir=running_dir)

    @property
    def is_open(self) -> bool:
        """Whether records are being written."""
        return self._file is not None and not self._file.closed

    def open(self, path: Path, *, running_dir: Path | None = None) -> None:
        """Start appending to `path`; with `running_dir`, leave a marker
        there (naming the run dir) until the run ends."""
        self.path = path
        self._file = path.open("ab")
        if self._file.tell() and not path.read_bytes().endswith(b"\n"):
            self._file.write(b"\n")  # `clean` appending after a line a kill cut short
        if running_dir is not None:
            running_dir.mkdir(parents=True, exist_ok=True)
            me = owner()
            # One per run, not per process: a run of `--test-count N` that could not
            # heal keeps its marker while the next run of the same process writes its own.
            run = path.parent
            name = f"{me['host']}-{me['pid']}-{run.parent.name}-{run.name}.json"
            self._marker = running_dir / name
            self._marker.write_bytes(msgspec.json.encode({"run": str(path.parent.resolve())}))

    def write(self, record: Mapping[str, Any]) -> None:
        """Append one record, durably, before returning."""
        line = msgspec.json.encode({**record, "wall": round(time.time(), 6)}) + b"\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()
            os.fsync(self._file.fileno())

    def start(self, backend: str, cluster: str | None, nodes: Sequence[Any]) -> None:
        """The `start` record: owner, backend, cluster and each node's SSH target."""
        self.write(
            {
                "type": "start",
                "owner": owner(),
                "backend": backend,
                "cluster": cluster,
                "nodes": [_node_doc(n) for n in nodes],
            }
        )

    def fault(self, kind: str, heal: Commands, commands: Commands | None = None) -> int:
        """Record a fault about to be applied; returns its id."""
        with self._lock:
            fid = self._next_id
            self._next_id += 1
            self._open.setdefault(_key(kind, heal), []).append(fid)
        self.write(
            {
                "type": "fault",
                "id": fid,
                "kind": kind,
                "commands": {n: list(c) for n, c in (commands or {}).items()},
                "heal": {n: list(c) for n, c in heal.items()},
            }
        )
        return fid

    def healed(self, kind: str, heal: Commands) -> None:
        """Record that the newest open fault with this kind and heal was healed."""
        with self._lock:
            ids = self._open.get(_key(kind, heal))
            fid = ids.pop() if ids else None
        if fid is not None:
            self.write({"type": "heal", "id": fid})

    def close(self, *, ended: bool) -> None:
        """Close the file; `ended`: the run left nothing behind (writes `end`)."""
        if not self.is_open:
            return
        if ended:
            self.write({"type": "end"})
            if self._marker is not None:
                self._marker.unlink(missing_ok=True)
        self._file.close()


def _node_doc(node: Any) -> dict[str, Any]:
    ssh = node.ssh
    return {
        "name": node.name,
        "ip": node.ip,
        "ssh": {"host": ssh.host, "port": ssh.port, "user": ssh.user, "key_path": ssh.key_path},
    }


_current: Journal | None = None


def current() -> Journal | None:
    """The journal of the run in progress, if any."""
    return _current


@contextlib.contextmanager
def recording(journal: Journal) -> Iterator[Journal]:
    """Make `journal` the current one while the block runs."""
    global _current
    previous, _current = _current, journal
    try:
        yield journal
    finally:
        _current = previous


def note_fault(kind: str, heal: Commands, commands: Commands | None = None) -> None:
    """Journal a fault about to be applied (nothing without a current journal
    or when there is nothing to heal: a start or a resume is no fault)."""
    journal = _current
    if journal is not None and journal.is_open and any(heal.values()):
        journal.fault(kind, heal, commands)


def note_healed(kind: str, heal: Commands) -> None:
    """Journal that a fault's heal ran."""
    journal = _current
    if journal is not None and journal.is_open and any(heal.values()):
        journal.healed(kind, heal)


def read(path: Path) -> list[dict[str, Any]]:
    """Every whole record of a journal (a line cut by a kill is skipped)."""
    records = []
    with contextlib.suppress(FileNotFoundError):
        for raw in path.read_bytes().splitlines():
            with contextlib.suppress(msgspec.DecodeError):
                doc = msgspec.json.decode(raw)
                if isinstance(doc, dict):
                    records.append(doc)
    return records


def unhealed(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The faults with no heal record, oldest first."""
    healed = {r.get("id") for r in records if r.get("type") == "heal"}
    return [r for r in records if r.get("type") == "fault" and r.get("id") not in healed]


def has_ended(records: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the journal says its run left nothing behind."""
    return any(r.get("type") == "end" for r in records)
