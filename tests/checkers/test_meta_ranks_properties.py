"""Property: a correct metastore shared with other writers, whose clients lose
answers, is judged linearizable on ranks (checkers/meta_ranks.py) and never
worse than on values alone.

The histories come from a small reference store applied in one order: each
op takes effect between its invoke and its completion (or later, or never,
when its answer is lost), other writers bump the revision between them, and
a prefix watch from revision 1 records the store's events up to a cut,
with progress lines."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from checkers.api import CheckContext
from checkers.compose import SplitLinear
from checkers.history import Event, pair, validate
from tests.checkers.helpers import HistoryBuilder

KEYS = ("m/0", "m/1", "m/2")


class Store:
    """ember's metastore semantics, with the events each write makes."""

    def __init__(self) -> None:
        self.revision = 0
        self.entries: dict[str, tuple[Any, int, int, int]] = {}  # value, create, mod, version
        self.events: dict[int, list[dict[str, Any]]] = {}

    def _write(self, writes: list[dict[str, Any]]) -> None:
        events = []
        for w in writes:
            old = self.entries.get(w["key"])
            if w["op"] == "put":
                create, version = (old[1], old[3] + 1) if old else (self.revision + 1, 1)
                self.entries[w["key"]] = (w["value"], create, self.revision + 1, version)
                events.append({"key": w["key"], "type": "put", "value": w["value"]})
            elif old is not None:
                del self.entries[w["key"]]
                events.append({"key": w["key"], "type": "delete", "value": None})
        if events:
            self.revision += 1
            self.events[self.revision] = [{**e, "revision": self.revision} for e in events]

    def _holds(self, cond: dict[str, Any]) -> bool:
        entry = self.entries.get(cond["key"])
        if cond["target"] == "exists":
            return (entry is not None) == cond["value"]
        actual = entry[0] if entry else None
        if cond["target"] == "mod_revision":
            actual = entry[2] if entry else 0
        return actual == cond["value"] if cond["op"] == "eq" else (actual or 0) < cond["value"]

    def apply(self, f: str, key: str, value: Any) -> Any:
        if f == "get":
            entry = self.entries.get(key)
            return {"value": entry[0] if entry else None, "mod_revision": entry[2] if entry else 0,
                    "revision": self.revision}  # fmt: skip
        if f == "put":
            self._write([{"op": "put", "key": key, "value": value}])
            return self.revision
        if f == "delete":
            there = key in self.entries
            self._write([{"op": "delete", "key": key}])
            return {"revision": self.revision, "deleted": int(there)}
        ok = all(self._holds(c) for c in value["if"])
        self._write(value["then" if ok else "else"])
        return {"succeeded": ok, "revision": self.revision}


def _op(r: random.Random, revision: int, compare_mod: bool) -> tuple[str, str, Any]:
    key = r.choice(KEYS)
    f = r.choice(("get", "get", "put", "put", "delete", "invoke"))
    if f == "put":
        return f, key, r.randrange(3)  # few values: a lost put often looks like another
    if f != "invoke":
        return f, key, None
    conds = [
        {"key": key, "target": "value", "op": "eq", "value": r.randrange(3)},
        {"key": key, "target": "exists", "op": "eq", "value": r.random() < 0.5},
        {"key": key, "target": "mod_revision", "op": r.choice(("eq", "lt")),
         "value": max(0, revision - r.randrange(4))},
    ]  # fmt: skip
    cond = r.choice(conds if compare_mod else conds[:2])
    other = {"op": "put", "key": r.choice(KEYS), "value": r.randrange(3)}
    return f, key, {"if": [cond], "then": [{"op": "put", "key": key, "value": r.randrange(3)}],
                    "else": [other] if r.random() < 0.5 else []}  # fmt: skip


def history(seed: int, steps: int, lose: float, foreign: float,
            compare_mod: bool = True) -> HistoryBuilder:  # fmt: skip
    """A history of a correct store (module doc); with `compare_mod`, some
    transactions compare a key's mod revision."""
    r, store, b = random.Random(seed), Store(), HistoryBuilder()
    b.add(99, "invoke", "watch", value={"prefix": "m/", "from": 1})
    clients: dict[int, list[Any]] = {}  # process -> [f, key, value, result or None, answered?]
    lost: list[list[Any]] = []  # ops whose answer was lost before they applied: may apply later
    next_process = 1
    for _ in range(steps):
        roll = r.random()
        if roll < foreign:
            store.revision += 1  # the control plane's write, under another prefix
        elif roll < 0.45 and len(clients) < 4:
            f, key, value = _op(r, store.revision, compare_mod)
            clients[next_process] = [f, key, value, None]
            b.add(next_process, "invoke", f, key=key, value=value)
            next_process += 1
        elif clients:
            process = r.choice(sorted(clients))
            f, key, value, result = clients[process]
            if result is None and r.random() < 0.6:
                clients[process][3] = store.apply(f, key, value)
            elif r.random() < lose:
                b.add(process, "info", f, key=key)
                if result is None:
                    lost.append([f, key, value])
                del clients[process]
            elif result is not None:
                b.add(process, "ok", f, key=key, value=result)
                del clients[process]
        if lost and r.random() < 0.1:
            store.apply(*lost.pop(r.randrange(len(lost))))
    for process, (f, key, value, result) in sorted(clients.items()):
        result = store.apply(f, key, value) if result is None else result
        b.add(process, "ok", f, key=key, value=result)
    b.add(99, "ok", "watch", value={"responses": _stream(r, store), "unframed": True})
    b.op(0, "put", key="k1", value=1, result=None)  # register traffic: the history is mixed
    return b


def _stream(r: random.Random, store: Store) -> list[dict[str, Any]]:
    """The store's events up to a cut, with truthful progress lines (ember's:
    every event up to the line's revision was sent) here and there."""
    cut = r.randint(0, store.revision)
    writes = [rev for rev in sorted(store.events) if rev <= cut]
    responses: list[dict[str, Any]] = []
    for i, rev in enumerate(writes):
        responses.append({"revision": rev, "events": store.events[rev]})
        upto = writes[i + 1] - 1 if i + 1 < len(writes) else min(
            [w - 1 for w in store.events if w > rev] + [store.revision])  # fmt: skip
        if r.random() < 0.3:
            responses.append({"revision": r.randint(rev, upto), "progress": True})
    return responses


def _check(b: HistoryBuilder, *, watched: bool = True) -> Any:
    events = [Event(**e) for e in b.events if watched or e["f"] != "watch"]
    validate(events)
    ctx = CheckContext(plan={}, events=events, operations=pair(events),
                       options={"lin_time_limit_s": 20})  # fmt: skip
    return SplitLinear().check(ctx)


@given(seed=st.integers(0, 2**32), steps=st.integers(5, 120),
       lose=st.sampled_from([0.0, 0.2, 0.5]), foreign=st.sampled_from([0.0, 0.1, 0.3]),
       compare_mod=st.booleans())  # fmt: skip
def test_a_correct_store_is_linearizable_on_ranks(
    seed: int, steps: int, lose: float, foreign: float, compare_mod: bool
) -> None:
    """Valid on ranks; on values alone, valid or unknown, never invalid (it
    settles mod-revision comparisons by outcomes, and cannot decide one whose
    outcome is unknown)."""
    b = history(seed, steps, lose, foreign, compare_mod)
    result = _check(b)
    basis = result.figures.get("metastore", {}).get("revisions", "no metastore op")
    if basis.startswith("left out"):
        assert result.valid in (True, "unknown"), (result.anomalies, basis)
    else:
        assert result.valid is True, (result.anomalies, basis)
    assert _check(b, watched=False).valid in (True, "unknown")


def test_the_generator_makes_what_the_property_needs() -> None:
    """Over a few seeds: ranks are used, answers are lost, other writers write."""
    bases, lost, gaps = set(), 0, 0
    for seed in range(20):
        b = history(seed, 100, 0.3, 0.2)
        bases.add(_check(b).figures["metastore"]["revisions"].split(":")[0])
        lost += sum(1 for e in b.events if e["type"] == "info")
        watch = b.events[-3]["value"]["responses"]
        revisions = [resp["revision"] for resp in watch]
        gaps += sum(1 for a, z in itertools.pairwise(revisions) if z > a + 1)
    assert "ranked by the watch record" in bases
    assert lost > 20
    assert gaps > 20


def test_comparisons_of_revisions_are_mostly_decided() -> None:
    """The property above must not pass by calling everything unknown: with
    mod-revision comparisons, ranks decide most histories, and values alone
    decide those whose comparing transactions have known outcomes, a branch
    that writes nothing (about half the generator's have an empty else), or
    are few enough to check each way (checkers/meta_branches.py). 30 seeds:
    ranks decide 27 and values alone 30, 3 of them checked each way (26 and
    27 before lost two-way transactions were checked each way, 25 and 22
    before lost answers with an empty branch were settled)."""
    verdicts: Counter[tuple[str, Any]] = Counter()
    for seed in range(30):
        b = history(seed, 100, 0.2, 0.1, True)
        ranked = _check(b)
        verdicts["ranks", ranked.valid] += ranked.figures["metastore"]["revisions"].startswith(
            "ranked"
        )
        alone = _check(b, watched=False)
        verdicts["values", alone.valid] += 1
        verdicts["each way"] += "branches" in alone.figures["metastore"]
    assert verdicts["ranks", True] >= 25, verdicts
    assert verdicts["values", True] >= 28, verdicts
    assert verdicts["each way"] >= 3, verdicts
