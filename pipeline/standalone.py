"""A Spark standalone cluster on this machine, from the pyspark package's own launcher.

Theory of operation. `spark-class org.apache.spark.deploy.master.Master` and
`...worker.Worker` are the same daemons `sbin/start-master.sh` and
`sbin/start-worker.sh` start on a real cluster; here they run in the
foreground as child processes bound to 127.0.0.1, each in its own process
session, so stopping a daemon's session also ends the executors (and their
Python workers) the daemon launched. The cluster counts as up once the
master's log says every worker registered; until then a job would sit
waiting for resources. Stopping is in `finally`: a failing test or a Ctrl-C
leaves no JVM behind. What a multi-host cluster needs beyond this (a shared
store and lake path, the project on every worker) is in pipeline/README.md.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

STARTUP_S = 120.0  # liveness bound: JVM start on a loaded 2-core machine takes seconds
HOST = "127.0.0.1"


class ClusterError(Exception):
    """The standalone cluster did not come up."""


def spark_home() -> Path:
    """The pyspark package's dir: a complete Spark distribution (jars, bin/spark-class)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def cluster_env() -> dict[str, str]:
    """The environment every daemon, the driver and the executors share."""
    env = dict(os.environ)
    env.update(SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP=HOST,
               PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)  # fmt: skip
    return env


def _start(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    spark_class = spark_home() / "bin" / "spark-class"
    with log.open("ab") as out:
        return subprocess.Popen(
            [str(spark_class), *args], stdout=out, stderr=subprocess.STDOUT, env=env,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Ends the daemon's whole session (its executors and Python workers too)."""
    for sig, wait_s in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
    # Executors may outlive their worker's JVM for a moment: sweep the session again.
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def _wait_for(log: Path, needle: str, count: int, procs: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.poll() is not None:
                raise ClusterError(f"a Spark daemon exited ({proc.returncode}); see {log.parent}")
        if log.is_file() and log.read_text(errors="replace").count(needle) >= count:
            return
        time.sleep(0.2)
    raise ClusterError(f"no {count} x {needle!r} in {log} within {STARTUP_S:.0f} s")


@contextmanager
def standalone_cluster(
    workdir: Path, *, workers: int = 2, cores: int = 1, memory: str = "2g"
) -> Iterator[str]:
    """Starts a master and `workers` workers on 127.0.0.1; yields the master URL."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = cluster_env()
    port = _free_port()
    url = f"spark://{HOST}:{port}"
    master_log = workdir / "master.log"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        master_args = ["org.apache.spark.deploy.master.Master", "--host", HOST, "--port",
                       str(port), "--webui-port", str(_free_port())]  # fmt: skip
        procs.append(_start(master_args, master_log, env))
        _wait_for(master_log, "I have been elected leader", 1, procs)
        for i in range(workers):
            work = workdir / f"worker-{i}"
            work.mkdir(exist_ok=True)
            worker_args = ["org.apache.spark.deploy.worker.Worker", "--host", HOST,
                           "--cores", str(cores), "--memory", memory, "--webui-port",
                           str(_free_port()), "--work-dir", str(work), url]  # fmt: skip
            procs.append(_start(worker_args, workdir / f"worker-{i}.log", env))
        _wait_for(master_log, "Registering worker", workers, procs)
        yield url
    finally:
        for proc in reversed(procs):  # workers first: the master outlives its executors
            _stop(proc)
