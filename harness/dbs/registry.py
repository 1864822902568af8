"""The systems faultline can test, by `--db` name: one line per system.

Apart from `harness.dbs` (which the system modules' workloads import back),
so that importing a client or a workload never pulls in every system.
"""

from __future__ import annotations

from typing import Any

from harness.dbs import System, ember_run, etcd_run

SYSTEMS: dict[str, System[Any]] = {
    "ember": ember_run.SYSTEM,
    "etcd": etcd_run.SYSTEM,
}
