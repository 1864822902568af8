"""The audit events the core emits match docs/events.md (kinds and fields)."""

import functools
import re
from pathlib import Path

import pytest

from .golden import Runner, parse
from .test_pre_vote import stale_log_pre_vote
from .test_properties import run

DOC = Path(__file__).parents[2] / "docs" / "events.md"
ENVELOPE = {"kind", "group", "term"}


def documented_optional() -> dict[str, set[str]]:
    """{kind: optional field names}: backticked words in an '(optional: ...)' note."""
    text = DOC.read_text().split("## Raft kinds", 1)[1].split("\n## ", 1)[0]
    out: dict[str, set[str]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].startswith("`"):
            notes = re.findall(r"\(optional:([^)]*)\)", cells[1])
            out[cells[0].strip("`")] = set(re.findall(r"`([a-z_]+)`", " ".join(notes)))
    return out


def documented_raft_kinds() -> dict[str, set[str]]:
    """{kind: extra field names} from the 'Raft kinds' table of docs/events.md."""
    text = DOC.read_text()
    section = text.split("## Raft kinds", 1)[1].split("\n## ", 1)[0]
    kinds: dict[str, set[str]] = {}
    previous: set[str] = set()
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`"):
            continue
        kind = cells[0].strip("`")
        if cells[1] == "same as above":
            fields = set(previous)
        else:
            # Field names are the backticked words outside parentheses.
            fields = set(re.findall(r"`([a-z_]+)`", re.sub(r"\([^)]*\)", "", cells[1])))
        kinds[kind] = fields - ENVELOPE
        previous = kinds[kind]
    return kinds


@functools.cache
def emitted_events() -> tuple[dict, ...]:
    """Every event of every golden script plus a few random schedules."""
    events: list[dict] = []
    for path in sorted((Path(__file__).parent / "testdata").glob("*.txt")):
        runner = Runner()
        for _, cmd, _ in parse(path.read_text()):
            runner.run(cmd)
        assert runner.net is not None
        for evs in runner.net.events.values():
            events += evs
    ops = [("tick", None, 5), ("propose", 3), ("change", {"n1", "n2", "n4"}, {"n5"})]
    ops += [("transfer", "n2"), ("partition", {"n1"}), ("tick", None, 30), ("heal",)]
    ops += [("compact", "n2"), ("crash", "n3"), ("tick", None, 20), ("restart", "n3")]
    for seed in range(5):
        for evs in run(ops, seed).events.values():
            events += evs
    for evs in stale_log_pre_vote().events.values():
        events += evs  # a lost Pre-Vote needs voters out of the lease that refuse
    return tuple(events)


def test_the_doc_table_parses():
    """The parser finds the documented kinds and their fields."""
    kinds = documented_raft_kinds()
    assert kinds["catchup-start"] == {"peer", "margin", "leader_last", "match"}
    assert documented_optional()["catchup-start"] == {"again"}
    assert kinds["config-committed"] == kinds["config-appended"]


def test_every_emitted_event_has_exactly_the_documented_fields():
    """Each event's kind is documented and carries exactly its documented fields."""
    kinds, optional = documented_raft_kinds(), documented_optional()
    seen = set()
    for ev in emitted_events():
        assert ev["kind"] in kinds, ev
        extra = set(ev) - ENVELOPE - kinds[ev["kind"]]
        assert kinds[ev["kind"]] <= set(ev), ev
        assert extra <= optional.get(ev["kind"], set()), ev
        assert isinstance(ev["group"], str)
        assert isinstance(ev["term"], int)
        seen.add(ev["kind"])
    # The scenarios exercise (nearly) every kind the core emits.
    missing = set(kinds) - seen - {"applied"}  # `applied` carries the app's digest: drivers emit it
    assert not missing, missing


@pytest.mark.parametrize(
    ("kind", "field", "allowed"),
    [
        ("step-down", "reason", {"removed", "higher-term", "transfer", "lost-quorum"}),
        ("change-error", "status", {"ECATCHUP", "EPERM", "ESTOP", None}),
        ("change-stage", "stage", {"none", "catching-up", "joint", "stable"}),
        ("role", "role", {"follower", "candidate", "leader"}),
    ],
)
def test_enumerated_fields_take_documented_values(kind, field, allowed):
    """Fields with a documented set of values never take another."""
    values = {ev[field] for ev in emitted_events() if ev["kind"] == kind}
    assert values
    assert values <= allowed
