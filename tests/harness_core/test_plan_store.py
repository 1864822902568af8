"""The plan (test.json) and the store layout."""

from pathlib import Path

import msgspec
import pytest

from harness import plan as planmod
from harness.plan import Plan, PlanError
from harness.store import iter_runs, new_run


def test_plan_round_trips_through_test_json(tmp_path: Path) -> None:
    """A dumped plan loads back equal, so replay runs the same plan."""
    plan = Plan(name="t", seed=42, nodes=("a", "b", "c"), options={"keys": 8})
    (tmp_path / "test.json").write_bytes(planmod.dump(plan))
    assert planmod.load(tmp_path / "test.json") == plan


def test_subseeds_are_stable_and_distinct() -> None:
    """Sub-seeds depend only on (seed, name): stable across calls, distinct per name."""
    plan = Plan(seed=7)
    assert plan.subseed("nemesis") == Plan(seed=7).subseed("nemesis")
    assert plan.subseed("nemesis") != plan.subseed("workload")
    assert plan.subseed("nemesis") != Plan(seed=8).subseed("nemesis")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"backend": "vm"}, "backend 'vm'"),
        ({"nodes": ()}, "at least one node"),
        ({"nodes": ("a", "a")}, "repeat"),
        ({"concurrency": 0}, "concurrency"),
        ({"time_limit_s": 0.0}, "time limit"),
        ({"seed": -1}, "seed"),
    ],
)
def test_bad_plans_name_the_bad_field(change: dict[str, object], message: str) -> None:
    """validate() rejects each bad field with a message naming it."""
    with pytest.raises(PlanError, match=message):
        planmod.validate(msgspec.structs.replace(Plan(), **change))


def test_malformed_test_json_is_a_plan_error(tmp_path: Path) -> None:
    """A corrupt or missing test.json raises PlanError naming the file."""
    bad = tmp_path / "test.json"
    bad.write_text("{not json")
    with pytest.raises(PlanError, match="not valid JSON"):
        planmod.load(bad)
    with pytest.raises(PlanError, match="cannot read"):
        planmod.load(tmp_path / "missing.json")


def test_new_run_follows_the_store_layout(tmp_path: Path) -> None:
    """new_run makes store/<test>/<time>-<seed>/nodes and points latest at it."""
    first = new_run(tmp_path, "reg ister", 5, started=0.0)
    second = new_run(tmp_path, "reg ister", 5, started=0.0)
    assert first.path == tmp_path / "reg-ister" / "19700101T000000-5"
    assert second.path != first.path
    assert first.nodes.is_dir()
    assert (tmp_path / "latest").resolve() == second.path.resolve()
    first.plan.write_text("{}")
    second.history.write_text("")
    assert [r.path for r in iter_runs(tmp_path)] == [first.path, second.path]
