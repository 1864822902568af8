"""Revisions are read only where a history declares them (issue 23): a kv history
whose writes complete with the value written is never read for revisions, in any
format, while a declared metastore history still is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from checkers.api import CheckContext
from checkers.cli import EXIT_CODES
from checkers.compose import check
from checkers.history import Event, pair, validate
from checkers.revision_fields import DeclarationError, parse
from checkers.revisions import RevisionChecker
from harness import plan as plans
from harness.cli import main

# Each write's ok repeats the value written, as Jepsen's and porcupine's kv
# histories carry them. The integers go down, so a checker taking them for
# revisions would see every write's revision below the last one's.
VALUES: dict[str, list[Any]] = {
    "integer": [1000 - i for i in range(60)],
    "string": [f"v{i}" for i in range(60)],
    "list": [[i, i + 1] for i in range(60)],
    "null": [None] * 60,
}


def kv_history(values: list[Any]) -> list[dict[str, Any]]:
    """A linearizable kv history: put then get of each value, one op at a time,
    four processes taking turns over three keys."""
    events: list[dict[str, Any]] = []

    def add(process: int, type_: str, f: str, key: str, value: Any) -> None:
        n = len(events)
        events.append({"index": n, "time": n * 10, "process": process, "type": type_,
                       "f": f, "key": key, "value": value})  # fmt: skip

    for i, v in enumerate(values):
        process, key = i % 4, f"k{i % 3}"
        add(process, "invoke", "put", key, v)
        add(process, "ok", "put", key, v)
        add(process, "invoke", "get", key, None)
        add(process, "ok", "get", key, v)
    return events


def _revisions(raw: list[dict[str, Any]], plan: dict[str, Any]) -> Any:
    events = [Event(**e) for e in raw]
    validate(events)
    return RevisionChecker().check(CheckContext(plan=plan, events=events, operations=pair(events)))


@pytest.mark.parametrize("kind", sorted(VALUES))
def test_an_undeclared_kv_history_has_no_revision_anomalies(kind: str) -> None:
    """No declaration: no operation is read for a revision, whatever its values."""
    result = _revisions(kv_history(VALUES[kind]), {})
    assert result.valid is True
    assert result.anomalies == []
    assert result.figures["declared"] is False
    assert result.figures["ops"] == 0


def test_the_integer_history_would_fail_if_its_values_were_revisions() -> None:
    """The same integer history, declared (wrongly) to carry put revisions in its
    values, is flagged: what the old inference did to it."""
    result = _revisions(kv_history(VALUES["integer"]), {"revisions": {"ops": {"put": "value"}}})
    assert result.valid is False
    assert {a.kind for a in result.anomalies} == {"write-revision-not-increasing"}


@pytest.mark.parametrize("kind", sorted(VALUES))
def test_a_register_put_under_a_metastore_declaration_is_not_a_revision(kind: str) -> None:
    """A run mixing register (k*) and metastore (m/*) traffic declares its metastore
    keys only, so register values are never revisions."""
    from workloads.revisions import declaration

    plan = {"revisions": declaration(["register", "metastore"])}
    result = _revisions(kv_history(VALUES[kind]), plan)
    assert result.valid is True
    assert result.figures["ops"] == 0


@pytest.mark.parametrize("kind", sorted(VALUES))
def test_faultline_check_of_a_bare_kv_history_is_valid(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`faultline check FILE --model kv` on the history file: valid, revisions included."""
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in kv_history(VALUES[kind])))
    code = main(["check", str(path), "--model", "kv"])
    out = capsys.readouterr().out
    assert code == EXIT_CODES[True], out
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["checkers"]["revisions"]["valid"] is True
    assert results["checkers"]["revisions"]["anomalies"] == []


def test_a_jepsen_history_with_integer_writes_is_valid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Jepsen EDN history (write ok carrying the integer written) gets no revision checks."""
    lines = []
    for i in range(30):
        p, v = i % 3, 100 - i
        lines += [f"{{:type :invoke, :f :write, :value {v}, :process {p}}}",
                  f"{{:type :ok, :f :write, :value {v}, :process {p}}}",
                  f"{{:type :invoke, :f :read, :value nil, :process {p}}}",
                  f"{{:type :ok, :f :read, :value {v}, :process {p}}}"]  # fmt: skip
    path = tmp_path / "history.edn"
    path.write_text("\n".join(lines) + "\n")
    code = main(["check", str(path), "--model", "register"])
    assert code == EXIT_CODES[True], capsys.readouterr().out
    revisions = json.loads((tmp_path / "results.json").read_text())["checkers"]["revisions"]
    assert (revisions["valid"], revisions["figures"]["declared"]) == (True, False)


def test_a_metastore_run_declares_its_revisions_in_test_json() -> None:
    """test.json carries the workloads' declaration; register traffic alone declares none."""
    doc = json.loads(plans.dump(plans.Plan(workload=("register", "metastore"))))
    fields = parse(doc["revisions"])
    assert fields is not None
    assert fields.key_prefix == "m/"
    assert (fields.ops["put"], fields.ops["watch"]) == ("value", "watch")
    doc = json.loads(plans.dump(plans.Plan(workload=("register", "change-peers"))))
    assert doc["revisions"] == {}
    assert parse(doc["revisions"]) is None


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([1], "revisions must be an object"),
        ({"ops": {"put": "result"}}, "revisions.ops['put'] = 'result'"),
        ({"ops": {"get": "value."}}, "expected revision, value, value.<name>"),
        ({"fields": {}}, "unknown field 'fields'"),
        ({"ops": {"put": "value"}, "key_prefix": 3}, "key_prefix must be a string"),
    ],
)
def test_a_malformed_declaration_is_refused_in_one_line(doc: Any, message: str) -> None:
    """The composer turns the error into an undecided revisions verdict naming it."""
    with pytest.raises(DeclarationError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse(doc)
    raw = kv_history(VALUES["integer"][:4])
    result = check({"revisions": doc}, [Event(**e) for e in raw], {"checkers": ["revisions"]})
    r = result.checkers["revisions"]
    assert r.valid == "unknown"
    assert r.error is not None
    assert "\n" not in r.error
    assert "test.json" in r.error


def test_a_foreign_history_can_declare_its_revisions_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--revisions JSON` declares where they are; then the rules apply to them."""
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in kv_history(VALUES["integer"])))
    code = main(["check", str(path), "--checker", "revisions",
                 "--revisions", '{"ops": {"put": "value"}}'])  # fmt: skip
    assert code == EXIT_CODES[False]
    assert "write-revision-not-increasing" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "message"),
    [("{nope", "--revisions is not JSON"), ('{"ops": {"put": 3}}', "--revisions: revisions.ops")],
)
def test_a_malformed_command_line_declaration_is_one_line_exit_2(
    tmp_path: Path, text: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused before checking, naming the flag."""
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in kv_history(VALUES["null"][:3])))
    assert main(["check", str(path), "--revisions", text]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert message in err
