"""One run dir -> rows of the lake's tables (pure Python; runs on executors).

Theory of operation. A run is small enough for one machine (the pre-check in
pipeline/precheck.py handles the histories that are not), so each run is
read whole with the checkers' own parsers: `checkers.history` validates and
pairs the history, `checkers.stats` finds its fault and membership-change
windows and the unavailability inside them, `checkers.audit` reads the
nodes' audit logs. The rows follow `pipeline.schemas.TABLES` column order.

A run whose files cannot be trusted raises `SkipRunError` with the reason, and the
job records it instead of failing. A run that crashed before it was checked
(no results.json, perhaps a torn last history line) is not malformed: it is
ingested with the verdict "crashed".

Audit events are placed on the history's clock by `checkers.audit.run_clock`,
the one mapping the checkers and the report use too (docs/events.md, "Placed
walls"): a node's `mono_ns` counts from its own process's start and restarts
at zero after a kill, so it is never read as history time here.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from checkers.api import UNKNOWN
from checkers.audit import load_audit, run_clock
from checkers.history import Event, HistoryError, Operation, iter_history, pair
from checkers.stats import NS_PER_MS, change_windows, fault_windows, longest_gap

CRASHED = "crashed"
PHASES = ("catching-up", "joint", "stable", "pending written", "cancel")
IDLE = "idle"  # a fault outside every phase above
_VERSION_KEYS = ("version", "ember_version", "git_rev", "git_revision")


class SkipRunError(Exception):
    """A run the ingest skips, with the reason it cannot be trusted."""


def run_id(store: str | os.PathLike[str], run: str | os.PathLike[str]) -> str:
    """A run's identity in the lake: its dir relative to the store."""
    return Path(run).resolve().relative_to(Path(store).resolve()).as_posix()


def _decode(path: Path, what: str, head: Callable[[bytes], dict[str, Any]] | None = None
            ) -> dict[str, Any]:  # fmt: skip
    """The JSON object in `path`; with `head`, only the part it decodes, when
    the file fits it (else the whole object, or the reason it is malformed)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SkipRunError(f"cannot read {what}: {exc.strerror}") from None
    # A shape `head` does not take, or no JSON at all: the whole decoding
    # below gives the rows or the reason, as without `head`.
    with contextlib.suppress(msgspec.DecodeError):
        if head is not None:
            return head(data)
    try:
        value = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise SkipRunError(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise SkipRunError(f"{what} is not a JSON object")
    return value


class _CheckerHead(msgspec.Struct, gc=False):
    valid: Any = msgspec.UNSET
    anomalies: Any = msgspec.UNSET


class _ResultsHead(msgspec.Struct, gc=False):
    """The fields of results.json the lake reads (`small_tables`,
    `_anomaly_rows`). The checkers' `figures` are most of the file (the
    linearizability search's per-key figures in a sim run's 530 KB), and
    msgspec skips them unbuilt, in a third of the time decoding them took."""

    valid: Any = msgspec.UNSET
    # Typed, or msgspec would build the whole file.
    checkers: dict[str, _CheckerHead] | msgspec.UnsetType = msgspec.UNSET
    reasons: Any = msgspec.UNSET
    elapsed_s: Any = msgspec.UNSET


_RESULTS_HEAD = msgspec.json.Decoder(_ResultsHead)


def _results_head(data: bytes) -> dict[str, Any]:
    """results.json as a dict of the fields the lake reads, absent ones absent."""

    def present(head: msgspec.Struct) -> dict[str, Any]:
        return {k: v for k, v in msgspec.structs.asdict(head).items() if v is not msgspec.UNSET}

    out = present(_RESULTS_HEAD.decode(data))
    if "checkers" in out:
        out["checkers"] = {name: present(c) for name, c in out["checkers"].items()}
    return out


def _history(path: Path, crashed: bool) -> list[Event]:
    """The validated history; a crashed run may end in one torn line."""
    events: list[Event] = []
    try:
        for ev in iter_history(path):
            events.append(ev)
    except OSError as exc:
        raise SkipRunError(f"cannot read history.jsonl: {exc.strerror}") from None
    except HistoryError as exc:
        with path.open("rb") as fh:
            lines = sum(1 for line in fh if line.strip())
        if not (crashed and len(events) == lines - 1):
            raise SkipRunError(f"malformed history: {exc}") from None
    return events


def _text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return "+".join(str(v) for v in value) or "none"
    return str(value) if value not in (None, "") else "none"


def _plan_facts(plan: dict[str, Any]) -> dict[str, Any]:
    options, settings = _dict(plan.get("options")), _dict(plan.get("db_settings"))

    def find(*keys: str) -> str:
        for k in keys:
            for where in (plan, options, settings):
                if where.get(k) not in (None, ""):
                    return str(where[k])
        return "unknown"

    # `revisions` is derived from the workloads (harness.plan.dump): runs
    # written before it existed are the same plan.
    stripped = {k: v for k, v in plan.items() if k not in _VERSION_KEYS and k != "revisions"}
    stripped["options"] = {k: v for k, v in options.items() if k not in _VERSION_KEYS}
    stripped["db_settings"] = {k: v for k, v in settings.items() if k not in _VERSION_KEYS}
    key = hashlib.sha1(msgspec.json.encode(stripped, order="sorted")).hexdigest()[:16]
    nodes = plan.get("nodes")
    return {
        "version": find("ember_version", "version"),
        "git_rev": find("git_rev", "git_revision"),
        "plan_key": key,
        "nodes": len(nodes) if isinstance(nodes, list) else None,
    }


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _date(started: str) -> str:
    if len(started) >= 8 and started[:8].isdigit():
        return f"{started[:4]}-{started[4:6]}-{started[6:8]}"
    return "unknown"


# --- audit events: phases, changes, rebalances --------------------------------


AT = "history_ns"  # set on each event by `audit_events`: its place on the history's clock
CHANGE_KINDS = ("change-stage", "change-done", "change-error")
REBALANCE_KINDS = ("assignments-written", "rebalance-request", "cancel-request")
# The only audit events the lake reads (phases, changes, rebalances): a sixth
# of a simulated run's, so the rest are never built (checkers.audit.read_events).
LAKE_KINDS = frozenset(CHANGE_KINDS + REBALANCE_KINDS)


def audit_events(at: Callable[[dict[str, Any]], int], audit: dict[str, list[dict[str, Any]]]
                 ) -> list[dict[str, Any]]:  # fmt: skip
    """Every node's audit events merged in history-time order, each with `AT`
    (its time by `at`: checkers.audit.run_clock)."""
    merged = [ev for events in audit.values() for ev in events]
    for ev in merged:
        ev[AT] = at(ev)
    return sorted(merged, key=lambda ev: ev[AT])


def phase_intervals(events: list[dict[str, Any]], end: int) -> list[tuple[str, int, int]]:
    """(phase, start, end) for every protocol phase the audit events show.

    A change-peers stage lasts from its `change-stage` event until the group's
    next stage event (or the change's done/error); a pending or cancel
    assignment lasts from the write that sets its key until one that clears it.
    """
    out: list[tuple[str, int, int]] = []
    open_stage: dict[str, tuple[str, int]] = {}  # group -> (stage, since)
    open_key: dict[str, tuple[str, int]] = {}  # assignment key -> (phase, since)
    for ev in events:
        t, kind, group = ev[AT], ev.get("kind"), str(ev.get("group"))
        if kind in CHANGE_KINDS:
            if group in open_stage:
                was, since = open_stage.pop(group)
                out.append((was, since, t))
            if kind == "change-stage" and ev.get("stage") in PHASES:
                open_stage[group] = (str(ev["stage"]), t)
        elif kind == "assignments-written" and isinstance(ev.get("keys"), dict):
            for key, change in ev["keys"].items():
                phase = {"pending": "pending written", "cancel": "cancel"}.get(
                    str(key).rsplit(".", 1)[-1]
                )
                if phase is None:
                    continue
                if key in open_key:
                    _, since = open_key.pop(key)
                    out.append((phase, since, t))
                if isinstance(change, dict) and change.get("new") not in (None, [], {}):
                    open_key[key] = (phase, t)
    out.extend((stage, since, end) for stage, since in open_stage.values())
    out.extend((phase, since, end) for phase, since in open_key.values())
    return out


def changes(events: list[dict[str, Any]], end: int) -> list[dict[str, Any]]:
    """Membership changes by (group, token): when, which stages, how they ended."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for ev in events:
        kind, token = ev.get("kind"), ev.get("token")
        if kind not in CHANGE_KINDS or token is None:
            continue
        t = ev[AT]
        if kind == "change-stage" and ev.get("stage") == "none":
            continue
        key = (str(ev.get("group")), str(token))
        change = found.setdefault(key, {"start": t, "end": None, "stages": [],
                                        "outcome": "unfinished"})  # fmt: skip
        if kind == "change-stage":
            if ev.get("stage") not in change["stages"]:
                change["stages"].append(str(ev.get("stage")))
            continue
        change["end"] = t
        change["outcome"] = "done" if kind == "change-done" else f"error:{ev.get('status')}"
    for change in found.values():
        change["end"] = end if change["end"] is None else change["end"]
    return [{"group": g, "token": tok, **c} for (g, tok), c in found.items()]


def rebalance_rows(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """(node, kind, time, zone, partition, keys, revision, direction, outcome) per event."""
    rows = []
    for ev in events:
        kind = ev.get("kind")
        if kind not in REBALANCE_KINDS:
            continue
        keys = sorted(str(k) for k in ev["keys"]) if isinstance(ev.get("keys"), dict) else None
        revision = ev.get("revision", ev.get("request_revision"))
        rows.append((
            _opt(ev.get("node")), kind, ev[AT], _opt(ev.get("zone")),
            _opt(ev.get("partition")), keys, revision if isinstance(revision, int) else None,
            _opt(ev.get("direction")), _opt(ev.get("outcome")),
        ))  # fmt: skip
    return rows


def _opt(value: Any) -> str | None:
    return None if value is None else str(value)


def _overlaps(windows: list[tuple[int, int]], start: int, end: int) -> bool:
    return any(ws <= end and start <= we for ws, we in windows)


# --- one run ------------------------------------------------------------------


class RunMeta(NamedTuple):
    """What a run's rows need besides its history (read by `read_meta`)."""

    rid: str
    run_dir: Path
    plan: dict[str, Any]
    results: dict[str, Any]
    crashed: bool
    audit: list[dict[str, Any]]  # every node's events, placed on history time
    at: Callable[[dict[str, Any]], int]


class HistoryFacts(NamedTuple):
    """What a run's small tables need from its history. Both ingest engines
    build these (from every event, or from Spark's columns) and share
    `small_tables`, so the rows are computed by one piece of code."""

    events: int
    end: int  # the last event's time
    client_ops: int
    ok_times: Sequence[int]  # sorted completion times of ok client ops
    ops: list[Operation]  # at least every nemesis and membership op
    invoked: Mapping[int, int]  # invoke index -> time, at least for anomalies' ops


def read_meta(store: str, path: str) -> RunMeta:
    """A run's plan, results and audit events; raises SkipRunError if they are
    malformed. The history is checked for existence only (its reader differs
    between the engines); the reasons come in the order `extract` gives them."""
    rid, run_dir = run_id(store, path), Path(path)
    plan = _decode(run_dir / "test.json", "test.json")
    crashed = not (run_dir / "results.json").exists()
    results = {} if crashed else _decode(run_dir / "results.json", "results.json",
                                         _results_head)  # fmt: skip
    if not (run_dir / "history.jsonl").is_file():
        raise SkipRunError("no history.jsonl")
    return RunMeta(rid, run_dir, plan, results, crashed, [], lambda ev: 0)


def with_audit(meta: RunMeta) -> RunMeta:
    """`meta` with its audit events read and placed (after the history, as the
    reasons of a run malformed twice over are given)."""
    try:
        by_node = load_audit(meta.run_dir, LAKE_KINDS) or {}
    except (HistoryError, OSError) as exc:
        raise SkipRunError(f"malformed audit log: {exc}") from None
    at = run_clock(meta.run_dir, by_node)  # the one mapping to history time (module doc)
    return meta._replace(audit=audit_events(at, by_node), at=at)


def partition(meta: RunMeta) -> tuple[str, str, str, str]:
    """The run's partition values (schemas.PARTITION_COLUMNS)."""
    started = meta.run_dir.name.split("-", 1)[0]
    plan = meta.plan
    return (_date(started), _text(plan.get("name")), _text(plan.get("workload")),
            _text(plan.get("nemesis")))  # fmt: skip


def history_facts(events: list[Event], ops: list[Operation]) -> HistoryFacts:
    """`HistoryFacts` of a whole, paired history."""
    ok_times = sorted(op.complete_time for op in ops if isinstance(op.process, int)
                      and op.type == "ok" and op.complete_time is not None)  # fmt: skip
    return HistoryFacts(
        events=len(events), end=events[-1].time if events else 0,
        client_ops=sum(1 for op in ops if isinstance(op.process, int)), ok_times=ok_times,
        ops=ops, invoked={op.invoke_index: op.invoke_time for op in ops},
    )  # fmt: skip


def extract(store: str, path: str, ingest_id: str) -> dict[str, list[tuple[Any, ...]]]:
    """Rows of every table for the run at `path`; raises SkipRunError if it is malformed."""
    meta = read_meta(store, path)
    events = _history(meta.run_dir / "history.jsonl", meta.crashed)
    meta = with_audit(meta)
    keys, part = (meta.rid, ingest_id), partition(meta)
    ops = pair(events)
    facts = history_facts(events, ops)
    faults = fault_windows(ops, facts.end)
    operations = list(_operation_rows(events, ops, faults, keys, part, facts.end))
    return {"operations": operations, **small_tables(meta, facts, ingest_id)}


def small_tables(meta: RunMeta, hist: HistoryFacts, ingest_id: str
                 ) -> dict[str, list[tuple[Any, ...]]]:  # fmt: skip
    """Rows of every table but `operations` (one per history event) for one run."""
    keys, part, end, ok_times = (meta.rid, ingest_id), partition(meta), hist.end, hist.ok_times
    results, audit = meta.results, meta.audit
    faults = fault_windows(hist.ops, end)
    phases = phase_intervals(audit, end)
    rows: dict[str, list[tuple[Any, ...]]] = {
        "faults": [],
        "changes": [],
        "rebalances": [(*keys, *r, *part) for r in rebalance_rows(audit)],
        "anomalies": list(_anomaly_rows(results, keys, part, hist.invoked, meta.at)),
    }
    for w in faults:
        on = sorted({p for p, s, e in phases if s <= w["end"] and w["start"] <= e}) or [IDLE]
        gap = longest_gap(ok_times, w["start"], w["end"]) / NS_PER_MS
        rows["faults"].append((*keys, w["f"], w["start"], w["end"], round(gap, 3), on, *part))
    for c in changes(audit, end):
        gap = longest_gap(ok_times, c["start"], max(c["start"], c["end"])) / NS_PER_MS
        rows["changes"].append((*keys, c["group"], c["token"], c["start"], c["end"],
                                c["stages"], c["outcome"], round(gap, 3), *part))  # fmt: skip
    plan, crashed = meta.plan, meta.crashed
    facts = _plan_facts(plan)
    verdict = CRASHED if crashed else _verdict(results.get("valid"))
    checkers = _dict(results.get("checkers"))
    verdicts = {str(k): _verdict(v.get("valid") if isinstance(v, dict) else None)
                for k, v in checkers.items()}  # fmt: skip
    reasons = [str(r) for r in results.get("reasons") or []]
    if crashed:
        reasons.append("no results.json: the run ended before it was checked")
    seed = plan.get("seed")
    rows["runs"] = [(
        *keys, meta.run_dir.name.split("-", 1)[0],
        seed if isinstance(seed, int) else None,
        _opt(plan.get("backend")), facts["nodes"], facts["version"], facts["git_rev"],
        facts["plan_key"], msgspec.json.encode(plan).decode(), verdict, verdicts, reasons,
        hist.client_ops, hist.events, end / 1e9,
        float(results.get("elapsed_s") or 0.0), len(rows["anomalies"]), len(faults),
        len(rows["changes"]), *part,
    )]  # fmt: skip
    return rows


def _verdict(valid: Any) -> str:
    return "true" if valid is True else "false" if valid is False else UNKNOWN


def _operation_rows(
    events: list[Event], ops: list[Operation], faults: list[dict[str, Any]],
    keys: tuple[str, str], part: tuple[str, ...], end: int,
) -> Iterator[tuple[Any, ...]]:  # fmt: skip
    """One row per history event; completions carry latency and overlaps."""
    fault_spans = [(w["start"], w["end"]) for w in faults]
    change_spans = [(w["start"], w["end"]) for w in change_windows(ops, end)]
    done = {op.complete_index: op for op in ops if op.complete_index is not None}
    for ev in events:
        op = done.get(ev.index) if ev.type != "invoke" else None
        latency = in_fault = in_change = None
        if op is not None and op.complete_time is not None:
            latency = op.complete_time - op.invoke_time
            in_fault = _overlaps(fault_spans, op.invoke_time, op.complete_time)
            in_change = _overlaps(change_spans, op.invoke_time, op.complete_time)
        value = None if ev.value is None else msgspec.json.encode(ev.value).decode()
        yield (*keys, ev.index, ev.time, str(ev.process), ev.type, ev.f, ev.key, value,
               ev.node, ev.error, ev.revision, ev.group, latency, in_fault, in_change,
               *part)  # fmt: skip


def _anomaly_rows(
    results: dict[str, Any], keys: tuple[str, str], part: tuple[str, ...],
    invoked: Mapping[int, int], at: Callable[[dict[str, Any]], int],
) -> Iterator[tuple[Any, ...]]:  # fmt: skip
    """One row per anomaly, at history time: its first op's invoke, else its last
    audit event placed by `at` (checkers write `time` in their own units)."""
    checkers = results.get("checkers")
    for name, res in sorted(checkers.items()) if isinstance(checkers, dict) else ():
        for a in (res.get("anomalies") or []) if isinstance(res, dict) else ():
            if not isinstance(a, dict):
                continue
            times = [invoked[i] for i in a.get("ops") or [] if i in invoked]
            events = [e for e in a.get("events") or [] if isinstance(e, dict) and "wall" in e]
            t = times[0] if times else at(events[-1]) if events else None
            yield (*keys, str(name), str(a.get("kind")), str(a.get("message", "")),
                   len(a.get("ops") or []), float(t) if t is not None else None,
                   *part)  # fmt: skip


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while one run is derived.

    A run's derivation allocates tens of thousands of objects that live until
    its rows are made (events, audit dicts, structs), so the collector ran
    again and again over the same young objects: about a tenth of the
    columns engine's time on runs of the default plan. They form no cycles; reference
    counting frees them, and the first allocation after a run lets the
    collector catch up once."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def extract_rows(store: str, path: str, ingest_id: str) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """(table, row) pairs for one run; a malformed run yields ("_skipped", (run_id, reason))."""
    try:
        with collector_paused():
            tables = extract(store, path, ingest_id)
    except SkipRunError as exc:
        yield "_skipped", (run_id(store, path), str(exc))
        return
    except Exception as exc:  # a run no reader foresaw must not fail the job either
        yield "_skipped", (run_id(store, path), f"unexpected {type(exc).__name__}: {exc}")
        return
    for table, rows in tables.items():
        for row in rows:
            yield table, row
