"""etcd as a database under test: `EtcdDB`, the `harness.db.DB` protocol for etcd 3.4.

Theory of operation. Every node runs (at most) one `etcd` whose flags come
from an environment file, /etc/faultline-etcd/env (etcd reads `ETCD_*`
variables), so the start command is fixed and the membership workload can
rewrite how a node joins without changing it. `install` writes every
node's file and wipes every data dir; the first three nodes (or the
`bootstrap` setting) form the cluster (`initial-cluster-state=new`), the
others are spares that run nothing until the membership workload adds one.

etcd's membership is cluster state, so this object keeps the harness's
view of it, `members` (node names with a data dir that belongs to the
cluster), under a lock: `join` writes a node's env file for an existing
cluster, wipes its data and starts it; `leave` stops it and wipes its data
(a removed member can never come back with its old data). `start` (the
nemesis's heal) starts only members, so healing never starts a spare as a
second, one-node cluster.

What etcd offers for audit: no event log like ember's events.jsonl; its
log (zap JSON, one line per event, including membership changes) is
collected into nodes/<n>/ember.log's place (`RunDir.log`). Phases come from
polling the member list (`harness.dbs.etcd_phase`). etcd 3.4 from Debian
has no failpoints: `set_failpoint` refuses, so the slow nemesis uses netem
or, without it, a rate limit (`nemesis.schedule`). Its status answer is
given `groups` like ember's, so role targets find etcd's leader.
"""

from __future__ import annotations

import shlex
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from harness.backends.base import NodeHandle
from harness.control import Control, ControlError
from harness.dbs.etcd_client import REVISION_OFFSET, b64, model_revision
from harness.nodehttp import http_json
from harness.process_db import (
    NODE_LOGS,
    DBError,
    ExitWatch,
    Gone,
    ProcessDB,
    bootstrap_names,
    empty_dir,
)
from harness.store import RunDir
from harness.version import VERSION_LABELS
from nemesis import process
from nemesis.fault import Fault
from nemesis.maintenance import Call
from nemesis.process import ProcessSpec

CLIENT_PORT = 2379
PEER_PORT = 2380
GROUP = "etcd"  # etcd has one Raft group: the whole cluster
HEALTH_POLL_S = 0.25
ENV_PATH = "/etc/faultline-etcd/env"


def _healthy(url: str) -> bool:
    doc = http_json(url + "/health", timeout_s=2)
    return doc is not None and doc.get("health") == "true"


class EtcdDB(ProcessDB):
    """etcd on every node: env file, pidfile, data dir, zap log."""

    name = "etcd"
    has_failpoints = False  # built without gofail: the slow nemesis throttles instead
    root = "/var/lib/etcd"
    log_path = "/var/log/etcd/etcd.log"

    def __init__(self, nodes: Sequence[NodeHandle], settings: Mapping[str, Any], seed: int) -> None:
        self.nodes = list(nodes)
        self.by_name = {n.name: n for n in self.nodes}
        self.settings = dict(settings)
        self.seed = seed
        names = [n.name for n in self.nodes]
        self._bootstrap = bootstrap_names(self.settings, names)
        self.members: set[str] = set(self._bootstrap)
        self.learners: set[str] = set()  # members not yet promoted
        self.lock = threading.Lock()
        self.spec = ProcessSpec(
            pidfile="/run/etcd/etcd.pid",
            start_command=f"env $(cat {ENV_PATH}) /usr/bin/etcd",
            log_path=self.log_path,
        )

    def peer_url(self, name: str) -> str:
        """The node's Raft (peer) URL."""
        return f"http://{self.by_name[name].ip}:{PEER_PORT}"

    def node_of_peer(self, peer_url: str) -> str | None:
        """The node a peer URL belongs to."""
        return next((n for n in self.by_name if self.peer_url(n) == peer_url), None)

    def env(self, name: str, cluster: Mapping[str, str], state: str) -> str:
        """The node's ETCD_* variables: cluster is name -> peer URL."""
        ip = self.by_name[name].ip
        values = {
            "NAME": name,
            "DATA_DIR": f"{self.root}/data",
            "LISTEN_PEER_URLS": f"http://0.0.0.0:{PEER_PORT}",
            "LISTEN_CLIENT_URLS": f"http://0.0.0.0:{CLIENT_PORT}",
            "INITIAL_ADVERTISE_PEER_URLS": self.peer_url(name),
            "ADVERTISE_CLIENT_URLS": f"http://{ip}:{CLIENT_PORT}",
            "INITIAL_CLUSTER": ",".join(f"{n}={u}" for n, u in sorted(cluster.items())),
            "INITIAL_CLUSTER_STATE": state,
            "INITIAL_CLUSTER_TOKEN": f"faultline-{self.seed}",
            "LOGGER": "zap",
            "LOG_OUTPUTS": "stderr",
            # Progress notifications every second instead of every ten minutes,
            # so a run's watches carry some (guarantee G7, checkers/watches.py).
            "EXPERIMENTAL_WATCH_PROGRESS_NOTIFY_INTERVAL": "1s",
        }
        for key, value in self.settings.items():
            # e.g. heartbeat_interval=50 -> ETCD_HEARTBEAT_INTERVAL
            if key != "bootstrap" and key not in VERSION_LABELS:
                values[key.upper().replace("-", "_")] = str(value)
        return "".join(f"ETCD_{k}={v}\n" for k, v in values.items())

    def _reset_script(self, name: str, env: str) -> str:
        return "; ".join(
            [
                f"p=$(cat {self.spec.pidfile} 2>/dev/null) && kill -9 $p 2>/dev/null; true",
                f"{empty_dir(self.root)} && mkdir -p /etc/faultline-etcd /var/log/etcd",
                f"printf %s {shlex.quote(env)} > {ENV_PATH}",
            ]
        )

    def install(self, control: Control) -> None:
        """Kill leftovers, wipe data, write each node's env file (spares too)."""
        cluster = {n: self.peer_url(n) for n in self._bootstrap}
        scripts = {n.name: self._reset_script(n.name, self.env(n.name, cluster, "new"))
                   + f"; : > {self.log_path}" for n in self.nodes}  # fmt: skip
        try:
            control.run_many(scripts, timeout_s=60)
        except ControlError as exc:
            raise DBError(f"cannot install etcd: {exc}") from exc
        with self.lock:
            self.members = set(self._bootstrap)
            self.learners = set()

    def join(self, control: Control, name: str, cluster: Mapping[str, str]) -> Fault:
        """Start `name` as a new learner of the existing cluster (wiping its data)."""
        with self.lock:
            self.members.add(name)
            self.learners.add(name)
        try:
            control.run(name, self._reset_script(name, self.env(name, cluster, "existing")))
            return process.start(control, [name], self.spec)
        except ControlError as exc:
            raise DBError(f"cannot start {name} as a new member: {exc}") from exc

    def leave(self, control: Control, name: str) -> None:
        """Stop a removed member and wipe its data.

        A removed etcd shuts itself down, so the process may be gone by the
        time the kill lands: the kill tolerates that (`process.kill` would
        call it a failure)."""
        with self.lock:
            self.members.discard(name)
            self.learners.discard(name)
        pidfile = shlex.quote(str(self.spec.pidfile))
        script = f"kill -9 $(cat {pidfile} 2>/dev/null) 2>/dev/null; rm -rf {self.root}/data"
        try:
            control.run(name, script, check=False)
        except ControlError as exc:
            raise DBError(f"cannot stop and wipe {name}: {exc}") from exc

    def _members_in(self, names: Sequence[str]) -> list[str]:
        with self.lock:
            return [n for n in names if n in self.members]

    def running_in(self, names: Sequence[str]) -> list[str]:
        """The nodes of `names` etcd runs on now: its members (a spare, or a
        member a change removed, runs nothing a fault could hit)."""
        return self._members_in(names)

    def start(self, control: Control, names: Sequence[str]) -> Fault:
        """Start etcd on those of `names` that are members (idempotent)."""
        return process.start(control, self._members_in(names), self.spec)

    def urls(self) -> dict[str, str]:
        """Each node's client URL (spares included: they refuse connections)."""
        return {n.name: f"http://{n.ip}:{CLIENT_PORT}" for n in self.nodes}

    def note_learners(self, learners: set[str]) -> None:
        """The learners as a member list read just now says."""
        with self.lock:
            self.learners = set(learners)

    def member_urls(self) -> list[str]:
        """Client URLs of the voters the harness believes in (a learner
        refuses everything but serializable reads)."""
        urls = self.urls()
        with self.lock:
            return [urls[n] for n in sorted(self.members - self.learners)]

    def status(self, name: str) -> dict[str, Any] | None:
        """POST /v3/maintenance/status: leader, raft term and index, member id,
        plus `groups` in the shape ember's status has ({"etcd": {role, term}}),
        so the nemesis finds etcd's leader through etcd's own answer."""
        doc = http_json(self.urls()[name] + "/v3/maintenance/status", "POST", {})
        if doc is None:
            return None
        member = (doc.get("header") or {}).get("member_id")
        leads = member is not None and doc.get("leader") == member
        role = "leader" if leads else "learner" if doc.get("isLearner") else "follower"
        term = int(doc.get("raftTerm") or 0)
        return {**doc, "groups": {GROUP: {"role": role, "term": term}}}

    def groups(self) -> list[str]:
        """One group: the cluster."""
        return [GROUP]

    def bootstrap(self) -> list[str]:
        """The initial members."""
        return list(self._bootstrap)

    def leaders(self, names: Sequence[str] | None = None) -> dict[str, str]:
        """{"etcd": the node that says it leads, in the highest term seen}."""
        best: tuple[int, str] | None = None
        for name in names or self._members_in([n.name for n in self.nodes]):
            doc = self.status(name)
            if not doc or doc.get("leader") != doc.get("header", {}).get("member_id"):
                continue
            term = int(doc.get("raftTerm", 0))
            if best is None or term >= best[0]:
                best = (term, name)
        return {GROUP: best[1]} if best else {}

    def wait_healthy(
        self, names: Sequence[str], timeout_s: float, gone: Gone | None = None
    ) -> None:
        """Every member among `names` answers /health true and a leader exists."""
        deadline = time.monotonic() + timeout_s
        urls = self.urls()
        watch = ExitWatch(gone)
        while True:
            members = self._members_in(names)
            down = [n for n in members if not _healthy(urls[n])]
            watch.check(down)
            leaderless = not down and not self.leaders(members)
            if not down and not leaderless:
                return
            if time.monotonic() > deadline:
                what = f"unhealthy: {', '.join(down)}" if down else "no leader"
                raise DBError(f"etcd not healthy after {timeout_s:g}s ({what}); see {NODE_LOGS}")
            time.sleep(HEALTH_POLL_S)

    # -- compact-kill (nemesis.maintenance) --------------------------------------

    maintenance = ("compact", "defrag")

    def maintenance_node(self, target: str) -> str:
        """The target itself: it forwards a compaction to the leader, and a
        defragmentation rewrites its own backend."""
        return target

    def revision_call(self, node: str) -> Call:
        """A serializable count-only range: the revision `node` has applied,
        never above the cluster's, so a compaction there is never refused
        as a future revision."""
        body = {"key": b64("faultline/nemesis"), "serializable": True, "count_only": True}
        return Call(self.urls()[node] + "/v3/kv/range", body)

    def revision_in(self, doc: dict[str, Any] | None) -> int | None:
        """The header's revision, in the model's numbering."""
        raw = ((doc or {}).get("header") or {}).get("revision")
        return None if raw is None else model_revision(raw)

    def maintenance_call(self, node: str, action: str, revision: int) -> Call:
        """POST /v3/kv/compaction at (model) `revision`, or /v3/maintenance/defragment."""
        if action == "defrag":
            return Call(self.urls()[node] + "/v3/maintenance/defragment", {})
        body = {"revision": str(revision + REVISION_OFFSET)}
        return Call(self.urls()[node] + "/v3/kv/compaction", body)

    def set_failpoint(self, name: str, failpoint: str, params: Mapping[str, Any] | None) -> None:
        """etcd from Debian is built without gofail: always refused."""
        raise DBError(f"etcd has no failpoints ({failpoint} on {name})")

    def audit_path(self) -> str:
        """etcd writes no audit events; this file stays absent."""
        return f"{self.root}/events.jsonl"

    def collect(self, control: Control, names: Sequence[str], run: RunDir) -> list[str]:
        """Fetch each node's etcd log (spares' logs are empty, still fetched)."""
        return self.fetch_files(control, names, run, ((self.log_path, "log"),))
