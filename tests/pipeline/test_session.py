"""Starting Spark from the command line: the master checked before the JVM
starts, and every failure one line (pipeline/session.py)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.session import SparkStartError, _reason, check_master, master_addresses


@pytest.fixture
def listening() -> Iterator[int]:
    """A port on 127.0.0.1 that takes connections (a stand-in master)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        yield server.getsockname()[1]


@pytest.fixture
def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then let go)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


OTHERS = ("local", "local[1]", "local[*]", "local[4,2]", "local[*, 3]", "local-cluster[2,1,1024]",
          "yarn", "k8s://https://h:6443")  # fmt: skip


@pytest.mark.parametrize("master", OTHERS)
def test_local_and_other_schemes_pass_without_a_connection(master: str) -> None:
    check_master(master)


@pytest.mark.parametrize("master", ["local[0]", "local[x]", "locally", "local[*"])
def test_a_malformed_local_master_is_named(master: str) -> None:
    with pytest.raises(SparkStartError, match=r"bad Spark master .*local\[N\]"):
        check_master(master)


def test_a_master_that_takes_connections_passes(listening: int) -> None:
    check_master(f"spark://127.0.0.1:{listening}")


def test_a_refused_master_is_named_with_the_reason(closed_port: int) -> None:
    with pytest.raises(SparkStartError) as err:
        check_master(f"spark://127.0.0.1:{closed_port}")
    assert str(err.value) == (
        f"cannot reach the Spark master spark://127.0.0.1:{closed_port}: "
        f"127.0.0.1:{closed_port}: Connection refused"
    )


def test_a_master_with_standbys_passes_when_any_address_answers(
    listening: int, closed_port: int
) -> None:
    check_master(f"spark://127.0.0.1:{closed_port},127.0.0.1:{listening}")
    with pytest.raises(SparkStartError, match=rf"127.0.0.1:{closed_port}: .*; 127.0.0.1:"):
        check_master(f"spark://127.0.0.1:{closed_port},127.0.0.1:{closed_port}")


def test_master_addresses_default_the_port_and_read_ipv6() -> None:
    assert master_addresses("spark://h1,h2:7078,[::1]:7079") == [
        ("h1", 7077), ("h2", 7078), ("::1", 7079),
    ]  # fmt: skip


@pytest.mark.parametrize("master", ["spark://", "spark://h:x", "spark://h:99999", "spark://h/x"])
def test_a_malformed_spark_master_is_named(master: str) -> None:
    with pytest.raises(SparkStartError, match="bad Spark master"):
        master_addresses(master)


def test_a_java_failure_is_one_line_with_its_hint() -> None:
    py4j = RuntimeError(
        "An error occurred while calling None.org.apache.spark.sql.classic.SparkSession.\n"
        ": java.lang.IllegalStateException: Cannot call methods on a stopped SparkContext.\n"
        "This stopped SparkContext was created at:\n\norg.apache.spark.api.java.JavaSparkContext"
    )
    assert _reason(py4j) == (
        "java.lang.IllegalStateException: Cannot call methods on a stopped SparkContext. "
        "(the master took no application: is it a Spark master with workers?)"
    )
    gateway = RuntimeError("[JAVA_GATEWAY_EXITED] Java gateway process exited before sending "
                           "its port number.")  # fmt: skip
    assert _reason(gateway).endswith("(is Java 17 on PATH?)")
    assert _reason(RuntimeError()) == "RuntimeError"


@pytest.mark.parametrize(
    "command",
    [
        ["pipeline", "ingest", "--store", "{store}"],
        ["pipeline", "precheck", "{history}"],
        ["check", "--spark", "{history}"],
    ],
)
def test_the_commands_refuse_an_unreachable_master_in_one_line(
    tmp_path: Path, closed_port: int, command: list[str]
) -> None:
    """Before any JVM starts: no Java stack, no minute of Spark's retries."""
    history = tmp_path / "store" / "t" / "r" / "history.jsonl"
    history.parent.mkdir(parents=True)
    history.write_text('{"index":0,"time":0,"process":0,"type":"invoke","f":"read"}\n')
    args = [a.format(store=tmp_path / "store", history=history) for a in command]
    master = f"spark://127.0.0.1:{closed_port}"
    proc = subprocess.run([sys.executable, "-m", "harness.cli", *args, "--master", master],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert f"cannot reach the Spark master {master}: 127.0.0.1:{closed_port}" in lines[0]
