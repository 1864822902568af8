"""The simulated clients' operations, as a history the linearizability checker reads.

Every proposal the workload sends is one operation on a register per key
(the `kv` model of docs/models.md): `put` of a fresh integer, or, when the
run asks for reads, a `get` that goes through the log (its entry changes
nothing; the value read is the key's last write as applied on the node that
proposed it, at the moment it applies that very entry). Outcomes follow the
daemon client's rules: `ok` when the proposing node applies our entry at
the index it returned; `fail` when it refused the proposal (not leader) or
applied a different entry there (ours can then never commit: Log Matching);
`info` when the node crashed first. An operation still in flight at the end
has no completion (open until the end, as the checker treats it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

READ_PREFIX = b"?"  # a read's entry: the state machine applies it as a no-op


@dataclass(slots=True)
class ClientOp:
    """One client operation and how it ended."""

    seq: int
    f: str  # "put" | "get"
    key: str
    value: int | None
    invoked_ns: int
    type: str | None = None  # "ok" | "fail" | "info"; None: still open
    result: Any = None
    completed_ns: int | None = None
    error: str | None = None

    def complete(
        self, type_: str, at_ns: int, result: Any = None, error: str | None = None
    ) -> None:
        """Record the outcome (first one wins)."""
        if self.type is None:
            self.type, self.completed_ns, self.result, self.error = type_, at_ns, result, error


def read_data(key: str, seq: int) -> bytes:
    """A read's log entry; unique per read so an overwrite cannot pass for it."""
    return READ_PREFIX + f"{key}#{seq}".encode()


def history_rows(ops: list[ClientOp], process_base: int) -> list[tuple[int, dict[str, Any]]]:
    """(time, event) pairs for history.jsonl: one process per operation, so an
    unknown outcome never has a later invoke by the same process."""
    rows: list[tuple[int, dict[str, Any]]] = []
    for op in ops:
        base = {"process": process_base + op.seq, "f": op.f, "key": op.key, "value": op.value}
        rows.append((op.invoked_ns, {**base, "type": "invoke"}))
        if op.type is not None and op.completed_ns is not None:
            # A completion's value is its result (what a get read; a put's value).
            value = op.result if op.f == "get" else op.value
            done = {**base, "type": op.type, "value": value}
            if op.error is not None:
                done["error"] = op.error
            rows.append((op.completed_ns, done))
    return rows
