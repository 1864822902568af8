"""Verifiable verdicts: witnesses for valid, counterexamples for invalid,
and `faultline verify` re-checking both."""

from __future__ import annotations

import itertools
import json
import shutil
import time
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checkers.linearizability import MODELS, LinOp, check
from checkers.linearizability.check import partition, prepare
from checkers.linearizability.search import Budget, OutOfBudgetError, Search
from checkers.linearizability.shrink import check_reduction, proves_failure
from checkers.linearizability.stale import check_stale, find_stale_read
from checkers.linearizability.synth import SynthSpec, synthesize
from checkers.linearizability.types import Witness
from checkers.linearizability.witness import WitnessError, verify
from checkers.linearizability.witness import build as build_witness
from harness.cli import main

DATA = Path(__file__).parent / "data"


def _op(i: int, call: int, ret: int | None, f: str, **kw: object) -> LinOp:
    return LinOp(id=i, process=i, call=call, ret=ret, f=f, key="k", known=ret is not None, **kw)  # type: ignore[arg-type]


def test_witness_lists_ops_in_order_with_states() -> None:
    """A valid verdict carries each key's linearization and states."""
    ops = [_op(1, 0, 5, "write", input=1), _op(2, 1, 2, "read", output=None),
           _op(3, 6, 7, "read", output=1)]  # fmt: skip
    result = check(ops, "register")
    assert result.valid is True
    assert [(w.key, w.ops, w.states) for w in result.witness] == [("k", [2, 1, 3], [None, 1, 1])]


def test_hidden_write_goes_just_before_the_write_that_hides_it() -> None:
    """A write overwritten unseen is placed before the erasing write."""
    ops = [_op(1, 0, 10, "write", input=1), _op(2, 1, 3, "write", input=2),
           _op(3, 4, 5, "read", output=2), _op(4, 11, 12, "read", output=2)]  # fmt: skip
    result = check(ops, "register")
    assert result.valid is True
    (w,) = result.witness
    verify(MODELS["register"], "k", prepare(ops, MODELS["register"]), w)
    assert w.ops.index(1) < w.ops.index(2)


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        (lambda w: (w.ops.insert(0, w.ops.pop(1)), w.states.insert(0, w.states.pop(1))), "ret"),
        (lambda w: w.states.__setitem__(0, 99), "the witness says"),
        (lambda w: (w.ops.pop(), w.states.pop()), "not placed"),
        (lambda w: (w.ops.append(w.ops[0]), w.states.append(1)), "twice"),
    ],
)
def test_a_tampered_witness_does_not_verify(tamper: object, message: str) -> None:
    """Wrong order, state, a missing or a repeated op: each is caught."""
    ops = [_op(1, 0, 1, "write", input=1), _op(2, 2, 3, "write", input=2),
           _op(3, 4, 5, "read", output=2)]  # fmt: skip
    model = MODELS["register"]
    (w,) = check(ops, model).witness
    bad = msgspec.structs.replace(w, ops=list(w.ops), states=list(w.states))
    tamper(bad)  # type: ignore[operator]
    with pytest.raises(WitnessError, match=message):
        verify(model, "k", prepare(ops, model), bad)


def test_counterexample_is_the_few_ops_that_fail() -> None:
    """Reads and unobserved writes that do not matter are shrunk away."""
    ops = [_op(1, 0, 1, "write", input=1), _op(2, 2, 3, "read", output=1),
           _op(3, 4, 5, "write", input=3), _op(4, 6, 7, "read", output=1),
           _op(5, 8, 9, "read", output=3), _op(6, 10, 11, "write", input=4)]  # fmt: skip
    result = check(ops, "register")
    assert result.valid is False
    cex = result.counterexample
    assert cex is not None
    assert cex.complete
    # write 3 then read 1: read 1 needs write 1 before write 3; all else goes.
    assert sorted(op.id for op in cex.ops) == [1, 3, 4]
    assert check_reduction(MODELS["register"], prepare(ops, MODELS["register"]), cex) is None
    assert proves_failure(MODELS["register"], cex, 5.0)


def test_an_unknown_cas_keeps_the_unknown_write_it_needs() -> None:
    """An info put is observable through an info cas that expects it."""
    ops = [LinOp(id=1, process=1, call=0, ret=None, f="put", key="k", input="a", known=False),
           LinOp(id=2, process=2, call=1, ret=None, f="cas", key="k", input=("a", "b"),
                 known=False),
           LinOp(id=3, process=3, call=5, ret=6, f="get", key="k", output="b")]  # fmt: skip
    assert check(ops, "kv").valid is True


specs = st.builds(
    SynthSpec,
    model=st.sampled_from(["register", "cas-register", "kv"]),
    ops=st.integers(2, 40),
    keys=st.integers(1, 3),
    clients=st.integers(1, 5),
    info_rate=st.sampled_from([0.0, 0.1]),
    values=st.sampled_from([3, 5]),
    seed=st.integers(0, 2**32),
)


@settings(max_examples=40, deadline=None)
@given(specs, st.data())
def test_counterexamples_are_proven_reductions(spec: SynthSpec, data: st.DataObject) -> None:
    """A failing history's counterexample is a sound reduction that fails."""
    model = MODELS[spec.model]
    ops = synthesize(spec, model)
    reads = [i for i, op in enumerate(ops) if op.known and op.f in ("get", "read")]
    if not reads:
        return
    i = data.draw(st.sampled_from(reads))
    ops[i] = msgspec.structs.replace(ops[i], output="never written" if spec.model == "kv" else -1)
    result = check(ops, model, time_limit_s=30, workers=1)
    assert result.valid is False
    cex = result.counterexample
    assert cex is not None
    part = {repr(k): v for k, v in partition(prepare(ops, model), model)}[repr(cex.key)]
    assert len(cex.ops) <= len(part)
    if cex.stale_read is not None:  # proven by the stale-read rule instead
        assert check_stale(model, part, *cex.stale_read) is None
        return
    assert check_reduction(model, part, cex) is None
    assert proves_failure(model, cex, 10.0)


@settings(max_examples=40, deadline=None)
@given(specs)
def test_witnesses_of_generated_histories_verify(spec: SynthSpec) -> None:
    """Every linearizable generated history's witness verifies key by key."""
    model = MODELS[spec.model]
    ops = prepare(synthesize(spec, model), model)
    result = check(ops, model, time_limit_s=30, workers=1)
    assert result.valid is True
    parts = {repr(k): v for k, v in partition(ops, model)}
    assert {repr(w.key) for w in result.witness} == set(parts)
    for w in result.witness:
        verify(model, w.key, parts[repr(w.key)], msgspec.convert(msgspec.to_builtins(w), Witness))


def _checked(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    shutil.copyfile(DATA / "knossos" / name, path)
    main(["check", str(path), "--checker", "linearizable"])
    return tmp_path / "results.json"


def test_verify_accepts_a_checked_runs_witness_and_rejects_a_forged_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`faultline verify` passes check's own witness; a swapped pair fails it."""
    results_path = _checked(tmp_path, "memstress3-0.edn")
    assert main(["verify", str(tmp_path)]) == 0
    assert "witness verified" in capsys.readouterr().out
    results = json.loads(results_path.read_text())
    w = results["checkers"]["linearizable"]["figures"]["witness"][0]
    w["ops"][0], w["ops"][-1] = w["ops"][-1], w["ops"][0]
    results_path.write_text(json.dumps(results))
    assert main(["verify", str(results_path)]) == 1
    assert "NOT VERIFIED" in capsys.readouterr().out


def test_verify_reruns_a_counterexample(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An invalid run's counterexample is re-checked; a padded one is refused."""
    results_path = _checked(tmp_path, "rethink-fail-minimal.edn")
    assert main(["verify", str(tmp_path)]) == 0
    assert "counterexample verified" in capsys.readouterr().out
    results = json.loads(results_path.read_text())
    cex = results["checkers"]["linearizable"]["figures"]["counterexample"]
    assert 1 <= len(cex["ops"]) <= 2  # the read of 3 (and at most the write it races)
    cex["ops"] = [op for op in cex["ops"] if op["f"] != "read"]  # drop the impossible read
    results_path.write_text(json.dumps(results))
    assert main(["verify", str(results_path)]) == 1


reg_specs = st.builds(
    SynthSpec,
    model=st.sampled_from(["register", "cas-register"]),
    ops=st.integers(2, 80),
    keys=st.just(1),
    clients=st.integers(1, 8),
    info_rate=st.sampled_from([0.0, 0.1, 0.3]),
    values=st.sampled_from([2, 3, 5]),
    seed=st.integers(0, 2**32),
)


@settings(max_examples=200, deadline=None)
@given(reg_specs)
def test_no_stale_read_is_claimed_in_a_linearizable_history(spec: SynthSpec) -> None:
    """The stale-read rule never fires on a history that is linearizable."""
    model = MODELS[spec.model]
    ops = prepare(synthesize(spec, model), model)
    assert find_stale_read(model, ops) is None


@settings(max_examples=200, deadline=None)
@given(reg_specs, st.data())
def test_a_claimed_stale_read_is_one_the_search_cannot_place(
    spec: SynthSpec, data: st.DataObject
) -> None:
    """Wherever the rule fires (on histories with a read changed at random),
    the plain search agrees the history is not linearizable."""
    model = MODELS[spec.model]
    ops = synthesize(spec, model)
    reads = [i for i, op in enumerate(ops) if op.known and op.f == "read"]
    if not reads:
        return
    i = data.draw(st.sampled_from(reads))
    ops[i] = msgspec.structs.replace(ops[i], output=data.draw(st.sampled_from([None, 0, 1, 2])))
    ops = prepare(ops, model)
    stale = find_stale_read(model, ops)
    if stale is None:
        return
    budget = Budget(time.monotonic() + 30, 1_000_000, 0)
    assert Search(model, ops, budget, trace=False).run().valid is False
    assert check_stale(model, ops, stale.read.id, stale.overwriter.id) is None


def test_unknown_names_the_keys_out_of_budget_and_how_far_they_got() -> None:
    """An undecided check says which keys ran out and how far each search got."""
    from checkers.linear import _undecided
    from checkers.linearizability.types import LinResult, PartitionResult

    result = LinResult(
        valid="unknown", model="kv", ops=9, partitions=2, states_explored=5, cache_size=1,
        elapsed_s=1.0, partition_results=[
            PartitionResult(key="a", valid=True, ops=4),
            PartitionResult(key="b", valid="unknown", ops=5, reason="time limit reached",
                            events_done=6, events_total=10),
        ],
    )  # fmt: skip
    assert _undecided(result) == "key 'b': time limit reached after 6/10 events"


@settings(max_examples=60, deadline=None)
@given(specs, st.integers(1, 50), st.booleans(), st.data())
def test_a_restart_order_reaches_the_same_verdict(
    spec: SynthSpec, seed: int, corrupt: bool, data: st.DataObject
) -> None:
    """A complete search gives one verdict whatever its tie-breaking seed."""
    model = MODELS[spec.model]
    ops = synthesize(spec, model)
    reads = [i for i, op in enumerate(ops) if op.known and op.f in ("get", "read")]
    if corrupt and reads:
        i = data.draw(st.sampled_from(reads))
        ops[i] = msgspec.structs.replace(ops[i], output=data.draw(st.sampled_from([0, 1, "<1>"])))
    verdicts = set()
    for _, part in partition(prepare(ops, model), model):
        for s in (0, seed):
            budget = Budget(time.monotonic() + 30, 1_000_000, 0, seed=s)
            verdicts.add((repr(part[0].key), s == 0, Search(model, part, budget, trace=False,
                                                             seed=s).run().valid))  # fmt: skip
    by_key: dict[str, set[object]] = {}
    for key, _, valid in verdicts:
        by_key.setdefault(key, set()).add(valid)
    assert all(len(v) == 1 for v in by_key.values())


def test_restart_step_limits_follow_the_luby_sequence() -> None:
    """Random-order restarts get 1 1 2 1 1 2 4 ... units; rank order doubles between."""
    from checkers.linearizability.check import _rounds

    rounds = _rounds()
    first = [next(rounds) for _ in range(16)]
    assert [seed for _, seed in first[2::2]] == [1, 2, 3, 4, 5, 6, 7]
    units = [steps // first[2][0] for steps, _ in first[2::2]]
    assert units == [1, 1, 2, 1, 1, 2, 4]
    ranked = [steps for steps, seed in first[1:] if seed == 0]
    assert all(b == 2 * a for a, b in itertools.pairwise(ranked))


def test_verify_checks_register_and_metastore_parts_of_a_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run mixing register and metastore traffic has a witness per part."""
    from tests.checkers.helpers import HistoryBuilder, write_run

    h = HistoryBuilder()
    h.op(0, "put", key="k1", value="a")
    h.op(1, "get", key="k1", value=None, result="a")
    h.op(2, "put", key="m/x", value="v")
    h.op(3, "get", key="m/x", value=None, result={"value": "v"})
    run = write_run(tmp_path / "run", h.lines(), plan={"name": "t", "seed": 1})
    assert main(["check", str(run), "--checker", "linearizable"]) == 0
    assert main(["verify", str(run)]) == 0
    out = capsys.readouterr().out
    assert "linearizable/register: witness verified" in out
    assert "linearizable/metastore: witness verified" in out


@settings(max_examples=60, deadline=None)
@given(specs, st.booleans(), st.data())
def test_a_search_resumed_after_every_step_reaches_the_same_verdict(
    spec: SynthSpec, corrupt: bool, data: st.DataObject
) -> None:
    """Stopping at a step limit and resuming loses nothing: same verdict,
    and a witness that verifies."""
    model = MODELS[spec.model]
    ops = synthesize(spec, model)
    reads = [i for i, op in enumerate(ops) if op.known and op.f in ("get", "read")]
    if corrupt and reads:
        i = data.draw(st.sampled_from(reads))
        ops[i] = msgspec.structs.replace(ops[i], output=data.draw(st.sampled_from([0, 1, "<1>"])))
    for key, part in partition(prepare(ops, model), model):
        whole = Search(model, part, Budget(time.monotonic() + 30, 10**6, 0), trace=False).run()
        search = Search(model, part, Budget(time.monotonic() + 30, 10**6, 0, 0), trace=False)
        search.check_mask = 0
        limit = 0
        while True:
            try:
                out = search.run()
                break
            except OutOfBudgetError:
                limit += 1
                search.budget = Budget(time.monotonic() + 30, 10**6, 0, limit)
        assert out.valid == whole.valid
        if out.valid is True:
            build_witness(model, key, part, out.order)


def test_verify_reruns_a_counterexample_checked_on_ranks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The metastore part of a mixed run is checked on revisions ranked by the
    watch record (checkers/meta_ranks.py); verify rebuilds the same ops."""
    from tests.checkers.helpers import HistoryBuilder, write_run

    h = HistoryBuilder()
    h.op(0, "put", key="k1", value="a")
    h.op(1, "put", key="m/x", value=1, result=10)
    h.op(1, "put", key="m/x", value=2, result=50)  # other writers wrote 11-49
    h.op(1, "get", key="m/x", result={"value": 2, "mod_revision": 10, "revision": 60})
    events = [
        {"key": "m/x", "revision": r, "type": "put", "value": v} for r, v in ((10, 1), (50, 2))
    ]
    responses = [{"revision": e["revision"], "events": [e]} for e in events]
    h.op(2, "watch", value={"prefix": "m/", "from": 1}, result={"responses": responses})
    run = write_run(tmp_path / "run", h.lines(), plan={"name": "t", "seed": 1})
    assert main(["check", str(run), "--checker", "linearizable"]) == 1
    results = json.loads((run / "results.json").read_text())
    figures = results["checkers"]["linearizable"]["figures"]["metastore"]
    assert figures["revisions"].startswith("ranked by the watch record")
    capsys.readouterr()
    assert main(["verify", str(run)]) == 0
    assert "linearizable/metastore: counterexample verified" in capsys.readouterr().out
