"""The `change-peers` workload: random membership moves on partition groups.

Each op asks a group's leader (admin API) to change the group's peers:
`add` one node, `remove` one, `replace` one with an outsider, or a
`disjoint` move onto nodes outside the current set. History ops have f
"change-peers", `group` set and value `{group, peers, learners, token,
move}`. The generator keeps what it believes each group's peers are,
starting from the bootstrap voters and updated from completions (a
completion carries the group's configuration as read after the change, when
the worker could read it), so it only asks for moves that make sense. Tokens
increase across the run, so no request can be stale on purpose. With
`learners` on (plan option `change_learners`), most changes also name one
node outside the new voters as a learner, so learner adds, removals and
promotions happen too.

The worker sends to the leader the client last knew for the partition. A
node that answers it does not lead (421 / 503 no-leader: certainly not
applied) may be a removed leader that hears from no one, so the worker then
forgets it, asks every node's status for the highest-term leader and sends
there, a few times, before the op fails. A leader that answers it is not
ready for a change yet (409 change-busy with `settling`: elected so recently
that no entry of its term, or the configuration it inherited, has committed)
is asked again after a pause, a few times: as jraft's, ember's new leader
takes changes once its first entry commits, within a heartbeat round or two.

Outcomes: ok when the STABLE entry committed; fail when the change
certainly did not take effect (refused, or reset during catch-up:
ECATCHUP); info otherwise (a leader stepping down mid-change may leave a
JOINT entry that a later leader completes).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping, Sequence
from typing import Any

from ember.client import EmberClient, Outcome
from harness.interpreter import Reply
from workloads.generator import Completion, Context, Event, Generator, Op, Result

MOVES = ("add", "remove", "replace", "disjoint")
CHANGE_TIMEOUT_S = 20.0
MIN_PEERS = 2  # never shrink a group below this: it must keep serving
LEADER_SEARCHES = 3  # after a not-leader answer: look for the leader this many times
SEARCH_PAUSE_S = 0.5  # between searches that found no leader (an election may be on)
SETTLE_TRIES = 15  # after a settling answer: ask the same leader again this many times
SETTLE_PAUSE_S = 0.2  # before each (a few heartbeat intervals)
LEARNER_SHARE = 0.7  # with learners on: the share of changes that name one


def plan_move(
    move: str, peers: Sequence[str], nodes: Sequence[str], rng: random.Random
) -> list[str] | None:
    """The new peer set for `move`, or None when the move is impossible here."""
    current = sorted(peers)
    outside = sorted(set(nodes) - set(current))
    if move == "add" and outside:
        return sorted([*current, rng.choice(outside)])
    if move == "remove" and len(current) > MIN_PEERS:
        gone = rng.choice(current)
        return [p for p in current if p != gone]
    if move == "replace" and outside:
        gone, new = rng.choice(current), rng.choice(outside)
        return sorted([*(p for p in current if p != gone), new])
    size = min(len(current), len(outside))
    if move == "disjoint" and size >= MIN_PEERS:
        return sorted(rng.sample(outside, size))
    return None


class ChangePeersGen(Generator):
    """Endless seeded change-peers ops, one group at a time per thread."""

    def __init__(
        self,
        rng: random.Random,
        groups: Sequence[str],
        nodes: Sequence[str],
        bootstrap: Sequence[str],
        *,
        first_token: int = 1,
        learners: bool = False,
    ) -> None:
        self.rng = rng
        self.learners = learners
        self.groups, self.nodes = list(groups), list(nodes)
        self.peers: dict[str, list[str]] = {g: sorted(bootstrap) for g in groups}
        self.token = first_token
        self.busy: set[str] = set()

    def op(self, ctx: Context) -> Result:
        group = self.rng.choice(self.groups)
        moves = list(MOVES)
        self.rng.shuffle(moves)
        for move in moves:
            peers = plan_move(move, self.peers[group], self.nodes, self.rng)
            if peers is not None:
                break
        else:
            peers, move = sorted(self.peers[group]), "noop"
        learners: list[str] = []
        spare = sorted(set(self.nodes) - set(peers))
        if self.learners and spare and self.rng.random() < LEARNER_SHARE:
            learners = [self.rng.choice(spare)]
        value = {"group": group, "peers": peers, "learners": learners, "token": self.token,
                 "move": move}  # fmt: skip
        self.token += 1
        return Op(f="change-peers", value=value, group=group, time_ns=ctx.time_ns)

    def update(self, ctx: Context, event: Event) -> None:
        if not isinstance(event, Completion) or event.op.f != "change-peers":
            return
        group = event.op.group or ""
        now = event.value.get("now") if isinstance(event.value, dict) else None
        if isinstance(now, list) and now:
            self.peers[group] = sorted(now)
        elif event.type == "ok":
            self.peers[group] = sorted(event.op.value["peers"])


def group_index(group: str) -> int | None:
    """`part-7` -> 7 (the client's leader cache is keyed by partition)."""
    head, _, tail = group.rpartition("-")
    return int(tail) if head == "part" and tail.isdigit() else None


class ChangePeersWorker:
    """Sends change-peers requests to group leaders over the admin API."""

    def __init__(self, client: EmberClient, node_of: Mapping[str, str]) -> None:
        self.client = client
        self.node_of = node_of

    async def invoke(self, op: Op) -> Reply:
        """Request the change, wait for its end, read the resulting configuration."""
        v = op.value
        body = {"group": v["group"], "peers": v["peers"], "learners": v["learners"],
                "token": v["token"], "timeout_s": CHANGE_TIMEOUT_S}  # fmt: skip
        part = group_index(v["group"])
        base = self.client._leaders.get(part) if part is not None else None
        out = await self.client.request(
            "POST", "/admin/change-peers", body, base=base, partition=part
        )
        for _ in range(LEADER_SEARCHES):
            if not _no_leader(out):
                break
            # The leader we asked (cached, or named by a redirect) is not the
            # leader any more: it may have been removed from the group and
            # hears from no one. The change certainly was not applied, so it is
            # safe to send again, to the node that leads now.
            if part is not None:
                self.client._leaders.pop(part, None)
            leader = await self._find_leader(v["group"])
            if leader is None:
                await asyncio.sleep(SEARCH_PAUSE_S)
                continue
            out = await self.client.request(
                "POST", "/admin/change-peers", body, base=leader, partition=part
            )
        for _ in range(SETTLE_TRIES):
            if not _settling(out):
                break
            # Refused, so certainly not applied: safe to send again.
            await asyncio.sleep(SETTLE_PAUSE_S)
            out = await self.client.request(
                "POST", "/admin/change-peers", body, base=out.url, partition=part
            )
        if out.type == "unknown" and isinstance(out.value, dict) and "id" in out.value:
            out = await self._poll(out, str(out.value["id"]))
        reply = self._classify(out, v)
        now = await self._conf(v["group"], out.url)
        value = dict(v) | {"now": now} if now is not None else dict(v)
        if isinstance(out.value, dict) and out.value.get("status"):
            value["status"] = out.value["status"]
        node = self.node_of.get(out.url or "")
        return Reply(type=reply[0], value=value, error=reply[1], node=node)

    def _classify(self, out: Outcome, v: dict[str, Any]) -> tuple[Any, str | None]:
        if out.type == "fail":
            return "fail", out.error
        if out.type == "unknown" or not isinstance(out.value, dict):
            return "info", out.error or "no result"
        result = out.value.get("result", out.value)
        if not isinstance(result, dict):
            return "info", "change still running"
        if result.get("ok"):
            return "ok", None
        status = result.get("status")
        reason = f"{status}: {result.get('reason', '')}"
        return ("fail" if status == "ECATCHUP" else "info"), reason

    async def _find_leader(self, group: str) -> str | None:
        """The URL of the node that leads `group` in the highest term, asking every
        node's /admin/status at once (None when none says it leads)."""
        urls = list(self.client.urls)
        docs = await asyncio.gather(*(self.client._get_json(u, "/admin/status") for u in urls))
        leading: list[tuple[int, str]] = []
        for url, doc in zip(urls, docs, strict=True):
            st = (doc or {}).get("groups", {}).get(group)
            if isinstance(st, dict) and st.get("role") == "leader":
                leading.append((int(st.get("term", 0)), url))
        return max(leading)[1] if leading else None

    async def _poll(self, out: Outcome, change_id: str) -> Outcome:
        """A change the node did not finish in time: poll its status for a while."""
        for _ in range(int(CHANGE_TIMEOUT_S * 2)):
            await asyncio.sleep(0.5)
            got = await self.client.request("GET", f"/admin/changes/{change_id}", base=out.url)
            if got.ok and isinstance(got.value, dict) and got.value.get("state") == "done":
                return got
        return out

    async def _conf(self, group: str, url: str | None) -> list[str] | None:
        """The group's voters as `url`'s node sees them (None when unreadable)."""
        if url is None:
            return None
        got = await self.client.request("GET", "/admin/status", base=url)
        if not got.ok or not isinstance(got.value, dict):
            return None
        g = got.value.get("groups", {}).get(group)
        if not isinstance(g, dict) or g.get("role") != "leader":
            return None  # only the leader's view is worth believing
        conf = g.get("conf", {})
        if conf.get("joint") or g.get("stage") not in (None, "none"):
            return None
        return sorted(conf.get("peers", []))


def _settling(out: Outcome) -> bool:
    """The leader refused the change only because it is not ready for one yet."""
    return (
        out.type == "fail"
        and out.status == 409
        and isinstance(out.value, dict)
        and out.value.get("error") == "change-busy"
        and out.value.get("settling") is True
    )


def _no_leader(out: Outcome) -> bool:
    """The node answered that it does not lead the group (certainly not applied)."""
    if out.type != "fail" or out.status not in (421, 503):
        return False
    code = out.value.get("error") if isinstance(out.value, dict) else None
    return code in ("no-leader", "not-leader")
