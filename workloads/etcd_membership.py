"""The etcd membership workload: the etcd counterpart of change-peers.

Moves, one per op (f "change-peers", group "etcd", so the stats checker
and the reports treat them as membership changes):

- `add`: a spare node joins as a learner (member add --learner, then etcd
  started there with `initial-cluster-state=existing` and empty data);
- `promote`: the learner becomes a voter (etcd refuses while it lags the
  leader: the worker retries for a while, then the op fails);
- `remove`: a voter (never below `MIN_VOTERS`) or the learner leaves; its
  etcd is stopped and its data wiped;
- `replace`: remove one voter, then add a spare as learner (promoted by a
  later `promote`).

The generator is pure: it keeps what it believes the voters and learners
are, from the bootstrap members and then from each completion, which
carries the member list read after the move (`voters`, `learners`) when
the worker could read it. etcd 3.4 allows one learner at a time.

Outcomes: ok when every step was acknowledged; fail when the first step
certainly did not take effect; info otherwise (a member add whose answer
was lost may have happened: the next read of the member list tells).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from harness.control import Control
from harness.dbs.etcd import GROUP, EtcdDB
from harness.dbs.etcd_client import EtcdClient
from harness.interpreter import Reply
from harness.process_db import DBError
from workloads.generator import Completion, Context, Event, Generator, Op, Result

MIN_VOTERS = 3
PROMOTE_TRIES = 20
PROMOTE_WAIT_S = 0.5
Kind = Literal["ok", "fail", "info"]


def moves(voters: Sequence[str], learners: Sequence[str], spares: Sequence[str]) -> list[str]:
    """The moves that make sense in this membership."""
    out = []
    if spares and not learners:
        out.append("add")
    if learners:
        out += ["promote", "remove"]
    if len(voters) > MIN_VOTERS:
        out.append("remove")
        if spares and not learners:
            out.append("replace")
    return sorted(set(out))


class MembershipGen(Generator):
    """Seeded membership moves over `nodes`, starting from `bootstrap` voters."""

    def __init__(self, rng: random.Random, nodes: Sequence[str], bootstrap: Sequence[str]) -> None:
        self.rng = rng
        self.nodes = list(nodes)
        self.voters = sorted(bootstrap)
        self.learners: list[str] = []

    def spares(self) -> list[str]:
        """Nodes that are neither voters nor learners."""
        return sorted(set(self.nodes) - set(self.voters) - set(self.learners))

    def op(self, ctx: Context) -> Result:
        """The next move (a `noop` read of the members when none makes sense)."""
        choices = moves(self.voters, self.learners, self.spares())
        move = self.rng.choice(choices) if choices else "noop"
        value: dict[str, Any] = {"group": GROUP, "move": move}
        if move == "add":
            value["node"] = self.rng.choice(self.spares())
        elif move == "promote":
            value["node"] = self.learners[0]
        elif move == "remove":
            pool = self.learners or self.voters
            value["node"] = self.rng.choice(pool)
        elif move == "replace":
            value["node"] = self.rng.choice(self.voters)
            value["add"] = self.rng.choice(self.spares())
        return Op(f="change-peers", value=value, group=GROUP, time_ns=ctx.time_ns)

    def update(self, ctx: Context, event: Event) -> None:
        """Believe the member list a completion read (else an ok move's intent)."""
        if not isinstance(event, Completion) or event.op.f != "change-peers":
            return
        v = event.value if isinstance(event.value, dict) else {}
        if isinstance(v.get("voters"), list):
            self.voters = sorted(v["voters"])
            self.learners = sorted(v.get("learners") or [])
        elif event.type == "ok":
            self._apply(event.op.value)

    def _apply(self, v: dict[str, Any]) -> None:
        node, move = v.get("node"), v["move"]
        if move in ("remove", "replace"):
            self.voters = [n for n in self.voters if n != node]
            self.learners = [n for n in self.learners if n != node]
        if move == "add":
            self.learners = [str(node)]
        if move == "replace":
            self.learners = [str(v["add"])]
        if move == "promote":
            self.learners = []
            self.voters = sorted({*self.voters, str(node)})


class MembershipWorker:
    """Carries out membership moves with the member API and the nodes' etcd."""

    def __init__(self, client: EtcdClient, db: EtcdDB, control: Control,
                 node_of: Mapping[str, str]) -> None:  # fmt: skip
        self.client, self.db, self.control, self.node_of = client, db, control, node_of

    async def invoke(self, op: Op) -> Reply:
        """Do the move; the completion carries the member list read afterwards."""
        v = dict(op.value)
        kind: Kind
        move, node = v["move"], v.get("node")
        if move == "noop":
            kind, error = "ok", None
        elif move == "add":
            kind, error = await self._add(str(node))
        elif move == "promote":
            kind, error = await self._promote(str(node))
        elif move == "remove":
            kind, error = await self._remove(str(node))
        elif move == "replace":
            kind, error = await self._remove(str(node))
            if kind == "ok":
                kind, error = await self._add(str(v["add"]))
                kind = "info" if kind == "fail" else kind  # the removal happened
        else:
            return Reply(type="info", error=f"membership workload has no move {move!r}")
        members = await self._read()
        if members is not None:
            self.db.note_learners({n for n, learner in members.items() if learner})
            v["voters"] = sorted(n for n, learner in members.items() if not learner)
            v["learners"] = sorted(n for n, learner in members.items() if learner)
        return Reply(type=kind, value=v, error=error)

    async def _ids(self) -> dict[str, tuple[str, bool]] | None:
        out = await self.client.members()
        if not out.ok:
            return None
        ids = {}
        for m in out.value:
            name = self.db.node_of_peer((m.get("peerURLs") or [""])[0])
            if name is not None:
                ids[name] = (str(m["ID"]), bool(m.get("isLearner", False)))
        return ids

    async def _read(self) -> dict[str, bool] | None:
        ids = await self._ids()
        return None if ids is None else {n: learner for n, (_id, learner) in ids.items()}

    async def _add(self, node: str) -> tuple[Kind, str | None]:
        out = await self.client.member_add(self.db.peer_url(node), learner=True)
        if not out.ok:
            return ("fail" if out.type == "fail" else "info"), out.error
        cluster = {}
        for m in out.value.get("members") or []:
            url = (m.get("peerURLs") or [""])[0]
            name = self.db.node_of_peer(url)
            if name is not None:
                cluster[name] = url
        try:
            await asyncio.to_thread(self.db.join, self.control, node, cluster)
        except DBError as exc:
            return "info", f"added, but etcd did not start on {node}: {exc}"
        return "ok", None

    async def _promote(self, node: str) -> tuple[Kind, str | None]:
        error: str | None = None
        for _ in range(PROMOTE_TRIES):
            ids = await self._ids()
            if ids is None or node not in ids:
                return (
                    "fail",
                    f"{node} is not a member" if ids is not None else "members unreadable",
                )
            out = await self.client.member_promote(ids[node][0])
            if out.ok:
                return "ok", None
            error = out.error
            if out.type != "fail" or "in sync" not in (error or ""):
                return ("fail" if out.type == "fail" else "info"), error
            await asyncio.sleep(PROMOTE_WAIT_S)  # the learner is still catching up
        return "fail", error

    async def _remove(self, node: str) -> tuple[Kind, str | None]:
        ids = await self._ids()
        if ids is None or node not in ids:
            return "fail", f"{node} is not a member" if ids is not None else "members unreadable"
        out = await self.client.member_remove(ids[node][0])
        if not out.ok:
            return ("fail" if out.type == "fail" else "info"), out.error
        try:
            await asyncio.to_thread(self.db.leave, self.control, node)
        except DBError as exc:  # removed, but still running or holding data
            return "info", f"removed, but {node} was not stopped: {exc}"
        return "ok", None
