"""One local Spark session and one synthetic store for the pipeline tests.

The store is built with harness.synthetic (real checker verdicts) over three
nights and two versions, and holds, besides valid runs: invalid ones (a
planted stale read), unknown ones (too little traffic to judge), crashed
ones (no results.json, a torn last history line), a flaky seed (one plan,
valid one night and invalid the next), a plan whose verdict flips with the
version, and three corrupt runs the ingest must skip.
"""

from __future__ import annotations

import calendar
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest

from harness.synthetic import make_run

NIGHTS = ("2026-11-18", "2026-11-19", "2026-11-20")
VERSION_OF_NIGHT = {"2026-11-18": "1.0", "2026-11-19": "1.0", "2026-11-20": "1.1"}
# group -> (faults, changes): which windows the synthetic story has
GROUPS = {"g0": (True, True), "g1": (True, False), "g2": (False, True), "g3": (False, False)}


@dataclass(frozen=True)
class Spec:
    """One synthetic run of the store."""

    name: str
    seed: int
    night: str
    valid: bool = True
    ops: int = 120
    crashed: bool = False

    @property
    def group(self) -> tuple[bool, bool]:
        return GROUPS.get(self.name, (True, True))

    @property
    def version(self) -> str:
        return VERSION_OF_NIGHT[self.night]


def specs() -> list[Spec]:
    """Every run of the store (the corrupt ones aside)."""
    out = []
    for night in NIGHTS:
        out += [Spec(f"g{seed % 4}", seed, night) for seed in range(1, 17)]
        out += [Spec("g0", 17, night, valid=False), Spec("g1", 18, night, valid=False)]
        out += [Spec("g0", 19, night, ops=5), Spec("g2", 20, night, ops=5)]
        out.append(Spec("g0", 21, night, crashed=True))
    out += [Spec("flaky", 30, NIGHTS[0]), Spec("flaky", 30, NIGHTS[1], valid=False)]
    out += [Spec("flip", 40, NIGHTS[0]), Spec("flip", 40, NIGHTS[2], valid=False)]
    return out


def _write_run(store: Path, spec: Spec, hour: int) -> Path:
    faults, changes = spec.group
    started = calendar.timegm((*map(int, spec.night.split("-")), hour // 60, hour % 60, 0, 0, 0, 0))
    run = make_run(store, seed=spec.seed, ops=spec.ops, valid=spec.valid, faults=faults,
                   changes=changes, name=spec.name, started=started)  # fmt: skip
    # Version it, and drop the generator's own note of the intended verdict: a
    # flaky seed is ONE plan that came out both ways.
    plan: dict[str, Any] = msgspec.json.decode(run.plan.read_bytes())
    plan["db_settings"]["version"] = spec.version
    plan["options"]["synthetic"].pop("valid")
    run.plan.write_bytes(msgspec.json.encode(plan))
    if spec.crashed:
        run.results.unlink()
        history = run.history.read_bytes()
        run.history.write_bytes(history[: len(history) - 20])  # a torn last line
    return run.path


def _corrupt(store: Path) -> dict[str, str]:
    """Three runs the ingest must skip: run id -> the start of the reason."""
    bad_plan = make_run(store, seed=91, ops=50, name="corrupt", started=1_763_500_000).path
    (bad_plan / "test.json").write_text("{not json")
    bad_history = make_run(store, seed=92, ops=50, name="corrupt", started=1_763_500_000).path
    lines = (bad_history / "history.jsonl").read_text().splitlines()
    lines[10] = '{"index": "ten"}'
    (bad_history / "history.jsonl").write_text("\n".join(lines) + "\n")
    no_plan = make_run(store, seed=93, ops=50, name="corrupt", started=1_763_500_000).path
    (no_plan / "test.json").unlink()
    return {
        f"corrupt/{bad_plan.name}": "test.json is not valid JSON",
        f"corrupt/{bad_history.name}": "malformed history",
        f"corrupt/{no_plan.name}": "cannot read test.json",
    }


@dataclass
class Store:
    """The synthetic store and what it was built from."""

    root: Path
    runs: dict[str, Spec]  # run id -> spec
    corrupt: dict[str, str]  # run id -> reason prefix


@pytest.fixture(scope="session")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """The synthetic store (built once)."""
    root = tmp_path_factory.mktemp("pipeline") / "store"
    runs = {}
    for i, spec in enumerate(specs()):
        path = _write_run(root, spec, hour=i)
        runs[f"{path.parent.name}/{path.name}"] = spec
    return Store(root, runs, _corrupt(root))


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local Spark session for every pipeline test (starting one costs seconds)."""
    pytest.importorskip("pyspark")
    from pipeline.session import spark_session

    session = spark_session("local[2]", shuffle_partitions=2)
    yield session
    session.stop()
