"""The lake's format version: `lake/_lake.json`, checked before any job touches the lake.

Theory of operation. Every ingest writes `_lake.json` with the layout's
format number (`LAKE_FORMAT`: tables, columns, partition columns) and the
faultline version that wrote it. A job reads it first:

- no marker and no tables: a new lake; ingest writes the marker.
- no marker but tables: a lake from before the marker existed, which is
  format 1 (the layout then was the layout format 1 names).
- the current format: read and write.
- an older format this code still reads (`READABLE`): analyze reads it; an
  ingest refuses, since appending rows of another layout would mix two
  layouts in one table. The message names both formats and says what to do.
- a newer format, or a marker that is not ours: refused, naming the version.

Refusals are `LakeVersionError` (a ValueError): the CLI prints the one line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

LAKE_FORMAT = 2
READABLE = frozenset({1, 2})
MARKER = "_lake.json"
LEGACY_FORMAT = 1  # a lake with tables and no marker was written in this format
# What changed in each format, for the messages.
LAYOUTS = {1: "tables runs/operations/faults/changes/rebalances/anomalies, "
              "partitioned date/workload/nemesis",
           2: "the tables of format 1, partitioned date/test/workload/nemesis "
              "(`test`, the plan's name, no longer a data column of runs)"}  # fmt: skip


class LakeVersionError(ValueError):
    """A lake this faultline cannot read or must not write."""


def _faultline_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("faultline")
    except PackageNotFoundError:
        return "unknown"


def _has_tables(lake: Path) -> bool:
    return (lake / "runs").is_dir()


def lake_format(lake: Path) -> tuple[int | None, str]:
    """(format, who wrote it) of the lake; (None, "") for a new lake."""
    marker = lake / MARKER
    if not marker.is_file():
        if _has_tables(lake):
            return LEGACY_FORMAT, "a faultline from before lake format markers"
        return None, ""
    try:
        doc: Any = json.loads(marker.read_text(encoding="utf-8"))
        fmt, by = int(doc["format"]), str(doc.get("written_by", "unknown"))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise LakeVersionError(f"{marker} is not a faultline lake marker ({exc})") from None
    return fmt, f"faultline {by}"


def check_lake(lake: Path, *, writing: bool) -> int | None:
    """The lake's format if this job may go on; raises LakeVersionError if not."""
    fmt, by = lake_format(lake)
    if fmt is None or fmt == LAKE_FORMAT:
        return fmt
    if fmt > LAKE_FORMAT:
        raise LakeVersionError(
            f"the lake at {lake} is format {fmt}, written by {by}; this faultline "
            f"({_faultline_version()}) reads formats up to {LAKE_FORMAT}: upgrade faultline"
        )
    if fmt not in READABLE:
        raise LakeVersionError(
            f"the lake at {lake} is format {fmt} ({LAYOUTS.get(fmt, 'an old layout')}), written "
            f"by {by}; this faultline reads formats {sorted(READABLE)}: ingest the store into "
            f"a new lake (--lake NEW)"
        )
    if writing:
        raise LakeVersionError(
            f"the lake at {lake} is format {fmt}, written by {by}; this faultline writes format "
            f"{LAKE_FORMAT} ({LAYOUTS[LAKE_FORMAT]}) and will not mix the two in one table: "
            f"ingest into a new lake (--lake NEW); `pipeline analyze` still reads this one"
        )
    return fmt


def write_marker(lake: Path) -> None:
    """Marks the lake as this format (atomically)."""
    lake.mkdir(parents=True, exist_ok=True)
    doc = {"format": LAKE_FORMAT, "written_by": _faultline_version(),
           "layout": LAYOUTS[LAKE_FORMAT]}  # fmt: skip
    tmp = lake / f".{MARKER}.tmp"
    tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    tmp.replace(lake / MARKER)
