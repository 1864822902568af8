"""The process half of a database under test: one daemon per node under a
pidfile (ember-node, etcd), and what both need around it.

`ProcessDB` routes every process fault through `nemesis.process` with the
system's `ProcessSpec`, so the history records the exact commands; it
copies node files into the run store; and when nodes do not answer it
tells whether their process is gone, with the last words of each one's log
(`ExitWatch` asks while a health wait goes on, so a node that exited at
start ends the wait at once). Settings that name nodes (`bootstrap`,
`meta_nodes`) are read here alike for every system (`node_names`).
"""

from __future__ import annotations

import json
import re
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from harness.control import Control, ControlError
from harness.store import RunDir
from nemesis import process
from nemesis.fault import Fault
from nemesis.process import ProcessSpec

# While nodes do not answer, how often a wait for health asks whether their
# process is still there: one that exited will not answer however long we wait.
EXIT_CHECK_S = 2.0
LOG_TAIL_LINES = 3
# Where a run keeps each node's log, whatever the db (DESIGN.md's store layout).
NODE_LOGS = "the run's nodes/<node>/ember.log"
# A log line's leading date and time (ember's and etcd's formats), which differ per node.
_LOG_STAMP = re.compile(r"^\d{4}-\d\d-\d\d[ T][0-9:.,]+Z?\s+")
# `gone(nodes not answering)`: why waiting on is pointless (a process that
# exited), or None to wait on.
Gone = Callable[[Sequence[str]], str | None]


def log_words(line: str) -> str:
    """A log line as words without its time, which differs per node: ember's
    text line less its date, or etcd's zap JSON line as `level: msg: error`."""
    if line.startswith("{"):
        try:
            doc = json.loads(line)
        except ValueError:
            doc = None
        if isinstance(doc, dict) and isinstance(doc.get("msg"), str):
            words = [doc.get("level"), doc["msg"], doc.get("error")]
            return ": ".join(str(w) for w in words if w not in (None, ""))
    return _LOG_STAMP.sub("", line)


def empty_dir(path: str) -> str:
    """A shell command leaving `path` an empty directory. Not `rm -rf path`:
    on Docker the data dir is a volume's mount point, which cannot be removed."""
    q = shlex.quote(path)
    return f"mkdir -p {q} && find {q} -mindepth 1 -delete"


class DBError(RuntimeError):
    """The database could not be installed, started or reached."""


def node_names(value: Any, setting: str, nodes: Sequence[str]) -> list[str]:
    """A setting naming nodes (`bootstrap`, `meta_nodes`) as a list: given as
    "n1,n2" (what `--db-setting bootstrap=n1,n2` gives) or as a list. Raises
    DBError naming the setting for a value of another type, or, where `nodes`
    is known (non-empty), for a name that is not one of them."""
    if isinstance(value, str):
        raw: list[Any] = value.split(",")
    elif isinstance(value, list | tuple):
        raw = list(value)
    else:
        raise DBError(f"{setting}: expected node names (n1,n2 or a list), got {value!r}")
    if not all(isinstance(name, str) for name in raw):
        raise DBError(f"{setting}: expected node names (n1,n2 or a list), got {value!r}")
    names = [name.strip() for name in raw if name.strip()]
    unknown = sorted(set(names) - set(nodes)) if nodes else []
    if unknown:
        raise DBError(f"{setting}: unknown node(s) {', '.join(unknown)}; "
                      f"the nodes are {', '.join(nodes)}")  # fmt: skip
    return names


def bootstrap_names(settings: Mapping[str, Any], nodes: Sequence[str]) -> list[str]:
    """The nodes that form the cluster: the `bootstrap` setting, else the first three."""
    wanted = settings.get("bootstrap")
    chosen = node_names(wanted, "bootstrap", nodes) if wanted else []
    return chosen or list(nodes[: min(3, len(nodes))])


class ExitWatch:
    """Asks `gone` about the nodes not answering, at most every EXIT_CHECK_S,
    and ends the wait with its reason (see `Gone`)."""

    def __init__(self, gone: Gone | None) -> None:
        self.gone = gone
        self.asked = time.monotonic()

    def check(self, down: Sequence[str]) -> None:
        """DBError when `gone` says why `down` will not answer."""
        if self.gone is None or not down or time.monotonic() - self.asked < EXIT_CHECK_S:
            return
        why = self.gone(down)
        self.asked = time.monotonic()
        if why:
            raise DBError(why)


class ProcessDB:
    """The process half of the DB protocol for a system run as one daemon per
    node under a pidfile: every fault goes through `nemesis.process` with the
    subclass's `spec`, so the history records the exact commands."""

    name: str
    spec: ProcessSpec

    def exited(self, control: Control, names: Sequence[str]) -> str | None:
        """Which of `names` have no live process, with the last line of each
        one's log, nodes whose logs end alike together (a `Gone`); None when it
        runs on all, or when that cannot be told (a node's shell unreachable:
        waiting on may still help)."""
        try:
            pids = process.find_pids(control, names, self.spec)
            gone = [n for n in names if not pids.get(n)]
            tail = f"tail -n {LOG_TAIL_LINES} {shlex.quote(self.spec.log_path)} 2>/dev/null"
            logs = control.run_many(dict.fromkeys(gone, tail), check=False) if gone else {}
        except (ControlError, RuntimeError):
            return None
        if not gone:
            return None
        ends: dict[str, list[str]] = {}
        for name in gone:
            lines = [ln.strip() for ln in logs[name].stdout.splitlines() if ln.strip()]
            last = log_words(lines[-1])[:400] if lines else ""
            ends.setdefault(last, []).append(name)
        each = [f"{', '.join(nodes)} ({'log ends: ' + last if last else 'empty log'})"
                for last, nodes in ends.items()]  # fmt: skip
        return f"{self.name} is not running on {'; '.join(each)}"

    def fetch_files(
        self, control: Control, names: Sequence[str], run: RunDir, files: Sequence[tuple[str, str]]
    ) -> list[str]:
        """Copy each (remote path, run-dir file name: log | events) of every node
        into `nodes/<n>/`; returns what could not be fetched."""
        missing = []
        for name in names:
            run.node_dir(name).mkdir(parents=True, exist_ok=True)
            for remote, kind in files:
                local = run.log(name) if kind == "log" else run.events(name)
                try:
                    control.fetch(name, remote, local)
                except (ControlError, OSError) as exc:
                    missing.append(f"{name}:{remote} ({exc})")
        return missing

    def start(self, control: Control, names: Sequence[str]) -> Fault:
        """Start the daemon where it is not running (idempotent)."""
        return process.start(control, names, self.spec)

    def stop(self, control: Control, names: Sequence[str]) -> Fault:
        """SIGTERM and wait."""
        return process.stop(control, names, self.spec)

    def kill(self, control: Control, names: Sequence[str]) -> Fault:
        """kill -9; the fault's heal restarts the node."""
        return process.kill(control, names, self.spec)

    def pause(self, control: Control, names: Sequence[str]) -> Fault:
        """SIGSTOP."""
        return process.pause(control, names, self.spec)

    def resume(self, control: Control, names: Sequence[str]) -> Fault:
        """SIGCONT."""
        return process.resume(control, names, self.spec)
