"""The invariant catalog in code (checkers/catalog.py), its page (docs/invariants.md)
and the checkers that report each rule agree with one another."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from checkers.api import Anomaly, CheckerResult
from checkers.catalog import (
    BY_ID,
    GUARANTEES,
    HEALTH,
    OUTSIDE,
    RULES,
    guarantees_broken,
    rule_of,
    rules_broken,
)
from ember.sim.omniscient import SAFETY_PROPERTIES

ROOT = Path(__file__).resolve().parents[2]
CATALOG = [f"R{i}" for i in range(1, 13)] + [f"M{i}" for i in range(1, 10)] + ["L1", "L2", "L3"]
# Where each checker's anomaly kinds are written.
SOURCES = {
    "raft": ["checkers/raft.py", "checkers/raft_conf.py", "checkers/raft_leadership.py",
             "checkers/raft_quorum.py"],
    "revisions": ["checkers/revisions.py", "checkers/assignments.py", "checkers/membership.py",
                  "checkers/authority.py", "checkers/watches.py"],
    "convergence": ["checkers/convergence.py", "checkers/quiet.py"],
    "linearizable": ["checkers/linear.py"],
    "sim": ["ember/sim/omniscient.py"],
    "logs": ["checkers/node_logs.py"],
}  # fmt: skip


def test_every_rule_of_the_catalog_and_only_those() -> None:
    """R1-R12, M1-M9, L1-L3, in the catalog's order."""
    assert [r.id for r in RULES] == CATALOG


@pytest.mark.parametrize("rule", CATALOG)
def test_each_kind_is_one_its_checker_reports(rule: str) -> None:
    """Every kind named for a rule is a literal its checker's sources emit."""
    for checker, kinds in BY_ID[rule].kinds.items():
        text = "".join((ROOT / p).read_text() for p in SOURCES[checker])
        for kind in kinds:
            assert f'"{kind}"' in text, f"{rule}: {checker} never reports {kind}"


def test_the_simulator_properties_are_all_in_the_catalog() -> None:
    """No omniscient property is left without a rule."""
    named = {k for r in RULES for k in r.kinds.get("sim", ())}
    assert named == set(SAFETY_PROPERTIES)


def test_the_page_lists_every_rule_with_its_kinds() -> None:
    """docs/invariants.md's table has a row per rule naming each of its kinds."""
    text = (ROOT / "docs" / "invariants.md").read_text()
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| ([RML]\d+) \|.*$", text, re.M)}
    assert list(rows) == CATALOG
    for rule in RULES:
        for kinds in rule.kinds.values():
            for kind in kinds:
                assert f"`{kind}`" in rows[rule.id], (rule.id, kind)


@pytest.mark.parametrize("guarantee", [g.id for g in GUARANTEES])
def test_each_guarantee_kind_is_one_its_checker_reports(guarantee: str) -> None:
    """G1-G9 name kinds the revisions checker's sources emit, listed on the page."""
    (g,) = [g for g in GUARANTEES if g.id == guarantee]
    text = (ROOT / "docs" / "invariants.md").read_text()
    (row,) = [line for line in text.splitlines() if line.startswith(f"| {guarantee} |")]
    for checker, kinds in g.kinds.items():
        source = "".join((ROOT / p).read_text() for p in SOURCES[checker])
        for kind in kinds:
            assert f'"{kind}"' in source, f"{guarantee}: {checker} never reports {kind}"
            assert f"`{kind}`" in row, (guarantee, kind)


def test_the_page_names_no_kind_the_code_leaves_out() -> None:
    """The other way round: each kind in a rule's kinds columns of docs/invariants.md
    is one of the rule's kinds in code (the page named convergence's
    `state-mismatch` under R4 while the code left it outside every rule)."""
    text = (ROOT / "docs" / "invariants.md").read_text()
    for rule in RULES:
        (row,) = [line for line in text.splitlines() if line.startswith(f"| {rule.id} |")]
        kinds_columns = " ".join(row.split(" | ")[2:4])  # checkers' kinds, simulator's
        on_page = set(re.findall(r"`([a-z][a-z0-9-]*)`", kinds_columns))
        in_code = {k for kinds in rule.kinds.values() for k in kinds}
        assert on_page == in_code, (rule.id, sorted(on_page ^ in_code))


def test_kinds_outside_the_catalog_are_no_rule() -> None:
    """Guarantees and unreadable input are reported but map to no catalog rule."""
    kinds = set(OUTSIDE["revisions"]) | {k for g in GUARANTEES for k in g.kinds["revisions"]}
    result = CheckerResult(name="revisions", valid=False, anomalies=[
        Anomaly(kind=k, message="") for k in sorted(kinds)])  # fmt: skip
    assert rules_broken({"revisions": result}) == set()
    assert guarantees_broken({"revisions": result}) == {g.id for g in GUARANTEES}
    mixed = {"raft": {"anomalies": [{"kind": "two-leaders"}]}, "sim": {"anomalies": []}}
    assert rules_broken(mixed) == {"R1"}


def test_faultline_s_own_rule_is_on_the_page_and_in_its_checker() -> None:
    """H1 (not in INVARIANTS.md) names kinds the logs checker emits, in its own
    table on the page; its kinds map to H1 and to no catalog rule."""
    text = (ROOT / "docs" / "invariants.md").read_text()
    for rule in HEALTH:
        (row,) = [line for line in text.splitlines() if line.startswith(f"| {rule.id} |")]
        for checker, kinds in rule.kinds.items():
            source = "".join((ROOT / p).read_text() for p in SOURCES[checker])
            for kind in kinds:
                assert f'"{kind}"' in source, (rule.id, kind)
                assert f"`{kind}`" in row, (rule.id, kind)
                assert rule_of(checker, kind) == rule.id
        result = {c: {"anomalies": [{"kind": k} for k in ks]} for c, ks in rule.kinds.items()}
        assert rules_broken(result) == set()
