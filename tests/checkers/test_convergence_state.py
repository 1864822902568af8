"""Convergence on state, not only on logs (issue 23, item 5): each replica reports
a digest of its state machine's content at an applied index, and replicas that
applied the same log into different states are caught by it, where the log
digest alone sees nothing."""

from __future__ import annotations

import copy
from typing import Any

from ember.kv.statemachine import Command, PartitionMachine, encode_command
from ember.metastore.machine import MetastoreMachine, encode
from ember.raft import Entry
from tests.checkers.test_convergence import _audit, _check


def _kinds(audit: dict[str, list[dict[str, Any]]]) -> set[str]:
    return {a.kind for a in _check(audit).anomalies}


def _without_state(audit: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """The audit as a log-hash-only node would have written it."""
    bare = copy.deepcopy(audit)
    for events in bare.values():
        for ev in events:
            ev.pop("state", None)
    return bare


def test_same_log_different_state_is_caught_by_the_content_digest_alone() -> None:
    """Equal log digests, one replica's content differs: state-mismatch; the same
    events without `state` (the log-hash check) pass."""
    audit = _audit()
    for node, events in audit.items():
        for ev in events:
            if ev["kind"] == "applied":
                ev["state"] = "bad" if node == "n4" else "good"
    result = _check(audit)
    assert result.valid is False
    kinds = {a.kind for a in result.anomalies}
    assert kinds == {"state-mismatch", "replicas-diverge"}
    first = next(a for a in result.anomalies if a.kind == "state-mismatch")
    assert "from the same log" in first.message
    assert _check(_without_state(audit)).valid is True


def test_equal_states_at_equal_indexes_pass() -> None:
    """Every replica with the same content digest: valid, as before."""
    audit = _audit()
    for events in audit.values():
        for ev in events:
            if ev["kind"] == "applied":
                ev["state"] = "same"
    assert _check(audit).valid is True


def _entries(n: int) -> list[Entry]:
    cmds = [Command(op="put", key=f"k{i % 3}", value=i) for i in range(n)]
    return [Entry(index=i + 1, term=1, data=encode_command(c)) for i, c in enumerate(cmds)]


def test_a_skewed_apply_keeps_the_log_digest_and_changes_the_content_digest() -> None:
    """kv.apply-diverge's hook: same entries, same log digest, different content."""
    good, bad = PartitionMachine(), PartitionMachine()
    bad.skew = lambda: True
    for entry in _entries(10):
        good.apply(entry)
        bad.apply(entry)
    assert good.digest == bad.digest
    assert good.content_digest() != bad.content_digest()
    twin = PartitionMachine()
    for entry in _entries(10):
        twin.apply(entry)
    assert twin.content_digest() == good.content_digest()


def test_the_content_digest_survives_a_snapshot_and_sees_a_bad_restore() -> None:
    """A restored replica reports the content it restored: a corrupt one shows."""
    machine = PartitionMachine()
    for entry in _entries(6):
        machine.apply(entry)
    restored = PartitionMachine()
    restored.restore(machine.snapshot(), 6)
    assert restored.content_digest() == machine.content_digest()
    restored.state.data["k0"] = "corrupt"
    assert restored.digest == machine.digest
    assert restored.content_digest() != machine.content_digest()


def test_the_metastore_digest_covers_keys_values_and_revisions() -> None:
    """Two stores with one log agree; a record's revision or value differing shows."""
    cmds: list[dict[str, Any]] = [
        {"op": "put", "key": "a", "value": 1},
        {"op": "put", "key": "b", "value": 2},
        {"op": "delete", "key": "a"},
        {"op": "put", "key": "a", "value": 3},
    ]
    a, b = MetastoreMachine(), MetastoreMachine()
    for i, cmd in enumerate(cmds, 1):
        entry = Entry(index=i, term=1, data=encode(cmd))
        a.apply(entry)
        b.apply(entry)
    assert a.content_digest() == b.content_digest()
    rec = b.state.kv["a"]
    b.state.kv["a"] = type(rec)(rec.value, rec.create_revision, rec.mod_revision + 1, rec.version)
    assert a.digest == b.digest
    assert a.content_digest() != b.content_digest()
    c = MetastoreMachine()
    c.restore(a.snapshot(), a.applied)
    assert c.content_digest() == a.content_digest()


def test_the_checker_reads_states_only_at_equal_indexes() -> None:
    """A replica behind (lower index) with another content is not a mismatch there."""
    audit = _audit()
    for events in audit.values():
        for ev in events:
            if ev["kind"] == "applied":
                ev["state"] = "s40"
    audit["n4"].append({"kind": "applied", "group": "part-0", "index": 30, "digest": "x",
                        "state": "s30", "node": "n4"})  # fmt: skip
    assert "state-mismatch" not in _kinds(audit)
