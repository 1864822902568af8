"""Faults are counted and drawn as they happened (issue 23, item 2): every fault
op says whether it was applied, the counts per kind reach results.json and
the run's summary, a fault not applied is a tick on the report, never a
band, and a plan a db cannot aim is adapted or refused before it runs."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import msgspec
import pytest

from checkers.compose import check
from checkers.history import Event, pair, validate
from checkers.stats import describe_fault_counts, fault_counts, fault_windows, unapplied_faults
from harness import plan as plans
from harness.dbs import etcd as etcd_module
from harness.dbs.etcd import EtcdDB
from harness.runner import clock_faults_possible, nemesis_fit, traffic_notes
from nemesis.fault import Fault
from nemesis.generator import NemesisSchedule, fit_targets
from nemesis.schedule import SLOW_RATE_KBIT, NemesisWorker
from nemesis.targets import ROLE_TARGETS, Resolver
from reports.data import load_run_data
from reports.figures import bands
from reports.render import render_html
from reports.timeline import event_row
from tests.checkers.helpers import HistoryBuilder, write_run
from tests.runner.test_nemesis_worker import NODES, FakeControl, FakeDB
from workloads.generator import Op

MS = 1_000_000
NODES_NAMES = [n.name for n in NODES]


def _invoke(worker: NemesisWorker, f: str, value: dict[str, Any]) -> Any:
    return asyncio.run(worker.invoke(Op(f=f, value=value)))


class PidDB(FakeDB):
    """A db whose kill names the pids it hit, as ProcessDB's does: none on `down`."""

    def __init__(self, down: set[str]) -> None:
        super().__init__()
        self.down = down

    def kill(self, control: Any, names: Any) -> Fault:
        pids = {n: ([] if n in self.down else [42]) for n in names}
        return Fault(kind="kill", detail={"pids": pids}, commands={})


class NoFailpointDB(FakeDB):
    """etcd's shape: set_failpoint would refuse, and says so up front."""

    has_failpoints = False

    def set_failpoint(self, name: str, failpoint: str, params: Any) -> None:
        raise AssertionError("a db without failpoints was asked for one")


# -- the worker records applied / not applied --------------------------------


def test_an_applied_fault_says_so_and_a_failed_one_says_why() -> None:
    """ok completions carry applied: true; info ones applied: false and the reason."""
    worker = NemesisWorker(FakeControl(), NODES, PidDB(down=set()))  # type: ignore[arg-type]
    ok = _invoke(worker, "kill", {"kind": "kill", "target": "random", "seed": 1})
    assert ok.type == "ok"
    assert ok.value["applied"] is True

    empty = NemesisWorker(FakeControl(), NODES, PidDB(down=set()))  # type: ignore[arg-type]
    empty.resolver.status = lambda _n: {"groups": {}}
    info = _invoke(empty, "pause", {"kind": "pause", "target": "meta-leader", "seed": 1})
    assert info.type == "info"
    assert info.value["applied"] is False
    assert info.value["reason"].startswith("no node declares itself leader of meta")


def test_killing_a_node_that_is_not_running_is_not_applied() -> None:
    """A random target whose process is down (an etcd spare): info, nothing to heal."""
    worker = NemesisWorker(FakeControl(), NODES, PidDB(down=set(NODES_NAMES)))  # type: ignore[arg-type]
    reply = _invoke(worker, "kill", {"kind": "kill", "target": "random", "seed": 3})
    assert reply.type == "info"
    assert reply.value["applied"] is False
    assert "is not running" in reply.value["reason"]
    assert "unresolved" in reply.value  # the schedule heals nothing
    assert worker.active == {}


def test_slow_without_netem_or_failpoints_throttles_the_links() -> None:
    """No netem and a db without failpoints: an HTB rate limit toward the target."""
    control = FakeControl(netem=False)
    worker = NemesisWorker(control, NODES, NoFailpointDB())  # type: ignore[arg-type]
    reply = _invoke(worker, "slow", {"kind": "slow", "target": "joining", "seed": 2,
                                     "trigger": {"joining": ["n4"]}})  # fmt: skip
    assert reply.type == "ok", reply.error
    assert reply.value["applied"] is True
    assert reply.value["method"] == "rate-limit"
    scripts = " ".join(s for batch in control.scripts for s in batch.values())
    assert f"htb rate {SLOW_RATE_KBIT}kbit" in scripts
    assert "netem" not in scripts
    assert sorted(batch for s in control.scripts for batch in s) == ["n1", "n2", "n3", "n5"]
    healed = _invoke(worker, "heal-slow", {"kind": "slow"})
    assert "tc qdisc del" in " ".join(c for cs in healed.value["commands"].values() for c in cs)


def test_slow_by_failpoint_that_fails_is_not_applied_and_leaves_none_set() -> None:
    """A failpoint refused half-way is unset again and the op says why."""

    class Refuses(FakeDB):
        def set_failpoint(self, name: str, failpoint: str, params: Any) -> None:
            if name == "n3" and params is not None:
                raise RuntimeError("n3 refused")
            super().set_failpoint(name, failpoint, params)

    db = Refuses()
    worker = NemesisWorker(FakeControl(netem=False), NODES, db)  # type: ignore[arg-type]
    reply = _invoke(worker, "slow", {"kind": "slow", "target": "random", "seed": 5})
    assert reply.type == "info"
    assert reply.value["applied"] is False
    assert all(v is None for v in db.failpoints.values())
    assert worker.slow_method is None  # no "slow catch-up used failpoint" note


# -- etcd's leader through etcd's own status ----------------------------------


def test_etcd_status_names_its_leader_for_role_targets(monkeypatch: pytest.MonkeyPatch) -> None:
    """etcd's maintenance status (leader == own member id) resolves group-leader."""
    ids = {"10.0.0.1": "11", "10.0.0.2": "22", "10.0.0.3": "33"}

    def fake_http_json(url: str, *_a: Any, **_kw: Any) -> dict[str, Any] | None:
        ip = url.split("//")[1].split(":")[0]
        if ip not in ids:
            return None  # a spare runs nothing
        return {"header": {"member_id": ids[ip]}, "leader": "22", "raftTerm": "4"}

    monkeypatch.setattr(etcd_module, "http_json", fake_http_json)
    db = EtcdDB(NODES, {}, seed=1)
    assert db.status("n2")["groups"] == {"etcd": {"role": "leader", "term": 4}}  # type: ignore[index]
    resolver = Resolver(NODES_NAMES, db.status, lambda _n: None, db.groups)
    found = resolver.resolve("group-leader", {}, random.Random(1))
    assert found.node == "n2"


# -- counts, windows and ticks --------------------------------------------------


def _history() -> list[Event]:
    h = HistoryBuilder()
    for i in range(12):
        h.op(i % 3, "write", dt=100 * MS, key="k", value=i)
    part = {"kind": "partition", "grouping": "halves"}
    h.op("nemesis", "partition", dt=MS, value=part, result={**part, "applied": True})
    h.op("nemesis", "heal-partition", dt=500 * MS, value={"kind": "partition"})
    for reason in ("no node declares itself leader of etcd (answered: n1, n2)",
                   "no node declares itself leader of etcd (answered: n1)"):  # fmt: skip
        pause = {"kind": "pause", "target": "group-leader"}
        done = {**pause, "applied": False, "reason": reason, "unresolved": reason}
        h.op("nemesis", "pause", type_="info", dt=MS, value=pause, error=reason, result=done)
    h.op("nemesis", "partition", dt=MS, value=part, result={**part, "applied": True})
    h.op("nemesis", "heal-partition", dt=500 * MS, value={"kind": "partition"})
    slow = {"kind": "slow", "target": "joining"}
    why = "DBError: etcd has no failpoints (raft.append.delay on n2)"
    h.op("nemesis", "slow", type_="info", dt=MS, value=slow, error=why,
         result={**slow, "applied": False, "reason": why})  # fmt: skip
    h.op("nemesis", "heal-slow", dt=MS, value={"kind": "slow"}, result={"healed": None})
    for i in range(12):
        h.op(i % 3, "write", dt=100 * MS, key="k", value=100 + i)
    events = [Event(**e) for e in h.events]
    validate(events)
    return events


def test_counts_per_kind_say_applied_and_not_with_reasons() -> None:
    """The summary line of the issue, from a history, and results.json's counts."""
    ops = pair(_history())
    counts = fault_counts(ops)
    assert counts == {
        "partition": {"applied": 2, "not_applied": 0, "reasons": {}},
        "pause": {"applied": 0, "not_applied": 2,
                  "reasons": {"no node declares itself leader of etcd": 2}},
        "slow": {"applied": 0, "not_applied": 1, "reasons": {"etcd has no failpoints": 1}},
    }  # fmt: skip
    assert describe_fault_counts(counts) == (
        "partition 2 applied; pause 0 of 2 applied (no node declares itself leader of etcd); "
        "slow 0 of 1 applied (etcd has no failpoints)"
    )
    result = check({"name": "t", "seed": 1}, _history(), {"checkers": ["stats"]})
    assert msgspec.json.decode(msgspec.json.encode(result))["faults"] == counts


def test_a_fault_not_applied_has_no_window() -> None:
    """Only applied faults are windows; the others are moments with their reason."""
    ops = pair(_history())
    assert [w["f"] for w in fault_windows(ops, 10**12)] == ["partition", "partition"]
    ticks = unapplied_faults(ops)
    assert [t["f"] for t in ticks] == ["pause", "pause", "slow"]
    assert ticks[2]["reason"].startswith("DBError: etcd has no failpoints")


def test_jepsen_style_info_completions_still_count_as_applied() -> None:
    """Jepsen completes every nemesis op info: without an error it was applied."""
    h = HistoryBuilder()
    h.op("nemesis", "partition", type_="info", dt=MS, value=":majority")
    h.op("nemesis", "heal-partition", type_="info", dt=MS)
    ops = pair([Event(**e) for e in h.events])
    assert fault_counts(ops)["partition"] == {"applied": 1, "not_applied": 0, "reasons": {}}
    assert len(fault_windows(ops, 10**9)) == 1


def test_the_report_ticks_a_fault_not_applied_and_never_shades_it(tmp_path: Path) -> None:
    """report.html: a dotted line and an x marker (hover: why) per unapplied fault,
    bands for applied ones."""
    events = _history()
    lines = b"".join(msgspec.json.encode(e) + b"\n" for e in events)
    run = write_run(tmp_path / "run", lines, {"name": "t", "seed": 1, "nemesis": ["mix"]})
    data = load_run_data(run)
    shapes = bands(data)
    rects = [s for s in shapes if s["type"] == "rect"]
    ticks = [s for s in shapes if s["type"] == "line"]
    assert len(rects) == 2  # the two partitions
    assert len(ticks) == 3
    assert all(t["line"]["dash"] == "dot" for t in ticks)
    pause_times = {round(t["time"] / 1e9, 6) for t in data.unapplied}
    assert all(r["x0"] not in pause_times for r in rects)
    row = event_row(data, None)
    assert row is not None
    (marks,) = [t for t in row.traces if t["name"] == "not applied"]
    assert len(marks["x"]) == 3
    assert all(" not applied: " in h for h in marks["hovertext"])
    page = render_html(data)
    assert 'data-unapplied="3"' in page
    assert "3 more not applied" in page
    assert "Faults not applied (dotted, marked ✕, never shaded): pause at" in page


# -- adapted or refused before the run -------------------------------------------


def test_a_db_without_some_roles_gets_a_mix_aimed_at_the_roles_it_has() -> None:
    """etcd's mix never draws a placement driver, primary or metastore leader."""
    schedule = NemesisSchedule(random.Random(5), ["mix"], roles=("group-leader",))
    drawn = {schedule._fault(None).value.get("target") for _ in range(400)} - {None}
    assert drawn <= {"group-leader", "random", "joining"}
    assert "group-leader" in drawn
    note = fit_targets(["mix"], None, ("group-leader",), "etcd")
    assert note is not None
    assert "no meta-leader, placement-driver, primary" in note


def test_every_role_leaves_the_draws_as_they_were() -> None:
    """ember's schedule with all roles draws what it drew before roles existed."""
    a = NemesisSchedule(random.Random(7), ["mix"])
    b = NemesisSchedule(random.Random(7), ["mix"], roles=ROLE_TARGETS)
    assert [a._fault(None).value for _ in range(50)] == [b._fault(None).value for _ in range(50)]
    assert fit_targets(["mix"], None, ROLE_TARGETS, "ember") is None


def test_a_plan_aiming_only_at_roles_the_db_lacks_is_refused() -> None:
    """nemesis_targets naming only etcd-less roles: PlanError (exit 2), one line."""
    plan = plans.Plan(db="etcd", nemesis=("mix",),
                      options={"nemesis_targets": ["placement-driver", "primary"]})  # fmt: skip
    with pytest.raises(plans.PlanError, match="etcd has no placement-driver, primary"):
        nemesis_fit(plan)
    mixed = plans.Plan(db="etcd", nemesis=("kill",),
                       options={"nemesis_targets": ["primary", "random"]})  # fmt: skip
    assert nemesis_fit(mixed) == [
        "nemesis on etcd: primary dropped from the targets (etcd has none); "
        "kills and pauses aim at random"
    ]


def test_refused_plan_file_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`faultline run --plan` of such a plan: exit 2, one error line, no traceback."""
    from harness import cli

    # ssh, not docker: no cleanup of other runs' clusters before the refusal
    plan = plans.Plan(db="etcd", backend="ssh", nemesis=("mix",),
                      options={"nemesis_targets": ["primary"]})  # fmt: skip
    path = tmp_path / "test.json"
    path.write_bytes(plans.dump(plan))
    code = cli.main(["run", "--plan", str(path), "--store", str(tmp_path / "store"),
                     "--no-progress"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        "faultline run: error: etcd has no primary: nemesis targets primary name no role it "
        "can aim at"
    )


def test_the_etcd_mix_says_before_the_run_what_it_adapted_to() -> None:
    """etcd's default mix: the roles it aims at and how it slows, said up front;
    ember's needs no word."""
    notes = nemesis_fit(plans.Plan(db="etcd", nemesis=("mix",)))
    assert len(notes) == 3
    assert notes[0].startswith("nemesis on etcd: no meta-leader, placement-driver, primary")
    assert notes[1] == "nemesis on etcd: mix draws no clock faults (it cannot move its clocks)"
    assert f"rate-limits them to {SLOW_RATE_KBIT} kbit (etcd has no failpoints)" in notes[2]
    assert nemesis_fit(plans.Plan(db="etcd", nemesis=("kill",))) == []
    assert nemesis_fit(plans.Plan(db="ember", nemesis=("mix",))) == []
    # ember on SSH hosts follows the offset file as on Docker: mix draws clock faults.
    ssh = plans.Plan(db="ember", backend="ssh", nodes=("h1", "h2", "h3"), nemesis=("mix",))
    assert nemesis_fit(ssh) == []
    assert clock_faults_possible(plans.Plan(db="ember", nemesis=("mix",)))
    assert clock_faults_possible(ssh)
    assert not clock_faults_possible(plans.Plan(db="etcd", nemesis=("mix",)))
    assert clock_faults_possible(plans.Plan(db="ember", nemesis=("clock",)))


def test_compact_kill_is_refused_where_nothing_compacts() -> None:
    """ember compacts its metastore, which runs only with the control plane:
    a register-only plan is refused before anything starts; etcd always can."""
    bare = plans.Plan(db="ember", workload=("register",), nemesis=("mix", "compact-kill"))
    with pytest.raises(plans.PlanError, match="compacts its metastore, which runs only with"):
        nemesis_fit(bare)
    with_meta = plans.Plan(db="ember", workload=("register", "metastore"),
                           nemesis=("mix", "compact-kill"))  # fmt: skip
    # Not refused; what it says is that this plan has no zone (no primary to aim at).
    assert [n for n in nemesis_fit(with_meta) if "no primary to aim at" not in n] == []
    assert nemesis_fit(plans.Plan(db="etcd", nemesis=("compact-kill",))) == []


def test_reasons_count_together_whichever_node_they_name() -> None:
    """Only the trailing parenthesis (the node, the URL) is dropped: a fault not
    applied because its target was down counts as one cause, not one per node."""
    from checkers.stats import short_reason

    down = "UnresolvedError: the target is not running (n2, leader of part-5 (reported the phase))"
    assert short_reason(down) == "the target is not running"
    assert short_reason("the target is not running (n5, random node)") == (
        "the target is not running"
    )
    assert short_reason("DBError: etcd has no failpoints (slow on n1)") == "etcd has no failpoints"
    assert short_reason("no node declares itself leader of etcd (answered: n1, n2)") == (
        "no node declares itself leader of etcd"
    )


def test_metastore_traffic_without_the_workload_is_said_not_sent() -> None:
    """A swarm draw or a shrunk plan can drop the metastore workload while
    --meta-traffic stays in the plan: the run names the kinds it never sent."""
    traffic = {"meta_traffic": ["delete", "compare-mod"]}
    without = plans.Plan(workload=("register", "rebalance"), options=traffic)
    assert traffic_notes(without) == [
        "--meta-traffic delete,compare-mod: none sent, the plan runs no metastore workload"
    ]
    assert traffic_notes(plans.Plan(workload=("register", "metastore"), options=traffic)) == []
    assert traffic_notes(plans.Plan(workload=("register",))) == []


def test_ember_aims_only_at_the_roles_its_workloads_start() -> None:
    """ember's metastore leader and placement driver exist only with the
    control plane, its primaries only with a zone: a plan without them
    drew kills and pauses that could only come back not applied."""
    from harness.db import EmberDB
    from harness.dbs.registry import SYSTEMS

    ember = SYSTEMS["ember"]
    for workload, roles in [
        (("register",), ("group-leader",)),
        (("register", "change-peers"), ("group-leader",)),
        (("register", "metastore"), ("group-leader", "meta-leader", "placement-driver")),
        (("register", "rebalance"), ROLE_TARGETS),
        (("register", "change-peers", "cancel-race"), ROLE_TARGETS),
    ]:
        plan = plans.Plan(db="ember", workload=workload, nemesis=("mix",))
        assert ember.plan_roles(plan) == roles, workload
    assert EmberDB.roles_in(("register",), {"meta_nodes": "auto"}) == (
        "group-leader", "meta-leader", "placement-driver")  # fmt: skip

    bare = plans.Plan(db="ember", workload=("register", "change-peers"), nemesis=("mix",))
    assert nemesis_fit(bare)[0] == (
        "nemesis on ember running register+change-peers: no meta-leader, placement-driver, "
        "primary to aim at; mix kills, pauses and isolating partitions aim at group-leader, "
        "random, joining")  # fmt: skip
    only = msgspec.structs.replace(bare, options={"nemesis_targets": ["primary"]})
    refusal = r"ember running register\+change-peers has no primary"
    with pytest.raises(plans.PlanError, match=refusal):
        nemesis_fit(only)


def test_a_run_without_the_control_plane_aims_at_no_role_it_lacks(tmp_path: Path) -> None:
    """The runner builds the schedule from the plan's roles: a simulated
    register + change-peers mix aims no fault at a metastore leader, a
    placement driver or a primary (seed 1 of this plan lost 3 of its kills
    to 'no node declares itself leader of meta' before)."""
    from harness.runner import run

    plan = plans.Plan(backend="sim", seed=1, workload=("register", "change-peers"),
                      nemesis=("mix",), time_limit_s=30.0)  # fmt: skip
    outcome = run(plan, tmp_path / "store")
    lines = outcome.run.path.joinpath("history.jsonl").read_bytes().splitlines()
    events = [msgspec.json.decode(line) for line in lines]
    aimed = [e["value"].get("target") for e in events
             if e["process"] == "nemesis" and e["type"] == "invoke"
             and isinstance(e.get("value"), dict)]  # fmt: skip
    assert aimed, "the plan drew no faults"
    assert not {"meta-leader", "placement-driver", "primary"} & set(aimed), aimed
    assert "group-leader" in aimed or "random" in aimed
