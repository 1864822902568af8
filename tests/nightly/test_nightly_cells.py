"""A night's cells are keyed by db and backend too, and every matrix key is honoured by
the cell's backend and db or the matrix is refused in one line before the night starts."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from harness import cli
from harness.dbs.registry import SYSTEMS
from harness.nightly import MatrixError, Outcome, junit_xml, parse_matrix, run_args, summary_table
from harness.nightly_plans import cell_plans
from harness.plan import BACKENDS

STUB = Path(__file__).with_name("stub_run.py")


def _matrix(**raw: Any) -> Any:
    base: dict[str, Any] = {"workloads": ["register"], "nemeses": ["partition"], "seeds": 1}
    return parse_matrix({**base, **raw})


def test_a_cell_is_keyed_by_db_and_backend() -> None:
    """The name, the JUnit class and the summary table carry db and backend."""
    m = _matrix(backend="docker", db="etcd")
    cell = m.cells()[0]
    assert cell.key == "etcd/docker/register/partition"
    assert cell.name == "etcd/docker/register/partition/n3/seed1"
    args = run_args(m, cell)
    assert args[args.index("--db") + 1] == "etcd"
    assert args[args.index("--backend") + 1] == "docker"
    xml = ET.fromstring(junit_xml([Outcome(cell, "passed")], m, "2026-11-25T00:00:00"))
    case = xml.find("testsuite/testcase")
    assert case is not None
    assert case.get("classname") == "nightly.etcd.docker.register.partition"
    table = summary_table([Outcome(cell, "passed")])
    assert [c.header for c in table.columns][:2] == ["db", "backend"]
    assert [next(iter(c.cells)) for c in table.columns][:2] == ["etcd", "docker"]


def test_the_db_key_defaults_to_ember_and_must_be_text() -> None:
    """`db` is a matrix key like the others."""
    assert _matrix().db == "ember"
    with pytest.raises(MatrixError, match="db must be"):
        _matrix(db=3)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"workloads": ["change-peers"]}, "must include exactly one of register"),
        ({"db": "etcd"}, "simulates ember only"),
        ({"db": "cockroach"}, "invalid choice: 'cockroach'"),
        ({"extra_args": ["--failpoint", "no.such"]}, "--failpoint no.such: unknown"),
        ({"backend": "docker", "db": "etcd", "extra_args": ["--failpoint", "kv.ack-before-commit"]},
         "etcd has no failpoints"),
        ({"backend": "docker", "workloads": ["register"], "nemeses": ["partition"],
          "extra_args": ["--nemesis-mode", "phase"]}, "need a workload that reaches them"),
        ({"extra_args": ["--db-setting", "ember_bin=/x"]}, "no meaning with --backend sim"),
    ],
)  # fmt: skip
def test_a_key_the_cell_would_not_honour_refuses_the_matrix(
    raw: dict[str, Any], message: str
) -> None:
    """Refused before any run, naming the cell, in one line."""
    with pytest.raises(MatrixError, match="^cell [^\n]*" + message.replace("(", r"\(")):
        cell_plans(_matrix(**raw))


def test_the_nodes_key_on_ssh_must_match_the_hosts(tmp_path: Path) -> None:
    """`nodes` with an ssh hosts file of another size is a contradiction, not ignored."""
    hosts = tmp_path / "hosts"
    hosts.write_text("h1 root@10.0.0.1\nh2 root@10.0.0.2\nh3 root@10.0.0.3\n")
    ok = _matrix(backend="ssh", nodes=[3], extra_args=["--hosts", str(hosts)])
    assert [len(p.nodes) for p in cell_plans(ok).values()] == [3]
    with pytest.raises(MatrixError, match=r"--nodes 5, but .* names 3 hosts"):
        cell_plans(_matrix(backend="ssh", nodes=[5], extra_args=["--hosts", str(hosts)]))


def test_every_cell_of_a_matrix_becomes_its_plan() -> None:
    """Each distinct workload x nemesis x nodes cell, with the matrix's keys in its plan."""
    m = _matrix(workloads=["register", "register,change-peers"], nemeses=["kill", "pause"],
                nodes=[3, 5], seeds=2, time_limit_s=7)  # fmt: skip
    plans = cell_plans(m)
    assert len(plans) == 8
    for cell, plan in plans.items():
        assert (plan.backend, plan.db, len(plan.nodes)) == ("sim", "ember", cell.nodes)
        assert ",".join(plan.workload) == cell.workload
        assert plan.nemesis == (cell.nemesis,)
        assert (plan.seed, plan.time_limit_s) == (cell.seed, 7.0)


def test_a_stub_command_is_not_checked() -> None:
    """A matrix with its own command parses its own flags."""
    assert cell_plans(_matrix(command=[sys.executable, str(STUB)], db="etcd")) == {}


def test_cli_refuses_the_shipped_example_as_the_issue_found_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """change-peers alone (no traffic): one line, exit 2, nothing run."""
    matrix = tmp_path / "night.toml"
    matrix.write_text(f'workloads = ["change-peers"]\nnemeses = ["kill"]\n'
                      f'store = "{tmp_path / "store"}"\n')  # fmt: skip
    assert cli.main(["nightly", "--matrix", str(matrix)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "cell ember/sim/change-peers/kill/n3/seed1" in err
    assert not (tmp_path / "store").exists()


# matrix key -> (value, what each cell's plan carries when honoured, where it is refused)
KEYS: dict[str, Any] = {
    "nodes": ([4], lambda p: len(p.nodes) == 4, lambda b, _d: b == "ssh"),  # 3 hosts named
    "seeds": ([7], lambda p: p.seed == 7, lambda _b, _d: False),
    "seed_base": (11, lambda p: p.seed == 11, lambda _b, _d: False),
    "time_limit_s": (9, lambda p: p.time_limit_s == 9.0, lambda _b, _d: False),
    "workloads": (["register,change-peers"], lambda p: p.workload == ("register", "change-peers"),
                  lambda _b, _d: False),
    "nemeses": (["kill"], lambda p: p.nemesis == ("kill",), lambda _b, _d: False),
    "extra_args": (["--concurrency", "4"], lambda p: p.concurrency == 4, lambda _b, _d: False),
    "explore_budget": ("3 runs", lambda p: True, lambda b, _d: b != "sim"),
}  # fmt: skip
# Keys the night itself honours, the same on every backend and db.
NIGHT_LEVEL = {"backend", "db", "budget_s", "grace_s", "store", "junit", "command"}


def test_every_matrix_key_has_a_case() -> None:
    """The walk below covers every key a matrix may have."""
    from harness.nightly import _KEYS

    assert set(_KEYS) == set(KEYS) | NIGHT_LEVEL


@pytest.mark.parametrize(
    ("key", "backend", "db"), [(k, b, d) for k in sorted(KEYS) for b in BACKENDS
                               for d in sorted(SYSTEMS)],
)  # fmt: skip
def test_a_matrix_key_is_honoured_or_refused(
    tmp_path: Path, key: str, backend: str, db: str
) -> None:
    """Each cell's plan carries the key's value, or the matrix is refused in one line."""
    value, honoured, refused_on = KEYS[key]
    raw: dict[str, Any] = {"backend": backend, "db": db, key: value}
    if backend == "ssh":
        hosts = tmp_path / "hosts"
        hosts.write_text("h1 root@10.0.0.1\nh2 root@10.0.0.2\nh3 root@10.0.0.3\n")
        raw["extra_args"] = [*raw.get("extra_args", []), "--hosts", str(hosts)]
    if key == "seed_base":
        raw["seeds"] = 1
    refused = refused_on(backend, db) or (backend == "sim" and not SYSTEMS[db].supports_sim)
    if refused:
        with pytest.raises(MatrixError) as caught:
            cell_plans(_matrix(**raw))
        assert "\n" not in str(caught.value)
        return
    plans = cell_plans(_matrix(**raw))
    assert plans
    assert all(honoured(p) and (p.backend, p.db) == (backend, db) for p in plans.values())
