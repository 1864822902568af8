"""What each backend and database honours of a plan; the rest is refused, not dropped.

Theory of operation. Every `faultline run` flag and every nightly matrix key
ends up in a plan field or option. `refusal(plan)` names, in one line, the
first thing the plan's backend or db would not honour (a failpoint etcd
does not have, a setting no node reads or a value it would refuse, a phase
the plan's workloads never reach, a hosts file Docker would not use), so
`harness.plan.validate` refuses the plan before anything starts and
`faultline run` exits 2. What it lets through, the backends and dbs do;
tests/runner/test_flags_honoured.py walks every flag x backend x db and holds
each to one or the other.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from harness.version import VERSION_LABELS

if TYPE_CHECKING:
    from harness.plan import Plan

# ember-node's settings the harness writes itself (harness/db.py `_config`),
# and harness-level settings the EmberDB reads (not passed to the node).
EMBER_OWNED = frozenset({"id", "peers", "listen", "raft_listen", "data_dir", "seed", "config"})
EMBER_HARNESS = frozenset({"bootstrap", "ember_bin", "partitions", "zone_partitions", "meta_nodes"})


def refusal(plan: Plan, *, phases: bool = True) -> str | None:
    """Why the plan's backend or db would not honour all of it, or None.

    `phases=False` leaves out the phase rule, for plan files: a shrunk plan
    keeps the phases its original workloads reached (harness/shrink.py)."""
    checks = (_backend, _failpoints, _settings, *((_phases,) if phases else ()))
    for check in checks:
        why: str | None = check(plan)
        if why is not None:
            return why
    return None


def _backend(plan: Plan) -> str | None:
    if "hosts" in plan.options and plan.backend != "ssh":
        return (
            f"--hosts names the machines of --backend ssh; --backend {plan.backend} does not use it"
        )
    if plan.backend != "sim":
        return None
    if "ember_bin" in plan.db_settings:
        return "--db-setting ember_bin has no meaning with --backend sim (no binary is run)"
    from harness.simrun import unsupported  # the simulator's own list

    return unsupported(plan)


def _failpoints(plan: Plan) -> str | None:
    wanted = plan.options.get("failpoints") or {}
    if not wanted:
        return None
    if plan.db != "ember":
        name = next(iter(wanted))
        return f"--failpoint {name}: {plan.db} has no failpoints (they are ember's test hooks)"
    import random

    from ember.failpoints import KNOWN, FailpointError, Failpoints

    scratch = Failpoints(random.Random(0))
    for name, params in dict(wanted).items():
        if name not in KNOWN:
            return f"--failpoint {name}: unknown; ember has {', '.join(sorted(KNOWN))}"
        try:
            scratch.enable(str(name), dict(params or {}))
        except FailpointError as exc:
            return f"--failpoint {name}: {exc}"
    return None


def ember_settings() -> frozenset[str]:
    """The settings an ember node reads (ember-node's flags) or the EmberDB reads."""
    from ember.server import _parser

    flags = {a.dest for a in _parser()._actions if a.dest not in ("help", "log_level")}
    return frozenset((flags - EMBER_OWNED) | EMBER_HARNESS)


def _settings(plan: Plan) -> str | None:
    settings = [k for k in plan.db_settings if k not in VERSION_LABELS]
    why = _node_names(plan)
    if why is not None:
        return why
    if plan.db == "ember":
        known = ember_settings()
        for key in settings:
            if key.replace("-", "_") in EMBER_OWNED:
                return f"--db-setting {key}: set by the harness for every node"
            if key.replace("-", "_") not in known:
                return f"--db-setting {key}: not an ember setting ({_few(known)})"
        return _ember_values(
            {k.replace("-", "_"): plan.db_settings[k] for k in settings}, plan.workload
        )
    if plan.db == "etcd":
        from harness.etcd_flags import setting_error

        for key in settings:
            why = setting_error(key, plan.db_settings[key]) if key != "bootstrap" else None
            if why is not None:
                return why
    return None


def _node_names(plan: Plan) -> str | None:
    """A setting naming nodes (`bootstrap`; ember's `meta_nodes`, or "auto")
    that names no node of the plan, or is not a list of names."""
    from harness.process_db import DBError, node_names

    for key in ("bootstrap", "meta_nodes"):
        value = plan.db_settings.get(key)
        if value is None or (key == "meta_nodes" and value == "auto"):
            continue
        try:
            node_names(value, f"--db-setting {key}", plan.nodes)
        except DBError as err:
            return str(err)
    return None


def _ember_values(given: dict[str, Any], workloads: Iterable[str]) -> str | None:
    """The settings' values as ember-node itself checks them, on a scratch
    one-node config (ids, addresses and the data dir are the harness's own), so
    a bad value stops the run before any node starts; and the zone the EmberDB
    would ask for against the partitions it would give the nodes (the control
    plane would refuse a larger zone)."""
    from ember.runtime import ConfigError
    from ember.server import config_from_settings
    from harness.db import ZONE_PARTITIONS, EmberDB

    node = {k: v for k, v in given.items() if k not in EMBER_HARNESS or k == "partitions"}
    try:
        config_from_settings({"id": "n1", "peers": "n1=127.0.0.1:1:2", "data_dir": "-", **node})
    except ConfigError as err:
        return f"--db-setting: {err} (ember-node's own check)"
    zone = given.get("zone_partitions")
    if zone is not None and (isinstance(zone, bool) or not isinstance(zone, int)):
        return f"--db-setting zone_partitions: must be an integer, got {zone!r}"
    db = EmberDB([], given, seed=0)  # no node is touched: only its choices are read
    db.configure(list(workloads))
    request = db.zone_request(list(workloads))
    asked = None if request is None else request["partitions"]
    if asked is not None and not 1 <= asked <= db.partitions:
        return (f"--db-setting zone_partitions: must be in 1..{db.partitions} (the zone's "
                f"partitions are some of the nodes' {db.partitions}), got {asked}")  # fmt: skip
    if "change-peers" in workloads and asked is not None and asked >= db.partitions:
        # change-peers moves only groups outside the zone (the zone's own move
        # through its assignment keys): with none left it would have nothing.
        default = f"the default zone_partitions, min({ZONE_PARTITIONS}, partitions)"
        chose = "zone_partitions" if "zone_partitions" in given else default
        return (f"--db-setting partitions={db.partitions}: the zone takes all of them "
                f"({chose} = {asked}), leaving change-peers no group to move; give "
                "partitions above zone_partitions")  # fmt: skip
    return None


def _few(names: Iterable[str]) -> str:
    return "known: " + ", ".join(sorted(names))


def _phases(plan: Plan) -> str | None:
    """Named phases the db never reaches, or phase-aimed faults asked for (mode
    `phase`, or phases named) that none of the plan's workloads would trigger."""
    from harness.dbs.registry import SYSTEMS
    from nemesis.generator import DEFAULT_PHASES, MIX

    system = SYSTEMS.get(plan.db)
    if system is None or system.phases_reached is None:
        return None  # a system that does not declare its phases is trusted
    reached_by = system.phases_reached
    anywhere = sorted({p for phases in reached_by.values() for p in phases})
    named = plan.options.get("nemesis_phases")
    for phase in named or ():
        if phase not in anywhere:
            return (f"--nemesis-phases {phase}: {plan.db} has no {phase} phase "
                    f"(its changes reach {', '.join(anywhere) or 'none'})")  # fmt: skip
    mode = plan.options.get("nemesis_mode", "both")
    # Named by `faultline run` itself when none were:
    implicit = named is not None and list(named) == list(system.default_phases or ())
    asked = mode == "phase" or (named is not None and not implicit and mode != "periodic")
    if not plan.nemesis or not asked:
        return None
    if named is not None:
        wanted = set(named)
    else:
        wanted = set(anywhere) if MIX in plan.nemesis else set(DEFAULT_PHASES)
    if wanted & set(system.phases_of(plan.workload) or ()):
        return None
    movers = " or ".join(reached_by) or "nothing"
    return (f"phase-aimed faults ({', '.join(sorted(wanted))}) need a workload that reaches "
            f"them ({movers} on {plan.db}); add one to --workload or use --nemesis-mode "
            "periodic")  # fmt: skip
