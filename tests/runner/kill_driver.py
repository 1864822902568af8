"""Kill `faultline run` at seeded instants and measure what it left, before and after clean.

Theory of operation. `instants(seed, n)` draws n kill instants, spread round
robin over the run's phases and placed at a seeded offset inside each:

- `setup`: a seeded 0-4 s after the run's Docker network appeared
  (containers starting, sshd awaited, ember installed, started and awaited
  healthy: no run dir yet, or one without a history);
- `workload`: a seeded 0.5-8 s after history.jsonl appeared;
- `phase-fault`: a seeded 0-300 ms after the history shows a nemesis op
  triggered by a change phase (mid-apply, or with the fault in place);
- `heal`: a seeded 0-1.5 s after the history shows the `heal-all` op;
- `check`: a seeded 0-50 ms after the journal says the cluster is healed
  and down (the checkers and the report are running: on a quiet machine
  results.json follows `end` by ~50 ms and report.html by ~150 ms, so this
  phase is polled every 5 ms, not every 20).

`kill_once` starts the run as its own process, waits for its instant's
condition by reading the run's files (never its output: a run stuck on a
full pipe would be a different run), sends the signal, and then counts what
is left of the run: containers and networks carrying its pid as owner, and
on every node still up (over `docker exec`) the faultline iptables rules,
the stopped processes and the ember failpoints switched on. For an SSH run
the nodes are the hosts file's containers, which the caller owns. The
caller then cleans (or, for SIGINT and SIGTERM, does not) and counts again.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker

from harness.backends.docker import LABEL, OWNER_PID
from nemesis import journal

PHASES = ("setup", "workload", "phase-fault", "heal", "check")
ROOT = Path(__file__).resolve().parents[2]
RUN_FLAGS = [
    "--workload", "register,change-peers", "--nemesis", "partition,kill,pause",
    "--time-limit", "12", "--quiet-period", "1", "--rate", "20", "--concurrency", "4",
    "--no-progress",
]  # fmt: skip
# What counts as left on a node: our chain's rules, stopped processes, failpoints on.
NODE_PROBE = (
    "echo rules $(iptables -w -S FAULTLINE 2>/dev/null | grep -c '^-A' || true);"
    " echo stopped $(ps -eo stat= | grep -c '^T' || true);"
    # A failpoint kept in the config comes back at ember's next start: also left.
    " echo failpoints $(grep -c '^failpoints = ' /etc/ember/node.toml 2>/dev/null || true);"
    ' python3 -c "import json, urllib.request as u\n'
    "try: d = json.load(u.urlopen('http://127.0.0.1:8000/admin/failpoints', timeout=3))\n"
    "except Exception: d = {}\n"
    "print('failpoints', sum(1 for v in d.values() if v.get('enabled')))\""
)


@dataclass(frozen=True)
class Instant:
    """Where to kill: the phase, the seeded offset inside it, and the signal."""

    number: int
    phase: str
    offset_s: float
    signum: int = signal.SIGKILL


def instants(seed: int, n: int) -> list[Instant]:
    """n instants, phases round robin from a seeded start, offsets seeded."""
    rng = random.Random(seed)
    first = rng.randrange(len(PHASES))
    spans = {"setup": (0.0, 4.0), "workload": (0.5, 8.0), "phase-fault": (0.0, 0.3),
             "heal": (0.0, 1.5), "check": (0.0, 0.05)}  # fmt: skip
    out = []
    for i in range(n):
        phase = PHASES[(first + i) % len(PHASES)]
        low, high = spans[phase]
        out.append(Instant(i + 1, phase, round(rng.uniform(low, high), 2)))
    return out


@dataclass
class Left:
    """What a run left: counts, summed over its containers or hosts."""

    containers: int = 0
    networks: int = 0
    rules: int = 0
    stopped: int = 0
    failpoints: int = 0

    def total(self) -> int:
        """Everything left, one number."""
        return self.containers + self.networks + self.rules + self.stopped + self.failpoints

    def describe(self) -> str:
        """`2 containers, 1 network, ...` or `nothing`."""
        parts = [f"{v} {k}" for k, v in vars(self).items() if v]
        return ", ".join(parts) or "nothing"


@dataclass
class Kill:
    """One kill: where it landed and what was left."""

    instant: Instant
    pid: int = 0
    run_dir: Path | None = None
    landed: str = ""  # what the run was doing: its last journal record or file
    exit_code: int | None = None
    before: Left = field(default_factory=Left)
    after: Left = field(default_factory=Left)
    notes: list[str] = field(default_factory=list)


def _run_dir(store: Path) -> Path | None:
    found = [p for p in store.glob("*/*") if p.is_dir() and (p / "test.json").exists()]
    return max(found, default=None, key=lambda p: p.stat().st_mtime)


def _lines(path: Path | None) -> list[str]:
    if path is None or not path.exists():
        return []
    return path.read_text(errors="replace").splitlines()


def _ready(instant: Instant, store: Path, pid: int, client: Any) -> float | None:
    """When the instant's condition held (monotonic), or None while it does not."""
    if instant.phase == "setup":
        selector = {"label": [LABEL, f"{OWNER_PID}={pid}"]}
        return time.monotonic() if client.networks.list(filters=selector) else None
    run = _run_dir(store)
    history = _lines(run / "history.jsonl" if run else None)
    records = journal.read(run / journal.FILE_NAME) if run else []
    if instant.phase == "workload":
        return time.monotonic() if history else None
    if instant.phase == "phase-fault":
        hit = any('"nemesis"' in ln and '"invoke"' in ln and '"trigger"' in ln for ln in history)
        return time.monotonic() if hit else None
    if instant.phase == "heal":
        return time.monotonic() if any('"heal-all"' in ln for ln in history) else None
    return time.monotonic() if journal.has_ended(records) else None


def kill_once(instant: Instant, store: Path, extra: list[str], timeout_s: float = 240) -> Kill:
    """Start a run, signal it at `instant`, wait for it to end; what it left (`before`)."""
    kill = Kill(instant)
    client = docker.from_env()
    args = [sys.executable, "-m", "harness.cli", "run", *RUN_FLAGS, "--store", str(store),
            "--seed", str(100 + instant.number), *extra]  # fmt: skip
    log = (store.parent / f"kill-{instant.number}.log").open("w")
    child = subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    kill.pid = child.pid
    started = time.monotonic()
    since: float | None = None
    try:
        while child.poll() is None and time.monotonic() - started < timeout_s:
            since = since if since is not None else _ready(instant, store, child.pid, client)
            if since is not None and time.monotonic() - since >= instant.offset_s:
                child.send_signal(instant.signum)
                kill.landed = _where(store)
                break
            time.sleep(0.005 if instant.phase == "check" else 0.02)
        else:
            kill.notes.append("the run ended before its instant" if child.poll() is not None
                              else "the instant never came")  # fmt: skip
        kill.exit_code = child.wait(timeout=180)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        log.close()
    kill.run_dir = _run_dir(store)
    return kill


def _where(store: Path) -> str:
    run = _run_dir(store)
    if run is None:
        return "no run dir yet"
    records = journal.read(run / journal.FILE_NAME)
    if not records:
        return "run dir, no journal"
    last = records[-1]
    return f"journal: {last.get('type')}" + (f" {last['kind']}" if "kind" in last else "")


def left_on_docker(pid: int) -> Left:
    """Containers and networks owned by `pid`, and on its running containers what
    faults remain."""
    client = docker.from_env()
    selector = {"label": [LABEL, f"{OWNER_PID}={pid}"]}
    containers = client.containers.list(all=True, filters=selector)
    left = Left(containers=len(containers), networks=len(client.networks.list(filters=selector)))
    for container in containers:
        if container.status == "running":
            _add_probe(left, container)
    return left


def left_on_hosts(containers: list[Any]) -> Left:
    """What faults remain on containers used as SSH hosts (which stay)."""
    left = Left()
    for container in containers:
        _add_probe(left, container)
    return left


def _add_probe(left: Left, container: Any) -> None:
    out = container.exec_run(["sh", "-c", NODE_PROBE]).output.decode(errors="replace")
    for line in out.splitlines():
        words = line.split()
        if len(words) == 2 and words[0] in ("rules", "stopped", "failpoints"):
            setattr(left, words[0], getattr(left, words[0]) + int(words[1]))


def faultline(*args: str) -> subprocess.CompletedProcess[str]:
    """`faultline ARGS` as a user would run it."""
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "FAULTLINE_DEBUG": ""})  # fmt: skip
