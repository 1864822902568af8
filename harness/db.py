"""The database under test, behind one small protocol (Jepsen's `db`).

Theory of operation. A `DB` knows how to install itself on a cluster's
nodes (write its config, clear old data), start / stop / kill -9 / pause /
resume its process, tell when the cluster is healthy, report a node's
status, enumerate the groups whose membership can change, switch
failpoints, and collect its logs and audit data into the run store
(nodes/<n>/). Process faults reuse the nemesis primitives
(`nemesis.process`) and return their `Fault` records, so the history can
say exactly what ran. `EmberDB` is the implementation for ember; a second
system (etcd) implements the same protocol. Both run one daemon per node on
`harness.process_db.ProcessDB`.
"""

from __future__ import annotations

import random
import shlex
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from harness.backends.base import NodeHandle
from harness.control import Control, ControlError
from harness.nodehttp import Answer, http_answer, http_json
from harness.process_db import (
    NODE_LOGS,
    DBError,
    ExitWatch,
    Gone,
    ProcessDB,
    bootstrap_names,
    empty_dir,
    node_names,
)
from harness.store import RunDir
from harness.version import VERSION_LABELS
from nemesis import journal
from nemesis.clock import CLOCK_OFFSET_FILE
from nemesis.fault import Fault
from nemesis.maintenance import Call
from nemesis.process import ProcessSpec

RAFT_PORT = 7000
HTTP_PORT = 8000
HEALTH_POLL_S = 0.25
# A busy node (a loaded host, a long fsync) may take seconds to answer a
# failpoint switch: the Docker full mix saw n1 answer after more than 2 s.
FAILPOINT_WAIT_S = 5.0
REPORT_APPLIED = "/admin/report-applied"  # ember: each group's end state into the audit log
# One admin call to one node (the end-state report, an assignments read):
# as long as a failpoint switch, for the same busy node.
ADMIN_CALL_S = 5.0


class DB(Protocol):
    """What the runner needs from a database under test."""

    name: str

    def install(self, control: Control) -> None:
        """Write config, create directories, remove data of earlier runs."""
        ...

    def start(self, control: Control, names: Sequence[str]) -> Fault:
        """Start the process where it is not running."""
        ...

    def stop(self, control: Control, names: Sequence[str]) -> Fault:
        """Stop the process gracefully (SIGTERM, wait)."""
        ...

    def kill(self, control: Control, names: Sequence[str]) -> Fault:
        """kill -9; the fault heals by restarting."""
        ...

    def pause(self, control: Control, names: Sequence[str]) -> Fault:
        """SIGSTOP; heals by SIGCONT."""
        ...

    def resume(self, control: Control, names: Sequence[str]) -> Fault:
        """SIGCONT."""
        ...

    def wait_healthy(
        self, names: Sequence[str], timeout_s: float, gone: Gone | None = None
    ) -> None:
        """Return once every node answers and every group has a leader; else
        DBError, at once when `gone` gives a reason for the nodes not answering."""
        ...

    def status(self, name: str) -> dict[str, Any] | None:
        """The node's status document (None when it does not answer)."""
        ...

    def groups(self) -> list[str]:
        """The replication groups whose membership the workload may change."""
        ...

    def leaders(self, names: Sequence[str] | None = None) -> dict[str, str]:
        """group -> the node leading it (as the nodes report)."""
        ...

    def bootstrap(self) -> list[str]:
        """The nodes every group starts on."""
        ...

    def urls(self) -> dict[str, str]:
        """Client URL of each node."""
        ...

    def set_failpoint(self, name: str, failpoint: str, params: Mapping[str, Any] | None) -> None:
        """Switch a failpoint on (params) or off (None) on one node."""
        ...

    def audit_path(self) -> str:
        """Where, on a node, the audit events (events.jsonl) are appended."""
        ...

    def collect(self, control: Control, names: Sequence[str], run: RunDir) -> list[str]:
        """Copy logs and audit events into the run store; returns what is missing."""
        ...


# Workloads that need ember's control plane (metastore, zones, placement driver).
CONTROL_PLANE_WORKLOADS = frozenset({"rebalance", "cancel-race", "metastore"})
# Workloads that drive the zone `default`, which `setup` creates only for them:
# without one there are no zone partitions, so no primary replicas.
ZONE_WORKLOADS = frozenset({"rebalance", "cancel-race"})
# With the control plane on, nodes run ZONE_PARTITIONS + FREE_PARTITIONS groups:
# the zone `default` covers part-0 .. part-3 (the rebalance workload moves its
# partition count between 2 and 4), and change-peers moves only part-4 and
# part-5, outside the zone at every partition count, so the placement driver
# and the change-peers workload never fight over a group.
ZONE_PARTITIONS = 4
FREE_PARTITIONS = 2
SETTLE_POLL_S = 1.0


def zone_refused(problems: Mapping[str, str]) -> str:
    """Why no node created the zone, node by node."""
    each = "; ".join(f"{name} {why}" for name, why in problems.items())
    return f"could not create the zone: no node accepted POST /admin/zones/default ({each})"


class EmberDB(ProcessDB):
    """ember-node on every node: TOML config, pidfile, data dir, audit log.

    With the control plane (`meta_nodes`, set by `configure` when the plan's
    workloads need it, or given as a db setting), `setup` creates the zone
    (replicas 3, `zone_partitions` partitions; see ZONE_PARTITIONS for the
    split with change-peers) and `wait_healthy` also waits for the metastore
    group's leader and, once a zone exists, for every rebalance to finish
    (no pending, planned or cancel key), so a healed cluster is quiet.
    """

    name = "ember"
    root = "/var/lib/ember"
    config_path = "/etc/ember/node.toml"
    log_path = "/var/log/ember/ember.log"

    def __init__(self, nodes: Sequence[NodeHandle], settings: Mapping[str, Any], seed: int) -> None:
        self.nodes = list(nodes)
        self.settings = dict(settings)
        self.seed = seed
        self.partitions = int(self.settings.get("partitions", 8))
        self.zone_partitions = 0  # no zone until `setup` makes one
        self._bootstrap = bootstrap_names(self.settings, [n.name for n in self.nodes])
        self.binary = str(self.settings.get("ember_bin", "/opt/faultline/bin/ember-node"))
        # node -> the failpoints the harness has on there, which a restart keeps
        # (written into the node's config: `remember_failpoint`).
        self.sticky: dict[str, dict[str, dict[str, Any]]] = {}
        self._control: Control | None = None  # install's: configs are written through it
        self.spec = ProcessSpec(
            pidfile="/run/ember/ember.pid",
            start_command=f"{self.binary} --config {self.config_path}",
            log_path=self.log_path,
        )

    @staticmethod
    def runs_control_plane(workloads: Sequence[str], settings: Mapping[str, Any]) -> bool:
        """Whether a run of these workloads and settings has the control plane
        on: a workload that needs it (`configure` turns it on) or `meta_nodes`."""
        return bool(CONTROL_PLANE_WORKLOADS & set(workloads) or settings.get("meta_nodes"))

    @staticmethod
    def roles_in(workloads: Sequence[str], settings: Mapping[str, Any]) -> tuple[str, ...]:
        """The role targets (`nemesis.targets.ROLE_TARGETS`) a run of these
        workloads and settings has: a metastore leader and a placement driver
        only with the control plane on (a workload that needs it, or the
        `meta_nodes` setting), primaries only with a zone as well."""
        roles = ["group-leader"]
        if EmberDB.runs_control_plane(workloads, settings):
            roles += ["meta-leader", "placement-driver"]
            if ZONE_WORKLOADS & set(workloads):
                roles.append("primary")
        return tuple(roles)

    @property
    def control_plane(self) -> bool:
        """Whether the nodes run the metastore, zones and placement driver."""
        return bool(self.settings.get("meta_nodes"))

    def meta_voters(self) -> list[str]:
        """The metastore's voters, named once for ember-node's config and the
        harness's clients: the `meta_nodes` setting, or for "auto" the first
        three bootstrap nodes in name order (ember-node's own reading of it)."""
        raw = self.settings.get("meta_nodes") or "auto"
        if raw == "auto":
            return sorted(self._bootstrap)[:3]
        return node_names(raw, "meta_nodes", [n.name for n in self.nodes])

    def configure(self, workloads: Sequence[str]) -> None:
        """Before `install`: turn the control plane on if a workload needs it,
        with enough partitions for the zone and for change-peers (see the
        module constants), unless the settings chose otherwise."""
        if CONTROL_PLANE_WORKLOADS & set(workloads):
            self.settings.setdefault("meta_nodes", "auto")
        if self.control_plane and "partitions" not in self.settings:
            self.partitions = ZONE_PARTITIONS + FREE_PARTITIONS

    def zone_request(self, workloads: Sequence[str]) -> dict[str, Any] | None:
        """The body of POST /admin/zones/default when a workload drives the zone, else None."""
        if not self.control_plane or not ZONE_WORKLOADS & set(workloads):
            return None
        parts = int(self.settings.get("zone_partitions", min(ZONE_PARTITIONS, self.partitions)))
        return {"replicas": 3, "partitions": parts, "scale_down_s": 2.0}

    def setup(self, workloads: Sequence[str]) -> None:
        """After the first healthy: create the zone when a workload drives it."""
        body = self.zone_request(workloads)
        if body is None:
            return
        problems: dict[str, str] = {}
        for name, url in self.urls().items():
            got = http_answer(f"{url}/admin/zones/default", "POST", body, timeout_s=10)
            if self.zone_made(body, got, name, problems):
                return
        raise DBError(zone_refused(problems))

    def zone_made(
        self, body: Mapping[str, Any], got: Answer, name: str, problems: dict[str, str]
    ) -> bool:
        """Whether `name`'s answer created the zone (then kept); else why not, in `problems`."""
        if got.doc is not None and isinstance(got.doc.get("zone"), dict):
            self.zone_partitions = int(body["partitions"])
            return True
        problems[name] = got.problem or "answered without the zone"
        return False

    def free_groups(self) -> list[str]:
        """The groups no zone can cover: the ones change-peers may move."""
        return self.groups()[self.zone_partitions :] if self.zone_partitions else self.groups()

    def _config(self, node: NodeHandle) -> str:
        peers = ",".join(f"{n.name}={n.ip}:{RAFT_PORT}:{HTTP_PORT}" for n in self.nodes)
        lines = {
            "id": node.name,
            "peers": peers,
            "listen": f"0.0.0.0:{HTTP_PORT}",
            "raft_listen": f"0.0.0.0:{RAFT_PORT}",
            "data_dir": self.root,
            "seed": random.Random(f"{self.seed}/ember/{node.name}").getrandbits(48),
            "partitions": self.partitions,
            "bootstrap": ",".join(self._bootstrap),
        }
        for key, value in self.settings.items():
            if key not in ("bootstrap", "ember_bin", "partitions", "zone_partitions",
                           "clock_faults", *VERSION_LABELS):  # fmt: skip
                lines[key] = value
        if self.control_plane and lines["meta_nodes"] != "auto":
            lines["meta_nodes"] = ",".join(self.meta_voters())  # ember-node reads "n1,n2,n3"
        if self.settings.get("clock_faults"):  # nemesis.clock
            lines["clock_offset_file"] = CLOCK_OFFSET_FILE
        if self.sticky.get(node.name):
            lines["failpoints"] = self.sticky[node.name]
        return "".join(f"{k} = {_toml(v)}\n" for k, v in lines.items())

    def remember_failpoint(
        self, name: str, failpoint: str, params: Mapping[str, Any] | None
    ) -> None:
        """Keep a failpoint the harness switched on at `name` for its restarts
        (off: forgotten; a one-shot is not kept, it fired or will): the node's
        config is written again with it, so however the node is started next
        (a kill's heal, heal-all) it starts with it on."""
        kept = self.sticky.setdefault(name, {})
        before = dict(kept)
        if params is None or params.get("one_shot"):
            kept.pop(failpoint, None)
        else:
            kept[failpoint] = {k: v for k, v in params.items() if v is not None}
        if kept != before:
            self.keep_config(name, failpoint)

    def keep_config(self, name: str, failpoint: str) -> None:
        """Write `name`'s config again (its failpoints changed); DBError if it cannot be."""
        control = self._control
        if control is None:
            return  # never installed: there is nothing to restart
        node = next(n for n in self.nodes if n.name == name)
        try:
            control.run_many({name: f"printf %s {shlex.quote(self._config(node))} > "
                                    f"{self.config_path}"}, timeout_s=30)  # fmt: skip
        except ControlError as exc:
            raise DBError(f"{name}: failpoint {failpoint} switched, but the config a restart "
                          f"reads could not be written: {exc}") from None  # fmt: skip

    def install(self, control: Control) -> None:
        """Kill leftovers, wipe data, write each node's config."""
        self._control = control
        scripts = {}
        for node in self.nodes:
            scripts[node.name] = "; ".join(
                [
                    f"p=$(cat {self.spec.pidfile} 2>/dev/null) && kill -9 $p 2>/dev/null; true",
                    f"{empty_dir(self.root)} && mkdir -p /etc/ember /var/log/ember",
                    f": > {self.log_path}",
                    f"printf %s {shlex.quote(self._config(node))} > {self.config_path}",
                    f"rm -f {CLOCK_OFFSET_FILE}",  # an earlier run's clock fault ends here
                ]
            )
        try:
            control.run_many(scripts, timeout_s=60)
        except ControlError as exc:
            raise DBError(f"cannot install ember: {exc}") from exc

    def urls(self) -> dict[str, str]:
        """Each node's HTTP API."""
        return {n.name: f"http://{n.ip}:{HTTP_PORT}" for n in self.nodes}

    def status(self, name: str) -> dict[str, Any] | None:
        """GET /admin/status."""
        return http_json(self.urls()[name] + "/admin/status")

    def groups(self) -> list[str]:
        """The KV partitions' Raft groups."""
        return [f"part-{i}" for i in range(self.partitions)]

    def bootstrap(self) -> list[str]:
        """The initial voters of every group."""
        return list(self._bootstrap)

    def leaders(self, names: Sequence[str] | None = None) -> dict[str, str]:
        """group -> the node that leads it in the highest term seen."""
        best: dict[str, tuple[int, str]] = {}
        for name in names or [n.name for n in self.nodes]:
            doc = self.status(name)
            for group, g in (doc or {}).get("groups", {}).items():
                if g.get("role") == "leader" and g.get("term", 0) >= best.get(group, (-1, ""))[0]:
                    best[group] = (int(g.get("term", 0)), name)
        return {group: node for group, (_term, node) in best.items()}

    def wait_healthy(
        self, names: Sequence[str], timeout_s: float, gone: Gone | None = None
    ) -> None:
        """Every node answers /health and every group has a leader."""
        deadline = time.monotonic() + timeout_s
        urls = self.urls()
        watch = ExitWatch(gone)
        while True:
            down = [n for n in names if http_json(urls[n] + "/health", timeout_s=1) is None]
            watch.check(down)
            want = set(self.groups()) | ({"meta"} if self.control_plane else set())
            leaderless = [] if down else sorted(want - set(self.leaders(names)))
            moving = [] if down or leaderless else self.rebalancing(urls[names[0]])
            if not down and not leaderless and not moving:
                return
            if time.monotonic() > deadline:
                raise not_healthy(timeout_s, down, leaderless, moving)
            time.sleep(HEALTH_POLL_S)

    def report_applied(self, names: Sequence[str]) -> list[str]:
        """Asks every node to write each group's applied state to its audit log
        (POST /admin/report-applied), so the convergence checker compares the
        replicas where they end, not at their last periodic report; returns
        the nodes that did not answer."""
        urls = self.urls()
        answers = {
            n: http_json(urls[n] + REPORT_APPLIED, "POST", {}, timeout_s=ADMIN_CALL_S)
            for n in names
        }
        return [n for n, doc in answers.items() if doc is None]

    def rebalancing(self, url: str) -> list[str]:
        """The assignment keys still in flight (pending, planned, cancel), read
        twice SETTLE_POLL_S apart so a trigger between two reads is not missed;
        ["unreadable"] when the assignments cannot be read."""
        if not self.zone_partitions:
            return []
        moving: set[str] = set()
        for i in range(2):
            doc = http_json(url + "/admin/assignments", timeout_s=ADMIN_CALL_S)
            if doc is None:
                return ["unreadable"]
            moving |= in_flight(doc)
            if moving:
                break
            if i == 0:
                time.sleep(SETTLE_POLL_S)
        return sorted(moving)

    # -- compact-kill (nemesis.maintenance) --------------------------------------

    maintenance = ("compact",)  # the metastore compacts; it has nothing to defragment

    def maintenance_node(self, target: str) -> str:
        """The `meta` group's leader (commands go through its log; any other
        node answers 421), or the target when no leader is known."""
        from ember.metastore import META_GROUP  # late: the Docker harness needs no ember code

        return self.leaders().get(META_GROUP, target)

    def revision_call(self, node: str) -> Call:
        """A range of one key: its answer carries the metastore's revision."""
        return Call(self.urls()[node] + "/meta/range", {"key": "faultline/nemesis"})

    def revision_in(self, doc: dict[str, Any] | None) -> int | None:
        """The answer's `revision`."""
        rev = (doc or {}).get("revision")
        return rev if isinstance(rev, int) else None

    def maintenance_call(self, node: str, action: str, revision: int) -> Call:
        """POST /meta/compact at `revision`."""
        return Call(self.urls()[node] + "/meta/compact", {"revision": revision})

    def set_failpoint(self, name: str, failpoint: str, params: Mapping[str, Any] | None) -> None:
        """POST or DELETE /admin/failpoints/<failpoint>; DBError if refused."""
        url = f"{self.urls()[name]}/admin/failpoints/{failpoint}"
        heal = {name: [failpoint_off_command(failpoint, self.config_path)]}
        if params is None:
            got = http_answer(url, "DELETE", timeout_s=FAILPOINT_WAIT_S)
        else:
            # Journaled first, with the heal a later `faultline clean` runs on the node.
            journal.note_fault("failpoint", heal, {name: [f"POST {url} {dict(params)}"]})
            got = http_answer(url, "POST", dict(params), timeout_s=FAILPOINT_WAIT_S)
        if got.doc is None:
            # No answer in time is not a refusal: the node may have done it.
            raise DBError(f"{name} did not confirm failpoint {failpoint} "
                          f"{'off' if params is None else 'on'}: {url} {got.problem}")  # fmt: skip
        if params is None:
            journal.note_healed("failpoint", heal)
        self.remember_failpoint(name, failpoint, params)

    def audit_path(self) -> str:
        """events.jsonl in the data dir."""
        return f"{self.root}/events.jsonl"

    def collect(self, control: Control, names: Sequence[str], run: RunDir) -> list[str]:
        """Fetch ember.log and events.jsonl of each node; returns what could not be."""
        return self.fetch_files(
            control, names, run, ((self.log_path, "log"), (self.audit_path(), "events"))
        )


def failpoint_off_command(failpoint: str, config_path: str) -> str:
    """A shell command, run on a node, that switches ember's `failpoint` off
    there: out of the config a restart reads (`remember_failpoint` keeps the
    harness's failpoints there; healing is the end of them all), then in the
    running process (nothing to do, and exit 0, when ember is not running)."""
    url = f"http://127.0.0.1:{HTTP_PORT}/admin/failpoints/{failpoint}"
    program = (
        "import urllib.request as u\n"
        f"try: u.urlopen(u.Request({url!r}, method='DELETE'), timeout=5)\n"
        "except OSError: pass"
    )
    config = shlex.quote(config_path)
    return (f"sed -i '/^failpoints = /d' {config} 2>/dev/null;"
            f" python3 -c {shlex.quote(program)} || true")  # fmt: skip


def in_flight(assignments: Mapping[str, Any]) -> set[str]:
    """The keys of a GET /admin/assignments answer still in flight (pending, planned, cancel)."""
    return {str(a.get("key")) for a in assignments.get("assignments", [])
            if a.get("kind") in ("pending", "planned", "cancel")}  # fmt: skip


def not_healthy(
    timeout_s: float, down: Sequence[str], leaderless: Sequence[str], moving: Sequence[str]
) -> DBError:
    """The error of an ember cluster that did not become healthy in time, naming why."""
    what = (
        f"not answering: {', '.join(down)}"
        if down
        else f"no leader for {', '.join(leaderless[:5])}"
        if leaderless
        else f"rebalance not finished: {', '.join(moving[:5])}"
    )
    return DBError(f"ember not healthy after {timeout_s:g}s ({what}); see {NODE_LOGS}")


def _toml(value: Any) -> str:
    if isinstance(value, Mapping):  # an inline table; keys quoted (failpoint names have dots)
        return "{" + ", ".join(f"{_toml(str(k))} = {_toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
