"""`faultline check` on other projects' histories: Jepsen EDN (Knossos's
data) and porcupine's test files, with op names read/write/cas."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from checkers.importers.formats import detect
from checkers.importers.jepsen import load_jepsen
from checkers.linearizability import LinOp, check
from harness.cli import main

DATA = Path(__file__).parent / "data"
KNOSSOS = {
    "bad-analysis.edn": False,
    "cas-failure.edn": False,
    "immediate-failure.edn": False,
    "rethink-fail-minimal.edn": False,
    "cas-register-bug.edn": True,
    "memstress3-0.edn": True,
    "mongodb-v0-ack-rollback-0.edn": True,
    "mongodb-v0-ack-rollback-10.edn": True,
}
PORCUPINE = {"etcd_000.log": False, "etcd_005.log": True, "c01-ok.txt": True, "c01-bad.txt": False}


def _check(tmp_path: Path, src: Path, *args: str) -> tuple[int, dict[str, object]]:
    """Runs `faultline check` on a copy of `src`; (exit code, results.json)."""
    path = tmp_path / src.name
    shutil.copyfile(src, path)
    code = main(["check", str(path), "--checker", "linearizable", *args])
    return code, json.loads((tmp_path / "results.json").read_text())


@pytest.mark.parametrize(("name", "valid"), sorted(KNOSSOS.items()))
def test_knossos_histories_get_knossos_verdicts(tmp_path: Path, name: str, valid: bool) -> None:
    """Jepsen EDN from Knossos's data is read and decided as Knossos files it."""
    code, results = _check(tmp_path, DATA / "knossos" / name)
    assert results["valid"] is valid
    assert results["history_format"] == "jepsen"
    assert code == (0 if valid else 1)


@pytest.mark.parametrize(("name", "valid"), sorted(PORCUPINE.items()))
def test_porcupine_histories_get_porcupine_verdicts(tmp_path: Path, name: str, valid: bool) -> None:
    """porcupine's etcd logs and kv lines are read with porcupine's meanings."""
    code, results = _check(tmp_path, DATA / "porcupine" / name, "--format", "porcupine")
    assert results["valid"] is valid
    assert code == (0 if valid else 1)


def test_auto_detects_each_format(tmp_path: Path) -> None:
    """auto tells faultline JSON, Jepsen EDN and porcupine files apart."""
    assert detect(DATA / "knossos" / "cas-failure.edn") == "jepsen"
    assert detect(DATA / "porcupine" / "etcd_000.log") == "porcupine"
    assert detect(DATA / "porcupine" / "c01-ok.txt") == "porcupine"
    jsonl = tmp_path / "history.jsonl"
    jsonl.write_text('{"index": 0, "time": 0, "process": 0, "type": "invoke", "f": "read"}\n')
    assert detect(jsonl) == "faultline"


def test_kv_model_reads_jepsen_op_names() -> None:
    """The kv model takes read/write as get/put; registers take get/put too."""
    ops = [
        LinOp(id=0, process=0, call=0, ret=1, f="write", key="k", input="a"),
        LinOp(id=1, process=1, call=2, ret=3, f="read", key="k", output="a"),
    ]
    assert check(ops, "kv").valid is True
    stale = [*ops, LinOp(id=2, process=1, call=4, ret=5, f="get", key="k", output=None)]
    assert check(stale, "kv").valid is False
    assert check(stale, "cas-register").valid is False
    renamed = [LinOp(id=0, process=0, call=0, ret=1, f="put", key="k", input=1),
               LinOp(id=1, process=1, call=2, ret=3, f="get", key="k", output=1)]  # fmt: skip
    assert check(renamed, "register").valid is True


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "history.edn"
    path.write_text(text)
    return path


def test_independent_tuples_become_keys(tmp_path: Path) -> None:
    """[key value] values (jepsen.independent) split into key and value."""
    path = _write(
        tmp_path,
        "{:type :invoke, :f :write, :value [:x 1], :process 0, :time 5}\n"
        "{:type :ok, :f :write, :value [:x 1], :process 0, :time 9}\n"
        "{:type :invoke, :f :cas, :value [:y [1 2]], :process 1, :time 3}\n"
        "{:type :info, :f :cas, :value [:y [1 2]], :process 1, :time 12}\n"
        "{:type :info, :f :kill, :value nil, :process :nemesis}\n",
    )
    notes: list[str] = []
    events = load_jepsen(path, notes)
    assert [(e.key, e.value, e.type) for e in events] == [
        ("x", 1, "invoke"), ("x", 1, "ok"), ("y", [1, 2], "invoke"), ("y", [1, 2], "info"),
    ]  # fmt: skip
    assert [e.time for e in events] == [5, 9, 9, 12]  # made non-decreasing
    assert any("nemesis" in n for n in notes)
    assert any("independent" in n for n in notes)


def test_plain_cas_only_history_is_not_independent(tmp_path: Path) -> None:
    """[1 2] on a cas is its [expected new], not a key and a value."""
    path = _write(
        tmp_path,
        "[{:type :invoke, :f :cas, :value [1 2], :process 0}\n"
        " {:type :fail, :f :cas, :value [1 2], :process 0}]\n",
    )
    events = load_jepsen(path, [])
    assert [(e.key, e.value) for e in events] == [(None, [1, 2]), (None, [1, 2])]


def test_torn_last_edn_line_is_skipped_with_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A crashed writer's half line ends the history; the verdict notes it."""
    path = _write(
        tmp_path,
        "{:type :invoke, :f :write, :value 1, :process 0}\n"
        "{:type :ok, :f :write, :value 1, :process 0}\n"
        "{:type :invoke, :f :read, :val",
    )
    assert main(["check", str(path), "--checker", "linearizable"]) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert "line 3 is torn" in results["notes"][0]
    assert "line 3 is torn" in capsys.readouterr().out


def test_corrupt_middle_edn_is_refused_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unfinished map before the last line is corruption, not a tear."""
    path = _write(
        tmp_path,
        "{:type :invoke, :f :write, :value 1, :process 0}\n"
        "{:type :ok, :f :write, :value 1, :process 0\n"
        "{:type :invoke, :f :read, :value nil, :process 1}\n"
        "{:type :ok, :f :read, :value 1, :process 1}\n",
    )
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "line 2" in err
