"""Heal every fault faultline may have left on nodes, whoever injected it.

`heal_all` needs no record of what was done: it removes our iptables chain
(and the INPUT jump to it), deletes root qdiscs that carry our handle, and
SIGCONTs every pid listed in the node's paused file. Others' rules and
qdiscs are untouched. It is what cleanup runs on exit, on error and on
SIGINT, so it must work on a node in any state and never fail halfway.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.control import CommandResult, Control
from nemesis import journal
from nemesis.fault import CHAIN, PAUSED_FILE, QDISC_HANDLE

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
        "true",
    ]
)


def heal_all(control: Control, names: Sequence[str] | None = None) -> dict[str, CommandResult]:
    """Remove every faultline fault from `names` (all of the control's nodes by default)."""
    targets = list(control.nodes) if names is None else list(names)
    results = control.run_many(dict.fromkeys(targets, HEAL_ALL), timeout_s=30)
    current = journal.current()
    if current is not None and names is None:
        current.write({"type": "heal-all"})
    return results
