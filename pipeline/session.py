"""The Spark session the pipeline's jobs share.

Local by default (`local[*]`: the machine's Java 17 and pyspark from PyPI,
nothing else to install); `spark://host:7077` (or any master URL) runs the
same jobs on a cluster, whose executors need this repository's packages
importable and the store and lake on a path every executor can read (see
pipeline/README.md). pyspark is untyped, so this package types its side only.
"""

from __future__ import annotations

import os
import sys
from typing import Any

DEFAULT_MASTER = "local[*]"


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
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
