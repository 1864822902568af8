"""Where a history's operations carry the store's revision: its declaration.

Theory of operation. A value is never taken for a revision because it looks
like one: Jepsen's and porcupine's kv histories complete each write with the
value written, an integer, and read as revisions those would fail every
revision rule. So a history says which operations carry a revision and
where, and the revisions checker reads only those. faultline's runs declare
it in test.json (`revisions`, written from the workloads' own declarations
by `harness.plan.dump`); an importer of a foreign format may hand one over;
a history without one gets no revision checks.

The declaration is a JSON object:

    {"ops": {"<f>": "<where>", ...}, "key_prefix": "m/"}

`key_prefix` (optional) limits it to operations on keys under the prefix
(operations without a key, like a watch, are judged by `f` alone), so
register traffic sharing `put` with a metastore workload is never read for
revisions. `where` is one of:

- `revision`: the event's `revision` field;
- `value`: the completion's value is the revision (an integer);
- `value.<name>`: the completion's value is an object, `<name>` holds it;
- `watch`: a watch stream, its value the events delivered, each with
  `key` and `revision` (checkers/revisions.py, watch rules);
- `snapshot`: a read at a past revision, its value {"at", "kvs"}
  (checkers/revisions.py, snapshot rules);
- `compaction`: a compaction, its invoke value {"revision": c}
  (checkers/watches.py, G9).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from checkers.history import Operation

STREAM_KINDS = ("watch", "snapshot", "compaction")


class DeclarationError(ValueError):
    """A revision declaration that does not say where revisions are."""


@dataclass(frozen=True, slots=True)
class RevisionFields:
    """A parsed declaration: for each declared `f`, where its revision is."""

    ops: Mapping[str, str]
    key_prefix: str | None = None

    def covers(self, op: Operation) -> bool:
        """Whether the declaration speaks of `op` (its f, and its key's prefix)."""
        if op.f not in self.ops:
            return False
        return self.key_prefix is None or op.key is None or op.key.startswith(self.key_prefix)

    def kind(self, op: Operation) -> str | None:
        """`op`'s declared `where`, or None when the declaration leaves it out."""
        return self.ops[op.f] if self.covers(op) else None

    def revision_of(self, op: Operation) -> int | None:
        """The revision an ok operation reports where declared, else None."""
        where = self.kind(op)
        if op.type != "ok" or where is None or where in STREAM_KINDS:
            return None
        if where == "revision":
            found: Any = op.revision
        elif where == "value":
            found = op.result
        else:  # value.<name>
            found = op.result.get(where[6:]) if isinstance(op.result, dict) else None
        if isinstance(found, int) and not isinstance(found, bool):
            return found
        return None


def parse(doc: Any, source: str = "test.json") -> RevisionFields | None:
    """The declaration in `doc` (None or {} declares none); DeclarationError
    names the first thing wrong with it."""
    if doc is None or doc == {}:
        return None
    if not isinstance(doc, Mapping):
        raise DeclarationError(f"{source}: revisions must be an object, got {doc!r}")
    unknown = sorted(set(doc) - {"ops", "key_prefix"})
    if unknown:
        raise DeclarationError(f"{source}: revisions has unknown field {unknown[0]!r}")
    ops, prefix = doc.get("ops") or {}, doc.get("key_prefix")
    if not isinstance(ops, Mapping):
        raise DeclarationError(f"{source}: revisions.ops must be an object of f -> where")
    if prefix is not None and not isinstance(prefix, str):
        raise DeclarationError(f"{source}: revisions.key_prefix must be a string")
    for f, where in ops.items():
        ok = isinstance(where, str) and (
            where in ("revision", "value", *STREAM_KINDS)
            or (where.startswith("value.") and len(where) > 6)
        )
        if not ok:
            raise DeclarationError(
                f"{source}: revisions.ops[{f!r}] = {where!r}; expected revision, value, "
                "value.<name>, watch, snapshot or compaction"
            )
    return RevisionFields(ops=dict(ops), key_prefix=prefix) if ops else None
