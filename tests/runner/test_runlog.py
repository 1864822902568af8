"""harness.log keeps the project's own records of a run, not a library's."""

from __future__ import annotations

import logging
from pathlib import Path

from harness.runlog import harness_log


def test_only_the_project_s_records_at_info_and_up_are_kept(tmp_path: Path) -> None:
    root = logging.getLogger()
    before, handlers = root.level, list(root.handlers)
    root.setLevel(logging.WARNING)
    try:
        path = tmp_path / "harness.log"
        with harness_log(path):
            logging.getLogger("workloads.metastore").info("sent 1 more time(s)")
            logging.getLogger("nemesis.schedule").debug("too fine")
            logging.getLogger("paramiko.transport").info("Connected (version 2.0)")
        logging.getLogger("workloads.metastore").info("after the run")
        lines = path.read_text().splitlines()
        assert len(lines) == 1
        assert lines[0].endswith("INFO workloads.metastore: sent 1 more time(s)")
        assert root.level == logging.WARNING
        assert root.handlers == handlers
    finally:
        root.setLevel(before)
