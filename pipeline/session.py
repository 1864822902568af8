"""The Spark session the pipeline's jobs share.

Local by default (`local[*]`: the machine's Java 17 and pyspark from PyPI,
nothing else to install); `spark://host:7077` (or any master URL) runs the
same jobs on a cluster, whose executors need this repository's packages
importable and the store and lake on a path every executor can read (see
pipeline/README.md). pyspark is untyped, so this package types its side only.
"""

from __future__ import annotations

import os
import re
import socket
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

DEFAULT_MASTER = "local[*]"
SPARK_PORT = 7077  # a spark:// master's port when the URL names none
PROBE_TIMEOUT_S = 5.0
# local, local[N], local[*], local[N,F] (F: task retries), local-cluster[N,C,MB]
_LOCAL = re.compile(r"local(\[(\*|[1-9][0-9]*)(\s*,\s*[0-9]+)?\])?|local-cluster\[[0-9, ]+\]")
_LOG_CONFIG = Path(__file__).with_name("log4j2.properties")


class SparkStartError(RuntimeError):
    """Spark could not start for the master given; the message is one line."""


def start_session(master: str = DEFAULT_MASTER, **options: Any) -> Any:
    """`spark_session`, for a command line: the master checked first (a
    spark:// master that takes no connection fails in seconds, where Spark
    retries for a minute and prints a Java stack each time), and any failure
    a SparkStartError of one line."""
    check_master(master)
    try:
        return spark_session(master, **options)
    except ImportError:  # no pyspark: the caller words the fix
        raise
    except Exception as exc:  # pyspark's own types: no Java, a master that takes no app
        raise SparkStartError(f"cannot start Spark (master {master}): {_reason(exc)}") from None


def check_master(master: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Raises SparkStartError for a malformed local master, or a spark:// one
    none of whose addresses takes a TCP connection; other schemes (yarn,
    k8s://) are Spark's to check."""
    if master.startswith("local"):
        if not _LOCAL.fullmatch(master):
            raise SparkStartError(
                f"bad Spark master {master!r}: local, local[N], local[*] or local[N,F]"
            )
        return
    if not master.startswith("spark://"):
        return
    refusals = []
    for host, port in master_addresses(master):
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                return
        except OSError as exc:
            refusals.append(f"{host}:{port}: {exc.strerror or exc}")
    raise SparkStartError(f"cannot reach the Spark master {master}: {'; '.join(refusals)}")


def master_addresses(master: str) -> list[tuple[str, int]]:
    """The (host, port) pairs of spark://host[:port][,host[:port]...] (several
    for a master with standbys)."""
    out = []
    for part in master.removeprefix("spark://").split(","):
        try:
            url = urlsplit(f"spark://{part.strip()}")
            host, port = url.hostname, url.port or SPARK_PORT
        except ValueError as exc:  # a port that is no number, or out of range
            raise SparkStartError(f"bad Spark master {master!r}: {exc}") from None
        if not host or url.path or url.query:
            raise SparkStartError(f"bad Spark master {master!r}: spark://host[:port][,host[:port]]")
        out.append((host, port))
    return out


def _reason(exc: Exception) -> str:
    """One line of what pyspark raised: the Java exception's own line where
    py4j wraps one, with a hint for the two failures users meet."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    java = [ln.removeprefix(": ") for ln in lines if ln.startswith(": ")]
    reason = (java or lines or [type(exc).__name__])[0]
    if "stopped SparkContext" in reason:
        return f"{reason} (the master took no application: is it a Spark master with workers?)"
    if "JAVA_GATEWAY_EXITED" in reason or "Java gateway" in reason:
        return f"{reason} (is Java 17 on PATH?)"
    return reason


def spark_session(
    master: str = DEFAULT_MASTER,
    *,
    app: str = "faultline-pipeline",
    shuffle_partitions: int | None = None,
    conf: dict[str, str] | None = None,
) -> Any:
    """Gets (or creates) the session; small shuffles locally, no UI.

    Python workers run this interpreter, so they see the same packages
    (checkers/, pipeline/) as the driver.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    local = master.startswith("local")
    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions or (8 if local else 200)))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        # Overwrites replace only the partitions a job writes (analysis tables).
        .config("spark.sql.sources.partitionOverwriteMode", "dynamic")
    )
    if local:
        builder = builder.config("spark.driver.memory", os.environ.get("FAULTLINE_SPARK_MEM", "2g"))
    if _LOG_CONFIG.is_file():  # read by the driver's JVM as it starts (client mode)
        builder = builder.config(
            "spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={_LOG_CONFIG.as_uri()}"
        )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
