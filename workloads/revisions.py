"""Where each workload's ops report the store's revision (its declaration).

The revisions checker reads revisions only where a history declares them
(checkers/revision_fields.py); a run declares them in test.json from this
table, one entry per workload that reports any. Each system's worker for a
workload answers in the same shapes (workloads/metastore.py: ember's and
etcd's metastore clients both do), so the table is by workload name.

Left out on purpose: `stale-request` (its `revision` is the old one it
names, not one it observed) and `register` (its values are the client's
own integers; a register put completes with none).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# The metastore workload's keys (workloads.metastore.PREFIX; not imported:
# that module pulls in the HTTP client, and test.json is written from here).
METASTORE_PREFIX = "m/"

DECLARED: dict[str, dict[str, str]] = {
    # docs/models.md's metastore model, plus watch streams, snapshot reads and compactions.
    "metastore": {"get": "value.revision", "put": "value", "delete": "value.revision",
                  "invoke": "value.revision", "watch": "watch", "range": "snapshot",
                  "compact": "compaction"},
    # The alter's metastore write reports the revision after it.
    "rebalance": {"alter-zone": "value.revision"},
    # The trigger alter's and the cancel invoke's revisions.
    "cancel-race": {"alter-zone": "value.revision", "cancel-rebalance": "value.revision"},
}  # fmt: skip


def declaration(workloads: Iterable[str]) -> dict[str, Any]:
    """test.json's `revisions` for a plan running `workloads` ({} declares none)."""
    names = list(workloads)
    ops: dict[str, str] = {}
    for name in names:
        ops.update(DECLARED.get(name, {}))
    if not ops:
        return {}
    out: dict[str, Any] = {"ops": ops}
    if "metastore" in names:
        # get/put share their names with register traffic on k* keys.
        out["key_prefix"] = METASTORE_PREFIX
    return out
