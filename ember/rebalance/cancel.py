"""What a replication group does with CancelRebalance(old, new): the table.

Theory of operation. Seed 004 names three cases; the group's leader looks
at its change-peers stage and the configuration in force:

| ongoing change old -> new | in force | outcome         | action                          |
|---------------------------|----------|-----------------|---------------------------------|
| yes, still catching up    | old      | `cancelled`     | abort it; the group stays old   |
| yes, joint or stable      | (joint)  | `wait`          | it will commit new; ask again   |
| no                        | old      | `noop`          | success, nothing to cancel      |
| no                        | new      | `cannot-cancel` | PD logs it and finishes as done |
| no                        | other    | `mismatch`      | error: not the change named     |

A change past catch-up has its joint entry in the log; ember's core (like
jraft) finishes such a change even across leader changes, so it cannot be
rolled back without a second change. The table waits for it instead, and
the answer then is `cannot-cancel`. A catching-up change is aborted by a
leader step-down (the core resets it, status null), so the group never
leaves `old`: `cancelled` is never reported for a group that committed new.
"""

from __future__ import annotations

from typing import Literal

Outcome = Literal["cancelled", "wait", "noop", "cannot-cancel", "mismatch"]

# (ongoing stage, in force) -> outcome; "none" is no ongoing change.
TABLE: dict[tuple[str, str], Outcome] = {
    ("catching-up", "old"): "cancelled",
    ("joint", "other"): "wait",
    ("stable", "new"): "wait",
    ("stable", "other"): "wait",
    ("none", "old"): "noop",
    ("none", "new"): "cannot-cancel",
    ("none", "other"): "mismatch",
}


def cancel_outcome(
    stage: str, target: list[str] | None, in_force: list[str], old: list[str], new: list[str]
) -> Outcome:
    """The table's outcome for a group's (stage, change target, peers in force).

    A change in flight to another set than `new` is not the one named:
    `mismatch`.
    """
    if stage != "none" and sorted(target or []) != sorted(new):
        return "mismatch"
    force = sorted(in_force)
    where = "old" if force == sorted(old) else "new" if force == sorted(new) else "other"
    return TABLE.get((stage, where), "mismatch")
