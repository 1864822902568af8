"""The test plan: faultline's counterpart of Jepsen's test map.

A `Plan` names everything a run depends on — backend and nodes, the
database's settings, workload, nemesis, checkers, concurrency, rate, time
limit — and the root `seed` from which every random choice derives through
named sub-seeds. A run records its plan as `test.json`; `faultline replay`
loads it and runs the same plan again. Plans are frozen: each phase of a run
that needs a changed plan makes a new one with `msgspec.structs.replace`.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import msgspec

from harness.plan_options import OptionError, check_options

BACKENDS = ("docker", "ssh", "sim")


class Plan(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=False):
    """One test run's complete description (what `test.json` holds)."""

    name: str = "ember-mix"
    seed: int = 0
    backend: str = "docker"
    nodes: tuple[str, ...] = ("n1", "n2", "n3", "n4", "n5")
    db: str = "ember"
    db_settings: dict[str, Any] = msgspec.field(default_factory=dict)
    # The full mix (issue 9): every ember workload under the combined nemesis.
    workload: tuple[str, ...] = (
        "register", "change-peers", "rebalance", "cancel-race", "metastore",
    )  # fmt: skip
    nemesis: tuple[str, ...] = ("mix",)
    checkers: tuple[str, ...] | None = None  # None: every checker whose inputs exist
    concurrency: int = 10
    rate_hz: float = 50.0
    time_limit_s: float = 60.0
    quiet_s: float = 10.0
    # Free-form extras a backend or workload needs (hosts file, key count...).
    options: dict[str, Any] = msgspec.field(default_factory=dict)

    def subseed(self, name: str) -> int:
        """A 64-bit sub-seed for subsystem `name`, stable for a given seed.

        Derived by hashing rather than by drawing in order, so adding a new
        subsystem never changes the others' choices.
        """
        return random.Random(f"{self.seed}/{name}").getrandbits(64)

    def rng(self, name: str) -> random.Random:
        """A fresh generator for subsystem `name`."""
        return random.Random(self.subseed(name))


class PlanError(ValueError):
    """A plan file that cannot be read or does not describe a valid plan."""


def validate(plan: Plan) -> Plan:
    """Returns the plan, or raises PlanError naming the first bad field."""
    if plan.backend not in BACKENDS:
        raise PlanError(f"backend {plan.backend!r} is not one of {', '.join(BACKENDS)}")
    if not plan.nodes:
        raise PlanError("a plan needs at least one node")
    if len(set(plan.nodes)) != len(plan.nodes):
        raise PlanError(f"node names repeat: {', '.join(plan.nodes)}")
    if plan.concurrency < 1:
        raise PlanError(f"concurrency must be at least 1, got {plan.concurrency}")
    if plan.rate_hz <= 0:
        raise PlanError(f"rate must be positive, got {plan.rate_hz}")
    if plan.time_limit_s <= 0:
        raise PlanError(f"time limit must be positive, got {plan.time_limit_s}")
    if plan.seed < 0:
        raise PlanError(f"seed must be a non-negative integer, got {plan.seed}")
    try:
        check_options(plan.options)
    except OptionError as err:
        raise PlanError(str(err)) from None
    from harness.honoured import refusal  # late: it reads the systems' registries

    why = refusal(plan, phases=False)  # what the backend or db would not honour
    if why is not None:
        raise PlanError(why)
    return plan


def dump(plan: Plan) -> bytes:
    """The plan as pretty JSON (test.json), with `revisions`: where its
    workloads' ops report the store's revision (workloads/revisions.py), the
    history's declaration the revisions checker reads. `load` ignores it (a
    replay declares again from the same workloads)."""
    from workloads.revisions import declaration

    doc = {**msgspec.to_builtins(plan), "revisions": declaration(plan.workload)}
    return msgspec.json.format(msgspec.json.encode(doc), indent=2) + b"\n"


def load(path: Path) -> Plan:
    """Reads test.json; a missing or malformed file raises PlanError naming it."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PlanError(f"cannot read plan {path}: {exc.strerror}") from None
    try:
        return validate(msgspec.json.decode(raw, type=Plan))
    except msgspec.ValidationError as exc:
        raise PlanError(f"{path}: {exc}") from None
    except msgspec.DecodeError as exc:
        raise PlanError(f"{path} is not valid JSON: {exc}") from None
