"""Heal every fault faultline may have left on nodes, whoever injected it.

`heal_all` needs no record of what was done: it removes our iptables chain
(and the INPUT jump to it), deletes root qdiscs that carry our handle, and
SIGCONTs every pid listed in the node's paused file, and puts a clock a
clock fault moved back in step (`nemesis.clock`). Others' rules and
qdiscs are untouched. It is what cleanup runs on exit, on error and on
SIGINT, so it must work on a node in any state and never fail halfway.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from harness.control import CommandResult, Control, ControlError, UnreachableError
from nemesis import journal
from nemesis.clock import HEAL_CLOCK
from nemesis.fault import CHAIN, PAUSED_FILE, QDISC_HANDLE, script

HEAL_ALL = "; ".join(
    [
        f"while iptables -w -D INPUT -j {CHAIN} 2>/dev/null; do :; done",
        f"iptables -w -F {CHAIN} 2>/dev/null",
        f"iptables -w -X {CHAIN} 2>/dev/null",
        "for d in $(ls /sys/class/net); do"
        f" if tc qdisc show dev $d | grep -q '^qdisc htb {QDISC_HANDLE}: root';"
        " then tc qdisc del dev $d root; fi; done",
        f"if [ -f {PAUSED_FILE} ]; then for p in $(cat {PAUSED_FILE}); do"
        f" kill -CONT $p 2>/dev/null; done; rm -f {PAUSED_FILE}; fi",
        HEAL_CLOCK,
        "true",
    ]
)


def heal_all(control: Control, names: Sequence[str] | None = None) -> dict[str, CommandResult]:
    """Remove every faultline fault from `names` (all of the control's nodes by default)."""
    targets = list(control.nodes) if names is None else list(names)
    results = control.run_many(dict.fromkeys(targets, HEAL_ALL), timeout_s=30)
    current = journal.current()
    if current is not None and current.is_open and names is None:
        current.write({"type": "heal-all"})
    return results


def heal_journaled(control: Control, journal_path: Path) -> list[str]:
    """Run the heal commands of every fault the journal lists as unhealed,
    newest first, on the nodes `control` reaches, and journal each heal;
    returns one line per fault that could not be healed (none: all healed).
    A fault on a node the control does not know is reported, not skipped."""
    failures = []
    records = journal.read(journal_path)
    # Newest first, except failpoints, which go first: their heal takes them
    # out of the config too, so a node a kill's heal restarts comes up without.
    newest_first = journal.unhealed(records)[::-1]
    todo = sorted(newest_first, key=lambda f: f.get("kind") != "failpoint")  # stable
    if not todo:
        return []
    writer = journal.Journal(journal_path)
    unreachable: set[str] = set()  # tried once: the next fault on it is not waited for
    try:
        for fault in todo:
            heal = {n: c for n, c in dict(fault.get("heal") or {}).items() if c}
            unknown = sorted(n for n in heal if n not in control.nodes)
            bad = unknown + [n for n, c in heal.items() if n in control.nodes
                             and not _ran(control, n, script(c), unreachable)]  # fmt: skip
            if bad:
                failures.append(f"fault {fault.get('id')} ({fault.get('kind')}) not healed on "
                                f"{', '.join(bad)}")  # fmt: skip
                continue
            writer.write({"type": "heal", "id": fault.get("id")})
    finally:
        writer.close(ended=False)
    return failures


def _ran(control: Control, node: str, command: str, unreachable: set[str]) -> bool:
    if node in unreachable:
        return False
    try:
        return control.run(node, command, timeout_s=60, check=False).ok
    except UnreachableError:
        unreachable.add(node)
    except ControlError:
        pass
    return False
