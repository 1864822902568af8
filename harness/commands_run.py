"""`faultline run` and `faultline replay`.

    faultline run --backend docker --nodes 5 --workload register,change-peers \\
                  --nemesis partition,kill --time-limit 60 --seed 42
    faultline replay store/ember-mix/20260101T000000-42

`run` builds a plan from its flags (`harness.plan.Plan`), prints the seed
first, runs it (`harness.runner`) with live progress, and prints the store
path, the verdict and, last, the command that replays it. `--test-count N`
runs N plans with seeds seed, seed+1, ...; the exit code is the worst
(1 if any run was invalid, else 2 if any was unknown or failed, else 0).
`replay` reads a run's test.json and runs the same plan again (same seed:
same generated ops, fault kinds, targets and order) into a new run dir; a
simulated run replays byte for byte, and replay says whether it did.
"""

from __future__ import annotations

import argparse
import random
import shlex
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import msgspec

from checkers.stats import describe_fault_counts
from harness import plan as plans
from harness.backends.lifecycle import Terminated
from harness.clean import leftovers
from harness.cli import CliError
from harness.dbs.registry import SYSTEMS
from harness.honoured import refusal
from harness.progress import Progress, RunStatus
from harness.runner import EXIT_INVALID, EXIT_UNKNOWN, RunNotStartedError, RunOutcome, run
from harness.store import DEFAULT_ROOT
from nemesis.generator import FAULT_KINDS, MODES, PHASES
from workloads.meta_traffic import KINDS as TRAFFIC_KINDS

DEFAULT_NODES = 5


def _names(text: str, known: tuple[str, ...], flag: str) -> tuple[str, ...]:
    if text.strip().lower() in ("", "none"):
        return ()
    names = tuple(dict.fromkeys(n.strip() for n in text.replace("+", ",").split(",") if n.strip()))
    bad = [n for n in names if n not in known]
    if bad:
        raise CliError(f"{flag}: unknown {bad[0]!r}; expected some of {', '.join(known)} or none")
    return names


def _positive(kind: type, flag: str) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be a number, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{flag} must be positive, got {text}")
        return value

    return parse


def _failpoint(text: str) -> tuple[str, dict[str, Any]]:
    """`NAME` or `NAME={"delay_ms": 300}` -> (name, params)."""
    name, _, raw = text.partition("=")
    if not name:
        raise CliError(f"--failpoint {text!r}: expected NAME or NAME=JSON")
    try:
        params = msgspec.json.decode(raw) if raw else {}
    except msgspec.DecodeError as exc:
        raise CliError(f"--failpoint {name}: parameters are not JSON: {exc}") from None
    if not isinstance(params, dict):
        raise CliError(f"--failpoint {name}: parameters must be a JSON object")
    return name, params


def _host_names(path: Path) -> tuple[str, ...]:
    from harness.backends.ssh import HostsFileError, parse_hosts

    try:
        return tuple(n.name for n in parse_hosts(path.read_text(), str(path)))
    except OSError as exc:
        raise CliError(f"cannot read hosts file {path}: {exc.strerror}") from None
    except HostsFileError as exc:
        raise CliError(str(exc)) from None


def plan_from_args(args: argparse.Namespace) -> plans.Plan:
    """The plan the flags describe (CliError naming a bad flag)."""
    system = SYSTEMS[args.db]
    args.backend = args.backend or "docker"  # `run` leaves it unset so --plan can tell
    if args.backend == "sim" and not system.supports_sim:
        sims = " and ".join(n for n, s in SYSTEMS.items() if s.supports_sim)
        raise CliError(f"--backend sim simulates {sims} only; run {args.db} on docker or ssh")
    if args.backend == "sim":
        for flag, given in (("--leave-running", getattr(args, "leave_running", False)),
                            ("--hosts", args.hosts is not None)):  # fmt: skip
            if given:
                raise CliError(
                    f"{flag} has no meaning with --backend sim "
                    "(the simulated cluster lives inside the run)"
                )
    if args.workload is None:
        workload = system.default_workload()
    else:
        workload = _names(args.workload, system.workloads, "--workload")
    traffic = [w for w in system.traffic if w in workload]
    if len(traffic) != 1:
        what = " or ".join(system.traffic)
        raise CliError(f"--workload must include exactly one of {what} (the clients' traffic)")
    nemesis = _names(args.nemesis, FAULT_KINDS, "--nemesis")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    options: dict[str, Any] = {"nemesis_mode": args.nemesis_mode}
    nodes = tuple(f"n{i}" for i in range(1, (args.nodes or DEFAULT_NODES) + 1))
    if args.hosts is not None:
        options["hosts"] = str(args.hosts)
        nodes = _host_names(args.hosts)
        if args.nodes not in (None, len(nodes)):  # the hosts file is the cluster
            raise CliError(f"--nodes {args.nodes}, but {args.hosts} names {len(nodes)} hosts")
    elif args.backend == "ssh":
        raise CliError("--backend ssh needs --hosts FILE")
    if args.keys is not None:
        options["keys"] = args.keys
    if args.nemesis_phases is not None:
        options["nemesis_phases"] = list(_names(args.nemesis_phases, PHASES, "--nemesis-phases"))
    elif system.default_phases is not None:  # e.g. no joint phase where changes are one step
        options["nemesis_phases"] = list(system.default_phases)
    if args.failpoint:
        options["failpoints"] = dict(_failpoint(text) for text in args.failpoint)
    if args.meta_traffic is not None:
        options["meta_traffic"] = _meta_traffic(args.meta_traffic, system, workload)
    settings: dict[str, Any] = {}
    for text in args.db_setting or ():
        key, sep, raw = text.partition("=")
        if not key or not sep:
            raise CliError(f"--db-setting {text!r}: expected KEY=VALUE")
        try:
            settings[key] = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            settings[key] = raw  # a bare word is a string
    plan = plans.Plan(
        db_settings=settings,
        db=args.db,
        name=args.name or f"{args.db}-" + ("mix" if args.workload is None else "-".join(workload)),
        seed=seed,
        backend=args.backend,
        nodes=nodes,
        workload=workload,
        nemesis=nemesis,
        concurrency=args.concurrency,
        rate_hz=args.rate,
        time_limit_s=args.time_limit,
        quiet_s=args.quiet_period,
        options=options,
    )
    try:
        plan = plans.validate(plan)
    except plans.PlanError as exc:
        raise CliError(str(exc)) from None
    why = refusal(plan)  # what the backend or db would not honour: refused, never dropped
    if why is not None:
        raise CliError(why)
    return plan


def add_parser(subparsers: Any) -> None:
    """Registers `faultline run` and `faultline replay`."""
    p = subparsers.add_parser("run", help="run a test against a cluster and check it")
    add_plan_flags(p, default_backend=None)
    p.add_argument("--seed", type=int, help="root seed (default: random, printed first)")
    p.add_argument("--test-count", type=_positive(int, "--test-count"), default=1)
    p.add_argument("--plan", type=Path, metavar="FILE",
                   help="run this plan file (test.json, or what `faultline shrink` wrote); "
                   "--backend, --store and --no-progress still apply, other plan flags "
                   "are refused")  # fmt: skip
    p.add_argument(
        "--attempts",
        type=_positive(int, "--attempts"),
        default=1,
        help="with --plan: run it N times and say how many reproduce its verdict",
    )
    p.add_argument("--leave-running", action="store_true", help="keep the cluster up")
    p.set_defaults(func=_run_cmd)
    r = subparsers.add_parser("replay", help="run a stored run's plan (same seed) again")
    r.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    r.add_argument("--store", type=Path, help="run store root (default: the run's own)")
    r.add_argument("--leave-running", action="store_true")
    r.add_argument("--no-progress", action="store_true")
    r.set_defaults(func=_replay_cmd)


def add_plan_flags(p: argparse.ArgumentParser, default_backend: str | None) -> None:
    """The flags that describe a plan (`faultline run` and `faultline explore`)."""
    p.add_argument("--backend", choices=plans.BACKENDS, default=default_backend)
    p.add_argument("--nodes", type=_positive(int, "--nodes"),
                   help=f"node count (default {DEFAULT_NODES}; with --hosts: theirs)")  # fmt: skip
    p.add_argument("--hosts", type=Path, help="ssh backend: file naming one host a line")
    p.add_argument("--db", choices=tuple(SYSTEMS), default="ember", help="database under test")
    workloads = "; ".join(f"{n}: {', '.join(s.workloads)}" for n, s in SYSTEMS.items())
    p.add_argument("--workload",
                   help=f"comma-separated ({workloads}); default: ember's full mix, "
                   "etcd's register,change-peers")  # fmt: skip
    p.add_argument("--nemesis", default="mix",
                   help=f"comma-separated: {', '.join(FAULT_KINDS)}, or none (default: mix, "
                   "every kind on a timer and aimed at change and rebalance phases)")  # fmt: skip
    p.add_argument("--nemesis-mode", choices=MODES, default="both",
                   help="faults on a timer, at change phases, or both")  # fmt: skip
    p.add_argument("--nemesis-phases", metavar="PHASES",
                   help=f"phases that trigger faults: {', '.join(PHASES)}")  # fmt: skip
    p.add_argument("--failpoint", action="append", metavar="NAME[=JSON]",
                   help="switch an ember failpoint on at every node from the start (a fault's "
                   "is healed at the heal-all before the quiet period, a planted defect's "
                   "stays on)")  # fmt: skip
    p.add_argument("--meta-traffic", metavar="KINDS",
                   help="metastore traffic beyond get/put/invoke: all, none, or a list of "
                   f"{', '.join(TRAFFIC_KINDS)} (default: the system's own)")  # fmt: skip
    p.add_argument("--db-setting", action="append", metavar="KEY=VALUE",
                   help="an ember setting (TOML key), e.g. election_timeout_ticks=40")  # fmt: skip
    p.add_argument("--time-limit", type=_positive(float, "--time-limit"), default=60.0,
                   metavar="SECONDS")  # fmt: skip
    p.add_argument("--quiet-period", type=float, default=5.0, metavar="SECONDS",
                   help="wait after healing, before the final reads")  # fmt: skip
    p.add_argument("--concurrency", type=_positive(int, "--concurrency"), default=10)
    p.add_argument("--rate", type=_positive(float, "--rate"), default=50.0, metavar="OPS/S")
    p.add_argument("--keys", type=_positive(int, "--keys"), help="register keys (default 40)")
    p.add_argument("--name", help="test name in the store (default from the workload)")
    p.add_argument("--store", type=Path, default=DEFAULT_ROOT, help="run store root")
    p.add_argument("--no-progress", action="store_true", help="no live progress display")


def _one(
    plan: plans.Plan, store: Path, args: argparse.Namespace, replay_of: Path | None = None
) -> RunOutcome:
    status = RunStatus()
    progress = Progress(lambda: status, enabled=not args.no_progress)
    print(f"seed {plan.seed}", flush=True)
    if plan.backend != "sim":  # what killed runs left: removed (Docker) or named (SSH hosts)
        leftovers(store, plan.backend, lambda m: print(m, file=sys.stderr, flush=True))
    with progress:
        progress.log(
            f"{plan.name}: {plan.backend}, {len(plan.nodes)} nodes, workload "
            f"{'+'.join(plan.workload)}, nemesis {'+'.join(plan.nemesis) or 'none'} "
            f"({plan.options.get('nemesis_mode', 'both')}), {plan.time_limit_s:g}s"
        )
        previous = signal.signal(signal.SIGTERM, _interrupt) if _in_main() else None
        try:
            outcome = run(plan, store, status=status, log=progress.log,
                          leave_running=args.leave_running)  # fmt: skip
        except RunNotStartedError as exc:  # nothing was stored: no store, verdict or replay lines
            raise CliError(f"the run could not start: {exc}") from None
        except Terminated:  # SIGTERM while the cluster was up: healed and removed by now
            raise KeyboardInterrupt from None
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
    result = outcome.result
    if outcome.error is not None:
        print(f"faultline run: error: {outcome.error}", file=sys.stderr, flush=True)
    print(f"store {outcome.run.path}")
    print(f"ops {result.ops}, valid: {str(result.valid).lower()}")
    if plan.nemesis and outcome.error is None:
        print(f"faults: {describe_fault_counts(result.faults)}")
    for reason in result.reasons:
        print(f"  {reason}")
    for name, r in result.checkers.items():
        if r.valid is False and r.anomalies:
            print(f"  {name}: {len(r.anomalies)} anomalies; first: {r.anomalies[0].message}")
    print(f"replay: faultline replay {shlex.quote(str(outcome.run.path))}")
    if replay_of is not None and plan.backend == "sim":
        print(replay_verdict(replay_of, outcome.run.path))
    if outcome.report is not None:
        # Last, so `make run` ends with the page to open.
        print(f"report: {outcome.report}")
    return outcome


def _interrupt(_signum: int, _frame: Any) -> None:
    # SIGTERM unwinds like Ctrl-C, in every stage (the cluster's own handler
    # takes over while it is up): `faultline run` heals, removes, exits 130.
    raise KeyboardInterrupt


def _in_main() -> bool:
    return threading.current_thread() is threading.main_thread()


def _worst(codes: list[int]) -> int:
    if EXIT_INVALID in codes:
        return EXIT_INVALID
    return EXIT_UNKNOWN if any(codes) else 0


# `faultline run` flags that describe a plan, with their defaults: with --plan
# the file describes it, and a flag that would change it is refused.
_PLAN_FLAG_DEFAULTS = {
    "nodes": None, "hosts": None, "db": "ember", "workload": None, "nemesis": "mix",
    "nemesis_mode": "both", "nemesis_phases": None, "failpoint": None, "db_setting": None,
    "time_limit": 60.0, "quiet_period": 5.0, "concurrency": 10, "rate": 50.0, "keys": None,
    "seed": None, "test_count": 1, "name": None,
}  # fmt: skip


def _plan_file_cmd(args: argparse.Namespace) -> int:
    given = [f"--{k.replace('_', '-')}" for k, v in _PLAN_FLAG_DEFAULTS.items()
             if getattr(args, k) != v]  # fmt: skip
    if given:
        raise CliError(f"--plan FILE describes the run; {', '.join(given)} would change it "
                       "(edit the file instead)")  # fmt: skip
    try:
        plan = plans.load(args.plan)
    except plans.PlanError as exc:
        raise CliError(str(exc)) from None
    if args.backend is not None and args.backend != plan.backend:
        if args.backend == "ssh":
            raise CliError("--plan with --backend ssh needs the hosts in the plan file")
        try:  # what the other backend would not honour (e.g. etcd on sim): refused now
            plan = plans.validate(msgspec.structs.replace(plan, backend=args.backend))
        except plans.PlanError as exc:
            raise CliError(f"--backend {args.backend}: {exc}") from None
    expect = plan.options.get("expect")
    codes, reproduced = [], 0
    for attempt in range(args.attempts):
        if args.attempts > 1:
            print(f"attempt {attempt + 1} of {args.attempts}", flush=True)
        outcome = _one(plan, args.store, args)
        codes.append(outcome.exit_code)
        reproduced += _reproduces(outcome, expect)
    if args.attempts > 1 or expect:
        what = (f"{expect['checker']} ({expect['rule']})" if expect
                else "an invalid verdict")  # fmt: skip
        print(f"reproduced {what} in {reproduced} of {args.attempts} attempts "
              f"({plan.backend})")  # fmt: skip
    return _worst(codes)


def _reproduces(outcome: RunOutcome, expect: dict[str, str] | None) -> bool:
    if expect is None:
        return outcome.result.valid is False
    checker = outcome.result.checkers.get(expect["checker"])
    if checker is None or checker.valid is not False:
        return False
    kinds = [a.kind for a in checker.anomalies] or ["invalid"]
    return expect["rule"] in kinds


def _run_cmd(args: argparse.Namespace) -> int:
    if args.plan is not None:
        return _plan_file_cmd(args)
    if args.attempts != 1:
        raise CliError("--attempts needs --plan FILE")
    plan = plan_from_args(args)
    codes = []
    for i in range(args.test_count):
        one = plan if i == 0 else msgspec.structs.replace(plan, seed=plan.seed + i)
        codes.append(_one(one, args.store, args).exit_code)
    return _worst(codes)


def run_plan(run_dir: Path) -> plans.Plan:
    """A stored run's plan (CliError naming what is wrong with the run dir)."""
    if not run_dir.is_dir():
        raise CliError(f"{run_dir} is not a run directory")
    try:
        return plans.load(run_dir / "test.json")
    except plans.PlanError as exc:
        raise CliError(str(exc)) from None


def _replay_cmd(args: argparse.Namespace) -> int:
    run_dir: Path = args.run_dir
    plan = run_plan(run_dir)
    # store/<test>/<run>: the run's own store root unless told otherwise.
    store = args.store or run_dir.resolve().parent.parent
    return _one(plan, store, args, replay_of=run_dir).exit_code


def replay_verdict(original: Path, replayed: Path) -> str:
    """Whether a simulated run's replay wrote the same bytes (it must: one seed, one run)."""
    names = [
        "history.jsonl",
        *sorted(str(p.relative_to(original)) for p in original.glob("nodes/*/events.jsonl")),
    ]
    differ = [n for n in names
              if not (replayed / n).is_file()
              or (original / n).read_bytes() != (replayed / n).read_bytes()]  # fmt: skip
    if not differ:
        return f"replay: byte-identical to {original} ({len(names)} files)"
    return (
        f"replay: DIFFERS from {original} in {', '.join(differ)} (a changed tree, "
        "or a determinism bug: tests/sim/test_whole_system.py)"
    )


def _meta_traffic(text: str, system: Any, workload: tuple[str, ...]) -> list[str]:
    """--meta-traffic's kinds, in their canonical order; refused where not sendable."""
    from workloads import meta_traffic

    if "metastore" not in workload:
        raise CliError("--meta-traffic needs the metastore workload (--workload ...,metastore)")
    try:
        kinds = meta_traffic.parse(text, ())
    except meta_traffic.TrafficError as exc:
        raise CliError(f"--meta-traffic: {exc}") from None
    if text == "all":  # every kind this system can send
        kinds = frozenset(system.meta_traffic)
    cannot = sorted(kinds - set(system.meta_traffic))
    if cannot:
        sends = ", ".join(system.meta_traffic) or "none of them"
        raise CliError(f"--meta-traffic: {system.name} cannot send {', '.join(cannot)} "
                       f"(it sends {sends})")  # fmt: skip
    return [k for k in meta_traffic.KINDS if k in kinds]
