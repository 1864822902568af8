"""The `metastore` workload: revisioned reads, conditional invokes, deletes and watches.

One generator serves every system with a revisioned store (ember's
metastore, etcd); each system brings a small worker that speaks its API
and answers in the shapes below, so the same checkers read both.

Client ops speak docs/models.md's `metastore` model (the linearizability
checker reads them; `checkers/revisions.py` checks their revisions), over a
few keys under `PREFIX`:

- `get`: result {value, mod_revision, revision};
- `put` (value): result the revision after the write; `delete`: result
  {revision, deleted}, the revision after and how many keys it deleted;
- `invoke`: value {if, then, else}; result {succeeded, revision};
- `range` (ember only): a snapshot read of the whole prefix at a past
  revision, value {"revision": r}; result {"at": r, "kvs": [{key, value,
  mod_revision}]}. It is not a linearizable read (it reads the past), so
  the linearizability checker leaves it out and the revisions checker
  checks it against the acknowledged writes. Its result has no top-level
  `revision`: the past it reads must not count as the present it observed.

Watch ops (f "watch", their own thread kind): each watches the prefix from
a revision for `WATCH_S` seconds and completes with what the stream
delivered (checkers/watches.py's shapes): ember's as {"responses": [...],
"unframed": true} (its NDJSON stream sends one event per line, so lines
are no atomic unit: G5 is not judged on it), progress lines as progress
responses, a compacted start as {"compacted": c}. The next watch resumes
at the revision after the last one delivered (so across a run the streams
must deliver every write once, in order, with no gaps), through a node
chosen at random, so a resume crosses nodes and faults. After the final
reads one more watch continues the chain (`WatchGen.closing`), so the
record of writes reaches past every op's revision. Probe watches, when the
plan sends them (workloads.meta_traffic), run on a thread of their own
(kind `probe`, `ProbeGen`), so the chain never waits for one.

`PREFIX` also tells the composed linearizability check which client ops
are the metastore's when a run mixes them with register traffic
(checkers/compose.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple
from urllib.parse import urlencode

import aiohttp

from ember.client import EmberClient, Outcome
from harness.interpreter import Reply
from workloads import meta_traffic
from workloads.generator import (
    Completion,
    Context,
    Event,
    Fn,
    Generator,
    Once,
    Op,
    Result,
    TimeLimit,
)
from workloads.meta_traffic import SLOW_READ_S, Known

log = logging.getLogger(__name__)
PREFIX = "m/"
DEFAULT_KEYS = 4
VALUES = 4
WATCH_S = 3.0
# What every system speaks; ember also deletes and reads the past.
BASIC_MIX = (("get", 0.4), ("put", 0.3), ("invoke", 0.3))
FULL_MIX = (("get", 0.3), ("put", 0.2), ("invoke", 0.3), ("delete", 0.08), ("range", 0.12))


def key_names(count: int = DEFAULT_KEYS) -> list[str]:
    """The workload's keys (all under PREFIX, so one watch sees them all)."""
    return [f"{PREFIX}{i}" for i in range(count)]


def _condition(r: random.Random, key: str) -> dict[str, Any]:
    kind = r.choice(("value", "exists", "version"))
    if kind == "value":
        return {"key": key, "target": "value", "op": "eq", "value": r.randrange(VALUES)}
    if kind == "exists":
        return {"key": key, "target": "exists", "value": r.random() < 0.7}
    return {"key": key, "target": "version", "op": r.choice(("lt", "gt")), "value": r.randrange(4)}


class MetastoreOps(Generator):
    """An endless seeded stream of metastore ops over `keys` keys.

    A `range` reads, and a `compact` compacts, some way behind the newest
    revision a completion reported, so it needs to see completions
    (`update`); `known` shares what it learns with the watch generator.
    `traffic` (workloads.meta_traffic) adds compactions (now and then, and
    right after each delete) and mod-revision comparisons to `mix`.
    """

    def __init__(
        self,
        rng: random.Random,
        keys: int = DEFAULT_KEYS,
        mix: Sequence[tuple[str, float]] = BASIC_MIX,
        traffic: frozenset[str] = frozenset(),
        known: Known | None = None,
    ) -> None:
        self.names = key_names(keys)
        if "compact" in traffic:
            mix = (*mix, ("compact", meta_traffic.COMPACT_WEIGHT))
        self.fs = [f for f, _ in mix]
        self.weights = [w for _, w in mix]
        self.traffic = traffic
        self.known = known or Known()
        self.compact_next = False  # a delete just completed: compact right after it
        self.puts = 0
        self.gen = Fn(self._make, rng)

    @property
    def newest(self) -> int:
        """The highest revision any completion reported."""
        return self.known.newest

    def _make(self, r: random.Random) -> Op:
        if self.compact_next:
            self.compact_next = False
            return Op(f="compact", value=meta_traffic.compact_op_value(r, self.known))
        key = r.choice(self.names)
        f = r.choices(self.fs, self.weights)[0]
        if f == "get":
            return Op(f="get", key=key)
        if f == "put":
            written = r.randrange(VALUES)
            if "resend" in self.traffic:
                # A value no other write has: a resent put applied twice is then
                # seen again after a later write to its key, which no order explains.
                self.puts += 1
                written = VALUES + self.puts
            return Op(f="put", key=key, value=written)
        if f == "delete":
            return Op(f="delete", key=key)
        if f == "compact":
            return Op(f="compact", value=meta_traffic.compact_op_value(r, self.known))
        if f == "range":
            back = r.randrange(1, 20)
            return Op(f="range", key=PREFIX, value={"revision": max(1, self.newest - back)})
        other = r.choice(self.names)
        then: list[dict[str, Any]] = [{"op": "put", "key": key, "value": r.randrange(VALUES)}]
        if r.random() < 0.2:
            then = [{"op": "delete", "key": key}] if "delete" in self.fs else then
        orelse = (
            [{"op": "put", "key": other, "value": r.randrange(VALUES)}] if r.random() < 0.5 else []
        )
        conds = [_condition(r, key)]
        if "compare-mod" in self.traffic and r.random() < 0.5:
            conds.append(meta_traffic.mod_condition(r, r.choice(self.names), self.known))
        value = {"if": conds, "then": then, "else": orelse}
        return Op(f="invoke", key=key, value=value)

    def op(self, ctx: Context) -> Result:
        return self.gen.op(ctx)

    def update(self, ctx: Context, event: Event) -> None:
        if isinstance(event, Completion) and event.type == "ok":
            rev = revision_in(event.value)
            if rev is not None:
                self.known.newest = max(self.known.newest, rev)
            if event.op.f == "compact" and isinstance(event.op.value, dict):
                self.known.compacted = max(self.known.compacted, int(event.op.value["revision"]))
            if event.op.f == "delete" and "compact" in self.traffic:
                self.compact_next = True


def revision_in(value: Any) -> int | None:
    """The revision a completion reports (int result, or a dict's `revision`)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, dict) and isinstance(value.get("revision"), int):
        return int(value["revision"])
    return None


def metastore_ops(
    rng: random.Random,
    keys: int = DEFAULT_KEYS,
    mix: Sequence[tuple[str, float]] = BASIC_MIX,
    traffic: frozenset[str] = frozenset(),
    known: Known | None = None,
) -> Generator:
    """An endless seeded stream of metastore ops (see `MetastoreOps`)."""
    return MetastoreOps(rng, keys, mix, traffic, known)


def final_reads(keys: int = DEFAULT_KEYS) -> list[Op]:
    """One read per key after healing."""
    return [Op(f="get", key=k) for k in key_names(keys)]


class WatchGen(Generator):
    """The chain: back-to-back watches of PREFIX, each resuming after the last
    revision delivered; with `watch-slow` in `traffic`, some read slowly.
    Probe watches run beside it (`ProbeGen`), never in its turn."""

    def __init__(self, rng: random.Random | None = None, traffic: frozenset[str] = frozenset(),
                 known: Known | None = None) -> None:  # fmt: skip
        self.rng, self.traffic, self.known = rng, traffic, known or Known()
        self.next_revision = 1

    def op(self, ctx: Context) -> Result:
        """The next watch (one at a time per thread)."""
        value: dict[str, Any] = {"prefix": PREFIX, "from": self.next_revision}
        return Op(f="watch", value=_maybe_slow(value, self.rng, self.traffic), time_ns=ctx.time_ns)

    def update(self, ctx: Context, event: Event) -> None:
        """Resume after the last revision the completed watch delivered."""
        if not (isinstance(event, Completion) and event.op.f == "watch"):
            return
        events = _note_watched(self.known, event.value)
        if events:
            self.next_revision = max(int(e["revision"]) for e in events) + 1
        compacted = event.value.get("compacted") if isinstance(event.value, dict) else None
        if isinstance(compacted, int):
            # What lies below was compacted away (the store said so): go on from there.
            self.next_revision = max(self.next_revision, compacted)

    @property
    def next_revision(self) -> int:
        """Where the chain resumes: kept in `known`, whose compactions spare it."""
        return self.known.chain_from or 1

    @next_revision.setter
    def next_revision(self, revision: int) -> None:
        self.known.chain_from = revision

    def closing(self) -> Op:
        """The chain's last watch, after the final reads: it resumes where the
        chain stopped at the time limit and runs its `WATCH_S`, so its progress
        lines cover every write and read the run made (the ops still in flight
        at the limit, the final reads)."""
        return Op(f="watch", value={"prefix": PREFIX, "from": self.next_revision})


class ProbeGen(Generator):
    """Probe watches (workloads.meta_traffic's probe kinds), back to back on a
    thread of their own, so the chain never waits for one. A probe the store
    refused (a compacted start) returns at once; the next waits
    REFUSED_PAUSE_S, so refusals spread over the run instead of a burst in
    one millisecond while `Known` still points below the compaction."""

    def __init__(self, rng: random.Random, traffic: frozenset[str], known: Known,
                 keys: int = DEFAULT_KEYS) -> None:  # fmt: skip
        self.rng, self.traffic, self.known = rng, traffic, known
        self.names = key_names(keys)
        self.not_before_ns = 0

    def op(self, ctx: Context) -> Result:
        """The next probe."""
        value = meta_traffic.probe_spec(self.rng, self.traffic, self.known, PREFIX, self.names)
        at = max(ctx.time_ns, self.not_before_ns)
        return Op(f="watch", value=_maybe_slow(value, self.rng, self.traffic), time_ns=at)

    def update(self, ctx: Context, event: Event) -> None:
        """What the probe saw tells later probes where the store is."""
        if isinstance(event, Completion) and event.op.f == "watch":
            _note_watched(self.known, event.value)
            if event.type == "fail":
                self.not_before_ns = event.time_ns + int(meta_traffic.REFUSED_PAUSE_S * 1e9)


def _maybe_slow(value: dict[str, Any], rng: random.Random | None,
                traffic: frozenset[str]) -> dict[str, Any]:  # fmt: skip
    """`value`, read by a slow consumer now and then when `watch-slow` is on."""
    if rng is not None and "watch-slow" in traffic and rng.random() < meta_traffic.SLOW_SHARE:
        return {**value, "slow": True}
    return value


def _note_watched(known: Known, result: Any) -> list[dict[str, Any]]:
    """Raise `known.watched` to what a completed watch saw; its events."""
    events = watch_events(result)
    progress = [r.get("revision") for r in watch_responses(result) if r.get("progress")]
    known.watched = max([known.watched, *(int(e["revision"]) for e in events),
                         *(p for p in progress if isinstance(p, int))])  # fmt: skip
    return events


def closing_watch(gens: Mapping[str, Generator]) -> dict[str, Generator]:
    """The closing watch (`WatchGen.closing`) of a run whose watch thread ran
    the chain, as its own thread kind; none when it did not."""
    chain = gens.get("watch")
    watch = chain.gen if isinstance(chain, TimeLimit) else chain
    return {"watch": Once(watch.closing())} if isinstance(watch, WatchGen) else {}


def watch_reply(stream: dict[str, Any], error: str | None, node: str | None) -> Reply:
    """A watch's completion: ok when it ran its whole time, fail when refused
    before delivering anything (a compacted start), else info (cut off)."""
    if error is None:
        return Reply(type="ok", value=stream, node=node)
    if "compacted" in stream and not stream["responses"]:
        return Reply(type="fail", value=stream, error=error, node=node)
    return Reply(type="info", value=stream, error=error, node=node)


class MetaStreams(NamedTuple):
    """The generators of one run's metastore workload, sharing a `Known`."""

    ops: Generator
    watch: WatchGen  # the chain, on the `watch` thread
    probes: ProbeGen | None  # on the `probe` thread, when the traffic probes


def metastore_streams(
    rng: Callable[[str], random.Random],
    keys: int,
    mix: Sequence[tuple[str, float]],
    traffic: frozenset[str],
) -> MetaStreams:
    """The op stream, the chain of watches and the probes of one run.

    Probes and slow reads draw from streams of their own, and only when on:
    plans that send neither watch exactly as they did before the traffic
    kinds existed."""
    known = Known()
    ops = MetastoreOps(rng("metastore"), keys, mix, traffic, known)
    slow = rng("watch-slow") if "watch-slow" in traffic else None
    probes = ProbeGen(rng("watch-probes"), traffic, known, keys) if meta_traffic.probing(traffic) \
        else None  # fmt: skip
    return MetaStreams(ops, WatchGen(slow, traffic, known), probes)


def watch_responses(result: Any) -> list[dict[str, Any]]:
    """A {responses} watch result's responses ([] for the list shape)."""
    if isinstance(result, dict):
        return [r for r in result.get("responses") or [] if isinstance(r, dict)]
    return []


def watch_events(result: Any) -> list[dict[str, Any]]:
    """The events of a watch's result, either shape (a list, or {responses})."""
    if isinstance(result, list):
        return result
    return [e for r in watch_responses(result) for e in r.get("events") or []]


def _reply(out: Outcome, node_of: Mapping[str, str], value: Any = None) -> Reply:
    node = node_of.get(out.url or "")
    if out.ok:
        return Reply(type="ok", value=value, node=node)
    return Reply(type="fail" if out.type == "fail" else "info", error=out.error, node=node)


class EmberMetaWorker:
    """Runs metastore ops against ember's /meta API (follows 421 to the leader).

    Given a `session` (a client id unique in the cluster: traffic `resend`,
    workloads/meta_traffic.py), every write carries it with its own number,
    and one whose outcome is unknown is sent again with the same number."""

    def __init__(
        self, client: EmberClient, node_of: Mapping[str, str], session: str | None = None
    ) -> None:
        self.client, self.node_of, self.session = client, node_of, session
        self._leader: str | None = None
        self._seq = 0  # the thread runs one op at a time: the only one open is the last

    async def _call(self, op: str, body: dict[str, Any], query: str = "") -> Outcome:
        path = f"/meta/{op}?{query}" if query else f"/meta/{op}"
        out = await self.client.request("POST", path, body, base=self._leader)
        if out.ok:
            self._leader = out.url
        elif out.status is None or out.status >= 500:
            self._leader = None  # down or leaderless: the next call starts elsewhere
            self.client.move_on()
        return out

    async def _write(self, op: str, body: dict[str, Any]) -> Outcome:
        """A write, sent again while its outcome is unknown when in a session."""
        if self.session is None:
            return await self._call(op, body)
        self._seq += 1
        query = urlencode({"client": self.session, "seq": self._seq, "lowest_open": self._seq})
        out = await self._call(op, body, query)
        maybe, resends = out.type == "unknown", 0
        while maybe and not out.ok and resends < meta_traffic.RESENDS:
            resends += 1
            await asyncio.sleep(meta_traffic.RESEND_PAUSE_S * resends)  # a new leader, maybe
            out = await self._call(op, body, query)
        if resends:
            log.info("metastore %s %d of %s sent %d more time(s) after an unknown outcome: "
                     "%s", op, self._seq, self.session, resends, out.error or out.type)  # fmt: skip
        if out.ok or not maybe:
            return out
        # An earlier attempt may have applied, whatever the last one was told.
        error = f"{out.error} (after an attempt whose outcome is unknown)"
        return Outcome("unknown", None, error, out.status, out.url)

    async def invoke(self, op: Op) -> Reply:
        """get / put / delete / invoke / range / compact; anything else is a harness bug (info)."""
        key = op.key or ""
        if op.f in ("get", "put", "delete"):
            body: dict[str, Any] = {"key": key}
            if op.f == "put":
                body["value"] = op.value
            out = await (self._call if op.f == "get" else self._write)(op.f, body)
            v = out.value if isinstance(out.value, dict) else {}
            if op.f == "get":
                got = {k: v.get(k) for k in ("value", "mod_revision", "revision")}
                return _reply(out, self.node_of, got)
            if op.f == "delete":  # whether it deleted: a certain write for the watches
                return _reply(out, self.node_of, {k: v.get(k) for k in ("revision", "deleted")})
            return _reply(out, self.node_of, v.get("revision"))
        if op.f == "invoke":
            out = await self._write("invoke", dict(op.value))
            v = out.value if isinstance(out.value, dict) else {}
            return _reply(out, self.node_of, {"succeeded": v.get("succeeded"),
                                               "revision": v.get("revision")})  # fmt: skip
        if op.f == "compact":
            out = await self._write("compact", {"revision": int(op.value["revision"])})
            v = out.value if isinstance(out.value, dict) else {}
            return _reply(out, self.node_of, {"compact_revision": v.get("compact_revision"),
                                               "revision": v.get("revision")})  # fmt: skip
        if op.f == "range":
            at = int(op.value["revision"])
            out = await self._call("range", {"prefix": key, "revision": at})
            v = out.value if isinstance(out.value, dict) else {}
            kvs = [{k: kv.get(k) for k in ("key", "value", "mod_revision")}
                   for kv in v.get("kvs") or []]  # fmt: skip
            return _reply(out, self.node_of, {"at": v.get("revision", at), "kvs": kvs})
        return Reply(type="info", error=f"metastore workload has no op {op.f!r}")


class EmberWatchWorker:
    """Watches ember's /meta/watch stream on a random metastore replica."""

    def __init__(self, urls: Sequence[str], node_of: Mapping[str, str], rng: random.Random,
                 watch_s: float = WATCH_S) -> None:  # fmt: skip
        self.urls, self.node_of, self.rng, self.watch_s = list(urls), node_of, rng, watch_s
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        """Close the HTTP session."""
        if self._session is not None:
            await self._session.close()

    async def invoke(self, op: Op) -> Reply:
        """Watch for `watch_s`: ok with the stream, info with it when cut off early,
        fail when refused (a compacted start)."""
        url = self.rng.choice(self.urls)
        stream: dict[str, Any] = {"responses": [], "unframed": True}
        if self._session is None:
            self._session = aiohttp.ClientSession()
        try:
            error = await asyncio.wait_for(self._stream(url, op.value, stream), self.watch_s)
        except TimeoutError:
            error = None  # the watch ran its whole time: a normal end
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            error = f"watch cut off: {type(exc).__name__}: {exc}"
        return watch_reply(stream, error, self.node_of.get(url))

    async def _now(self, url: str) -> int:
        """The store's current revision, as `url` answers it (a watch of "now")."""
        assert self._session is not None
        for _ in range(2):  # a follower answers 421 naming the leader
            async with self._session.post(f"{url}/meta/get", json={"key": PREFIX}) as resp:
                doc = await resp.json(content_type=None)
            if resp.status == 421 and doc.get("leader_url"):
                url = str(doc["leader_url"])
                continue
            if resp.status == 200 and isinstance(doc.get("revision"), int):
                return int(doc["revision"])
            break
        raise ValueError(f"no current revision from {url}: HTTP {resp.status}")

    async def _stream(self, url: str, spec: dict[str, Any], stream: dict[str, Any]) -> str:
        assert self._session is not None
        responses: list[dict[str, Any]] = stream["responses"]
        # ember has no "from now": start after the revision the leader reports.
        start = spec["from"] if "from" in spec else await self._now(url) + 1
        params = {"from": str(start)}
        params.update({"key": str(spec["key"])} if "key" in spec else
                      {"prefix": str(spec["prefix"])})  # fmt: skip
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=1.0, sock_read=3.0)
        for _ in range(2):  # a non-replica answers 421 naming one
            async with self._session.get(f"{url}/meta/watch", params=params,
                                         timeout=timeout) as resp:  # fmt: skip
                if resp.status == 421:
                    doc = await resp.json(content_type=None)
                    url = str(doc.get("leader_url") or url)
                    continue
                if resp.status == 410:
                    doc = await resp.json(content_type=None)
                    if isinstance(doc.get("compact_revision"), int):
                        stream["compacted"] = doc["compact_revision"]
                    return f"watch refused: compacted ({doc.get('compact_revision')})"
                if resp.status != 200:
                    return f"watch refused: HTTP {resp.status}"
                async for line in resp.content:
                    if not line.strip():
                        continue
                    item = json.loads(line)
                    if "error" in item:
                        return f"watch ended: {item['error']}"
                    if isinstance(item.get("progress"), int):
                        responses.append({"revision": item["progress"], "progress": True})
                    elif "revision" in item and "key" in item:
                        event = {k: item.get(k) for k in ("key", "revision", "type", "value")}
                        responses.append({"revision": item["revision"], "events": [event]})
                    if spec.get("slow"):
                        await asyncio.sleep(SLOW_READ_S)  # a consumer that falls behind
                return "watch stream closed by the node"
        return "watch redirected too often"
