"""Every file in examples/ runs as shipped and passes (issue 23), in a short form: every
distinct cell once, on its first seed, for a few seconds, under --backend sim where the
file's cells allow it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from harness.nightly import PASSED, Matrix, MatrixError, load_matrix, run_night
from harness.nightly_plans import cell_plans

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SHORT_S = 5.0


def short_form(matrix: Matrix, store: Path) -> Matrix:
    """The matrix cut to one seed and a few seconds a cell, simulated where it can be."""
    short = dataclasses.replace(
        matrix, seeds=matrix.seeds[:1], time_limit_s=SHORT_S, grace_s=120.0, budget_s=1800.0,
        store=store, junit=store / "junit.xml",
    )  # fmt: skip
    simulated = dataclasses.replace(short, backend="sim", explore_budget=None)
    try:
        cell_plans(simulated)
    except MatrixError:
        return short  # the file's cells need its own backend (etcd: Docker)
    return simulated


def test_every_example_is_a_matrix() -> None:
    """examples/ holds nightly matrices only, so the test below runs all of it."""
    files = sorted(p.name for p in EXAMPLES.iterdir() if p.is_file())
    assert files
    assert all(name.endswith(".toml") for name in files), files


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.toml")))
def test_an_example_is_honoured_as_shipped(name: str) -> None:
    """Every cell of the file builds the plan it names (nothing refused or dropped)."""
    matrix = load_matrix(EXAMPLES / name)
    plans = cell_plans(matrix)
    distinct = {(c.workload, c.nemesis, c.nodes) for c in matrix.cells()}
    assert len(plans) == len(distinct)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.toml")))
def test_an_example_runs_and_passes_in_short_form(tmp_path: Path, name: str) -> None:
    """No cell errors, none fails, on the clean tree."""
    matrix = short_form(load_matrix(EXAMPLES / name), tmp_path / "store")
    outcomes = run_night(matrix)
    assert len(outcomes) == len({(c.workload, c.nemesis, c.nodes) for c in matrix.cells()})
    bad = [f"{o.cell.name}: {o.status}: {'; '.join(o.reasons)[:300]}\n{o.output_tail[-800:]}"
           for o in outcomes if o.status != PASSED]  # fmt: skip
    assert not bad, "\n".join(bad)
