"""The simulator's omniscient invariants, as a checker (`sim`).

A `--backend sim` run checks Raft's safety properties as it goes, with the
whole system in view (ember.sim.omniscient): every node's writes before and
after their fsync, every applied entry, every leader. It leaves what it found
in the run dir as `sim-invariants.json`; this checker turns that file into a
verdict, so results.json and `faultline check RUN_DIR` show it like any
other: invalid on any violation (one anomaly per kept violation, its kind
the property), unknown if the observer itself failed and found nothing.
Runs without the file (Docker, SSH) do not select it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from checkers.api import UNKNOWN, Anomaly, CheckContext, CheckerResult, verdict

REPORT_FILE = "sim-invariants.json"


def load_sim_report(run_dir: str | Path) -> dict[str, Any] | None:
    """The run's sim-invariants.json, or None when it left none."""
    path = Path(run_dir) / REPORT_FILE
    if not path.is_file():
        return None
    try:
        return msgspec.json.decode(path.read_bytes(), type=dict[str, Any])
    except msgspec.DecodeError as exc:
        raise ValueError(f"{path}: {exc}") from None


class SimInvariantsChecker:
    """Judges the omniscient invariant report of a simulated run."""

    name = "sim"

    def check(self, ctx: CheckContext) -> CheckerResult:
        """Invalid on any violation; unknown without a report or when the observer failed."""
        report = ctx.sim
        if report is None:
            return CheckerResult(name=self.name, valid=UNKNOWN, error=f"no {REPORT_FILE}")
        anomalies = [
            Anomaly(kind=str(v["property"]),
                    message=f"{v['node']}/{v['group']} at {v['at_s']:.3f}s: {v['detail']}",
                    time=v["at_s"])
            for v in report.get("violations", [])
        ]  # fmt: skip
        figures = {"checks": report.get("checks", {}),
                   "violation_counts": report.get("violation_counts", {})}  # fmt: skip
        result = verdict(self.name, anomalies, **figures)
        errors = report.get("errors") or []
        if errors and not anomalies:
            result.valid = UNKNOWN
            count = report.get("error_count", len(errors))
            result.error = f"the observer failed {count} time(s): {errors[0]}"
        return result
