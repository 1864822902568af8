"""An asyncio client for etcd v3 over its JSON gateway (grpc-gateway, /v3/...).

Why the gateway and not a Python etcd library: python-etcd3 is
unmaintained (its generated protobuf code breaks on protobuf >= 4) and the
maintained forks pull grpcio, a large native wheel, into the harness; the
gateway is part of etcd itself (on by default in 3.4), speaks plain JSON,
and aiohttp is already a dependency. Keys and values are base64; int64
fields come back as strings; fields equal to zero are left out.

Every call is one POST to one node (etcd forwards to the leader), never
retried: a retry would hide whether the first attempt took effect (aiohttp
re-sends after a dropped keep-alive only for idempotent methods; every
gateway call is a POST, so it never does). Outcomes
are `ember.client.Outcome`s, so the workers written for ember's client read
them unchanged. Classification, the part that decides what the checkers
may believe:

- `ok`: a 200 with a JSON body;
- `fail`: the request certainly did not take effect: the node refused the
  connection, or answered an error etcd returns before proposing anything
  (`DEFINITE_ERRORS`), or the call was a read;
- `unknown` (history `info`): anything else: a timeout, a dropped
  connection, "request timed out", "leader changed".

Revisions: an empty etcd store is at revision 1, the metastore model's
(docs/models.md) at 0. Every revision crossing this client is shifted by
`REVISION_OFFSET` (reported ones down, requested ones up), so the checkers
see the model's numbering; an absent key's mod_revision stays 0.
"""

from __future__ import annotations

import asyncio
import base64
import random
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp
import msgspec

from ember.client import Outcome, OutcomeType

# etcd errors that mean the request was never proposed to Raft.
DEFINITE_ERRORS = (
    "rpc not supported for learner",
    "etcdserver: no leader",
    "etcdserver: too many requests",
    "etcdserver: not capable",
    "etcdserver: unhealthy cluster",
    "etcdserver: member not found",
    "etcdserver: can only promote a learner member",
    "etcdserver: learner member is not in sync",
    "etcdserver: peerURL exists",
    "etcdserver: re-configuration failed due to not enough started members",
    "etcdserver: too many learner members",
)


def b64(text: str) -> str:
    """A key or value as the gateway wants it."""
    return base64.b64encode(text.encode()).decode()


def unb64(text: str | None) -> str | None:
    """The inverse of `b64` (None stays None)."""
    return None if text is None else base64.b64decode(text).decode()


def int_value(raw: str | None) -> Any:
    """A stored value back as the workload wrote it (an int, or the text)."""
    text = unb64(raw)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return text


def prefix_end(prefix: str) -> str:
    """etcd's range_end for every key starting with `prefix`."""
    raw = bytearray(prefix.encode())
    raw[-1] += 1
    return base64.b64encode(bytes(raw)).decode()


def is_definite(error: str) -> bool:
    """Whether an etcd error message says the request was never applied."""
    return any(e in error for e in DEFINITE_ERRORS)


REVISION_OFFSET = 1


def model_revision(raw: Any) -> int:
    """An etcd revision (int or the gateway's string) in the model's numbering."""
    value = int(raw or 0)
    return value - REVISION_OFFSET if value > 0 else 0


def revision_of(doc: dict[str, Any]) -> int:
    """The store revision a response's header reports, in the model's numbering."""
    return model_revision(doc.get("header", {}).get("revision", 0))


class EtcdClient:
    """One client thread's connection pool to the cluster's members."""

    def __init__(
        self,
        urls: Callable[[], Sequence[str]],
        *,
        rng: random.Random | None = None,
        timeout_s: float = 5.0,
    ) -> None:
        self.urls = urls
        self.rng = rng or random.Random(0)
        self.timeout_s = timeout_s
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            timeout = aiohttp.ClientTimeout(total=self.timeout_s)
            self._session = aiohttp.ClientSession(timeout=timeout)
        return self._session

    async def close(self) -> None:
        """Close the connection pool."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    def pick(self) -> str:
        """A member to send the next request to."""
        urls = list(self.urls())
        if not urls:
            raise RuntimeError("no etcd member to talk to")
        return self.rng.choice(urls)

    async def call(
        self, path: str, body: dict[str, Any], *, read: bool = False, base: str | None = None
    ) -> Outcome:
        """POST `body` to `path` on one member; see the module doc for outcomes."""
        url = base or self.pick()
        try:
            async with self._http().post(url + path, json=body) as resp:
                raw = await resp.read()
                status = resp.status
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
            # No connection (refused, or none made in time): nothing was sent.
            return Outcome(type="fail", error=f"cannot connect: {exc}", url=url)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            kind: OutcomeType = "fail" if read else "unknown"
            return Outcome(type=kind, error=f"{type(exc).__name__}: {exc}", url=url)
        try:
            doc = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            doc = {"error": raw[:200].decode(errors="replace")}
        if status == 200 and isinstance(doc, dict) and "error" not in doc:
            return Outcome(type="ok", value=doc, status=status, url=url)
        error = str(doc.get("error") or doc.get("message") if isinstance(doc, dict) else doc)
        kind = "fail" if read or is_definite(error) else "unknown"
        return Outcome(type=kind, error=error, status=status, url=url)

    # -- the register workload's calls (ember.client's shapes) -------------

    async def get(self, key: str) -> Outcome:
        """The key's value (None when absent); a linearizable read."""
        out = await self.call("/v3/kv/range", {"key": b64(key)}, read=True)
        if not out.ok:
            return out
        kvs = out.value.get("kvs") or []
        return Outcome(type="ok", value=int_value(kvs[0].get("value")) if kvs else None,
                       url=out.url)  # fmt: skip

    async def put(self, key: str, value: Any) -> Outcome:
        """Put; ok value is the revision of the write."""
        out = await self.call("/v3/kv/put", {"key": b64(key), "value": b64(str(value))})
        return Outcome(type="ok", value=revision_of(out.value), url=out.url) if out.ok else out

    async def cas(self, key: str, expected: Any, new: Any) -> Outcome:
        """A txn: if value == expected then put new; ok value [swapped, revision]."""
        conds = [{"key": key, "target": "value", "value": expected}]
        out = await self.txn(conds, [{"op": "put", "key": key, "value": new}], [])
        if not out.ok:
            return out
        return Outcome(type="ok", value=[out.value["succeeded"], out.value["revision"]],
                       url=out.url)  # fmt: skip

    # -- metastore-style calls ---------------------------------------------

    async def get_rev(self, key: str) -> Outcome:
        """{value, mod_revision, revision} as docs/models.md's metastore `get`."""
        out = await self.call("/v3/kv/range", {"key": b64(key)}, read=True)
        if not out.ok:
            return out
        kvs = out.value.get("kvs") or []
        kv = kvs[0] if kvs else {}
        value = {
            "value": int_value(kv.get("value")),
            "mod_revision": model_revision(kv.get("mod_revision", 0)),
            "revision": revision_of(out.value),
        }
        return Outcome(type="ok", value=value, url=out.url)

    async def txn(
        self, conds: list[dict[str, Any]], then: list[dict[str, Any]], orelse: list[dict[str, Any]]
    ) -> Outcome:
        """A metastore `invoke` as an etcd txn; ok value {succeeded, revision}."""
        body = {"compare": [compare(c) for c in conds],
                "success": [request(w) for w in then],
                "failure": [request(w) for w in orelse]}  # fmt: skip
        out = await self.call("/v3/kv/txn", body)
        if not out.ok:
            return out
        value = {"succeeded": bool(out.value.get("succeeded", False)),
                 "revision": revision_of(out.value)}  # fmt: skip
        return Outcome(type="ok", value=value, url=out.url)

    async def delete(self, key: str) -> Outcome:
        """Delete one key; ok value {revision, deleted} (docs/models.md's metastore)."""
        out = await self.call("/v3/kv/deleterange", {"key": b64(key)})
        if not out.ok:
            return out
        value = {"revision": revision_of(out.value), "deleted": int(out.value.get("deleted", 0))}
        return Outcome(type="ok", value=value, url=out.url)

    async def range_at(self, prefix: str, revision: int) -> Outcome:
        """The keys under `prefix` as they were at (model) `revision`: {at, kvs}."""
        body = {"key": b64(prefix), "range_end": prefix_end(prefix),
                "revision": str(revision + REVISION_OFFSET)}  # fmt: skip
        out = await self.call("/v3/kv/range", body, read=True)
        if not out.ok:
            return out
        kvs = [{"key": unb64(kv.get("key")), "value": int_value(kv.get("value")),
                "mod_revision": model_revision(kv.get("mod_revision"))}
               for kv in out.value.get("kvs") or []]  # fmt: skip
        return Outcome(type="ok", value={"at": revision, "kvs": kvs}, url=out.url)

    async def compact(self, revision: int) -> Outcome:
        """Compact the history below (model) `revision`: {compact_revision, revision}."""
        out = await self.call("/v3/kv/compaction", {"revision": str(revision + REVISION_OFFSET)})
        if not out.ok:
            return out
        value = {"compact_revision": revision, "revision": revision_of(out.value)}
        return Outcome(type="ok", value=value, url=out.url)

    # -- membership ----------------------------------------------------------

    async def members(self, base: str | None = None) -> Outcome:
        """The member list (ok value: the gateway's `members`)."""
        out = await self.call("/v3/cluster/member/list", {}, read=True, base=base)
        return (
            Outcome(type="ok", value=out.value.get("members") or [], url=out.url) if out.ok else out
        )

    async def member_add(self, peer_url: str, *, learner: bool) -> Outcome:
        """Add a member (a learner unless told otherwise)."""
        return await self.call("/v3/cluster/member/add",
                               {"peerURLs": [peer_url], "isLearner": learner})  # fmt: skip

    async def member_promote(self, member_id: str) -> Outcome:
        """Promote a learner to voter (refused while it lags the leader)."""
        return await self.call("/v3/cluster/member/promote", {"ID": member_id})

    async def member_remove(self, member_id: str) -> Outcome:
        """Remove a member."""
        return await self.call("/v3/cluster/member/remove", {"ID": member_id})


_TARGETS = {
    "value": ("VALUE", "value"),
    "mod_revision": ("MOD", "mod_revision"),
    "create_revision": ("CREATE", "create_revision"),
    "version": ("VERSION", "version"),
}
_RESULTS = {"eq": "EQUAL", "ne": "NOT_EQUAL", "lt": "LESS", "gt": "GREATER"}


def compare(cond: dict[str, Any]) -> dict[str, Any]:
    """A metastore condition {key, target, op, value} as an etcd Compare.

    `exists` becomes create_revision > 0 (or == 0): etcd has no exists test.
    A value compare against an absent key is false in etcd, and None never
    equals a stored value in the model either.
    """
    target, op, value = cond["target"], cond.get("op", "eq"), cond.get("value")
    if target == "exists":
        target, op, value = "create_revision", ("gt" if value else "eq"), 0
    name, field = _TARGETS[target]
    if target == "value":
        raw = b64(str(value))
    elif target in ("mod_revision", "create_revision") and int(value or 0) > 0:
        raw = str(int(value or 0) + REVISION_OFFSET)
    else:
        raw = str(int(value or 0))
    return {"key": b64(cond["key"]), "target": name, "result": _RESULTS[op], field: raw}


def request(write: dict[str, Any]) -> dict[str, Any]:
    """A metastore write {op, key, value} as an etcd RequestOp."""
    if write["op"] == "put":
        return {"request_put": {"key": b64(write["key"]), "value": b64(str(write["value"]))}}
    if write["op"] == "delete":
        return {"request_delete_range": {"key": b64(write["key"])}}
    raise ValueError(f"no etcd request for write op {write['op']!r}")


async def watch(
    session: aiohttp.ClientSession,
    url: str,
    spec: dict[str, Any],
    duration_s: float,
    slow_s: float = 0.0,
) -> tuple[dict[str, Any], str | None]:
    """Watch `spec` ({key} or {prefix}, `from` a model revision or absent for
    now) for `duration_s`: (stream, error), the stream in checkers/watches.py's
    {responses} shape (etcd's responses are its atomic units: framed).

    Progress notifications (requested on the stream) are kept as such; a
    start below the compaction point ends the stream with `compacted`. The
    error is None when the stream ran its whole time (it is cut then, on
    purpose), else why it ended early (what was delivered until then still
    counts). `slow_s`: a pause after each response, a consumer falling behind.
    """
    create: dict[str, Any] = {"progress_notify": True}
    if "key" in spec:
        create["key"] = b64(str(spec["key"]))
    else:
        create.update(key=b64(str(spec["prefix"])), range_end=prefix_end(str(spec["prefix"])))
    if spec.get("from"):
        create["start_revision"] = str(int(spec["from"]) + REVISION_OFFSET)
    stream: dict[str, Any] = {"responses": []}
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=3)

    async def run() -> str | None:
        async with session.post(url + "/v3/watch", json={"create_request": create},
                                timeout=timeout) as resp:  # fmt: skip
            if resp.status != 200:
                return f"watch refused: HTTP {resp.status}"
            async for line in resp.content:
                doc = msgspec.json.decode(line)
                result = doc.get("result") or {}
                if doc.get("error"):
                    return str(doc["error"])
                if result.get("compact_revision"):
                    stream["compacted"] = model_revision(result["compact_revision"])
                if result.get("canceled"):
                    return str(result.get("cancel_reason") or "canceled")
                response = _response(result)
                if response is not None:
                    stream["responses"].append(response)
                if slow_s:
                    await asyncio.sleep(slow_s)
        return "stream ended"

    try:
        return stream, await asyncio.wait_for(run(), duration_s)
    except TimeoutError:
        return stream, None
    except (aiohttp.ClientError, OSError, msgspec.DecodeError) as exc:
        return stream, f"{type(exc).__name__}: {exc}"


def _response(result: dict[str, Any]) -> dict[str, Any] | None:
    """One watch response as events or a progress notification; None for the
    creation acknowledgement (no events, no progress)."""
    revision = revision_of(result)
    events = [{"key": unb64(e.get("kv", {}).get("key")),
               "value": int_value(e.get("kv", {}).get("value")),
               "revision": model_revision(e.get("kv", {}).get("mod_revision")),
               "type": e.get("type", "PUT")} for e in result.get("events") or []]  # fmt: skip
    if events:
        return {"revision": revision, "events": events}
    if result.get("created") or result.get("canceled") or not revision:
        return None
    return {"revision": revision, "progress": True}  # etcd's IsProgressNotify
