"""Inspect a node's store without changing it: `python -m ember.storage DATA_DIR`.

Prints every group's durable state (or one group's entries with --group),
warns about a torn tail the next open would drop, and exits 0 for a store a
node can open, 1 for a corrupt one, 2 for bad input. Read-only: it takes no
lock and repairs nothing, so it is safe on a stopped or crashed node's
directory (on a running node it may see a half-written last record).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ember.storage.group_log import GroupLog
from ember.storage.records import StorageCorruption
from ember.storage.segment import list_segments, replay_segment


def _summary(state: GroupLog) -> dict[str, object]:
    hs = state.hard_state
    return {
        "term": hs.term,
        "vote": hs.vote,
        "commit": hs.commit,
        "snapshot_index": state.snapshot_index,
        "first_index": state.entries[0].index if state.entries else None,
        "last_index": state.last_index,
        "entries": len(state.entries),
    }


def _print_group(group: str, state: GroupLog) -> None:
    print(f"group {group}: " + " ".join(f"{k}={v}" for k, v in _summary(state).items()))
    for e in state.entries:
        print(f"  {e.index:>8} term={e.term} kind={e.kind} bytes={len(e.data)} token={e.token}")


def main(argv: list[str] | None = None) -> int:
    """Run the inspector; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m ember.storage", description=__doc__)
    parser.add_argument("data_dir", type=Path, help="the node's storage directory")
    parser.add_argument("--group", help="print this group's entries too")
    parser.add_argument("--json", action="store_true", help="print a JSON summary")
    args = parser.parse_args(argv)
    if not args.data_dir.is_dir():
        print(f"error: {args.data_dir}: not a directory", file=sys.stderr)
        return 2
    segments = list_segments(args.data_dir)
    if not segments:
        print(
            f"error: {args.data_dir}: no wal-*.log segment (not an ember store?)", file=sys.stderr
        )
        return 2
    newest = segments[-1][1]
    try:
        replayed = replay_segment(newest)
    except StorageCorruption as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"error: {newest}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if args.group is not None and args.group not in replayed.groups:
        known = ", ".join(sorted(replayed.groups)) or "none"
        print(f"error: no group {args.group!r} in the store (groups: {known})", file=sys.stderr)
        return 2
    torn = replayed.torn
    if torn is not None:
        print(
            f"warning: {newest}: torn tail at byte offset {torn.offset} ({torn.reason}); "
            f"the next open drops {torn.dropped_bytes} bytes",
            file=sys.stderr,
        )
    if args.json:
        groups = {g: _summary(s) for g, s in sorted(replayed.groups.items())}
        print(json.dumps({"segment": str(newest), "seq": replayed.seq, "groups": groups}))
        return 0
    print(f"segment {newest} seq={replayed.seq} groups={len(replayed.groups)}")
    for group, state in sorted(replayed.groups.items()):
        if args.group is None:
            print(f"group {group}: " + " ".join(f"{k}={v}" for k, v in _summary(state).items()))
        elif group == args.group:
            _print_group(group, state)
    return 0


if __name__ == "__main__":
    sys.exit(main())
